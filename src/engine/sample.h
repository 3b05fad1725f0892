/* Token choice: argmax, or sampling with temperature / top-k / top-p from a seeded generator. */
#ifndef QRT_SAMPLE_H
#define QRT_SAMPLE_H
#include "qwenrt.h"

typedef struct {
    uint64_t state;
} qrt_rng;

void qrt_rng_seed(qrt_rng *r, uint64_t seed);
double qrt_rng_uniform(qrt_rng *r); /* [0, 1) */

int qrt_sampling_greedy(const qrt_sampling *sp);
/* probs[V] = the distribution sampling draws from: softmax(logits / temperature) restricted to the top_k
 * largest and then to the smallest set whose mass reaches top_p, renormalised. work: [V] ints. */
void qrt_sampling_probs(const float *logits, int32_t V, const qrt_sampling *sp, float *probs, int32_t *work);
/* A token drawn from probs (which sum to 1 up to rounding). */
int32_t qrt_sample_from(const float *probs, int32_t V, qrt_rng *r);
/* The token choice of a generation: argmax when greedy, else a draw from qrt_sampling_probs. */
typedef struct {
    qrt_sampling sampling;
    int greedy;
    int32_t V;
    qrt_rng rng;
    float *p;       /* [V] the last distribution computed */
    int32_t *work;  /* [V] */
} qrt_chooser;

qrt_status qrt_chooser_init(qrt_chooser *ch, int32_t V, const qrt_sampling *sp);
void qrt_chooser_free(qrt_chooser *ch);
int32_t qrt_choose(qrt_chooser *ch, const float *logits);
#endif
