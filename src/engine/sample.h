/* Token choice: argmax, or sampling with temperature / top-k / top-p / min-p from a seeded generator, after
 * optional adjustments of the logits (logit bias, presence / frequency / repetition penalties). */
#ifndef QRT_SAMPLE_H
#define QRT_SAMPLE_H
#include "qwenrt.h"

typedef struct {
    uint64_t state;
} qrt_rng;

void qrt_rng_seed(qrt_rng *r, uint64_t seed);
double qrt_rng_uniform(qrt_rng *r); /* [0, 1) */

int qrt_sampling_greedy(const qrt_sampling *sp);
/* Any of min_p, the penalties or a logit bias set: the choice needs the logits on the host and a history. */
int qrt_sampling_adjusts(const qrt_sampling *sp);
/* probs[V] = the distribution sampling draws from: softmax(logits / temperature) restricted to the top_k
 * largest, then to the smallest set whose mass reaches top_p, then to tokens of probability at least min_p
 * times the largest, renormalised. work: [V] ints. */
void qrt_sampling_probs(const float *logits, int32_t V, const qrt_sampling *sp, float *probs, int32_t *work);
/* A token drawn from probs (which sum to 1 up to rounding). */
int32_t qrt_sample_from(const float *probs, int32_t V, qrt_rng *r);
/* The token choice of a generation: argmax when greedy, else a draw from qrt_sampling_probs; with adjustments,
 * of the adjusted logits. */
typedef struct {
    qrt_sampling sampling;
    int greedy;     /* the argmax of the raw logits is the choice (no adjustments): the backend may pick */
    int adjust;     /* qrt_sampling_adjusts */
    int32_t V;
    qrt_rng rng;
    float *p;       /* [V] the last distribution computed */
    int32_t *work;  /* [V] */
    float *adjusted;    /* [V] with adjust: the logits after bias and penalties */
    int32_t *count;     /* [V] with adjust: how often each token was chosen so far */
    unsigned char *seen; /* [V] with adjust: in the prompt (qrt_chooser_observe) or chosen */
} qrt_chooser;

qrt_status qrt_chooser_init(qrt_chooser *ch, int32_t V, const qrt_sampling *sp);
void qrt_chooser_free(qrt_chooser *ch);
/* Prompt tokens, for repetition_penalty (a no-op without adjustments). */
void qrt_chooser_observe(qrt_chooser *ch, const int32_t *ids, int32_t n);
/* The next token; with adjustments it also counts as generated for the penalties of the following ones. */
int32_t qrt_choose(qrt_chooser *ch, const float *logits);
#endif
