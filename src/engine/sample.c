#include "engine/sample.h"

#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"

void qrt_rng_seed(qrt_rng *r, uint64_t seed) { r->state = seed ^ 0x9e3779b97f4a7c15ull; }

/* splitmix64: small, fast, and good enough for sampling */
static uint64_t next_u64(qrt_rng *r) {
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double qrt_rng_uniform(qrt_rng *r) { return (double)(next_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

int qrt_sampling_greedy(const qrt_sampling *sp) { return !sp || sp->temperature <= 0; }

static const float *sort_keys;
static int by_logit_desc(const void *a, const void *b) {
    float x = sort_keys[*(const int32_t *)a], y = sort_keys[*(const int32_t *)b];
    if (x != y) return x > y ? -1 : 1;
    return *(const int32_t *)a - *(const int32_t *)b; /* ties by id: a total, reproducible order */
}

void qrt_sampling_probs(const float *logits, int32_t V, const qrt_sampling *sp, float *probs, int32_t *work) {
    /* candidates, best first; without top-k/top-p every token is a candidate and no sort is needed */
    int32_t n = V;
    int filtered = sp->top_k > 0 || (sp->top_p > 0 && sp->top_p < 1);
    for (int32_t i = 0; i < V; i++) work[i] = i;
    if (filtered) {
        sort_keys = logits;
        qsort(work, (size_t)V, sizeof *work, by_logit_desc);
        if (sp->top_k > 0 && sp->top_k < n) n = sp->top_k;
    }
    float mx = -INFINITY;
    for (int32_t i = 0; i < n; i++) mx = fmaxf(mx, logits[work[i]]);
    double sum = 0;
    for (int32_t i = 0; i < V; i++) probs[i] = 0;
    for (int32_t i = 0; i < n; i++) sum += probs[work[i]] = expf((logits[work[i]] - mx) / sp->temperature);
    if (filtered && sp->top_p > 0 && sp->top_p < 1) {
        double kept = 0;
        int32_t keep = 0;
        while (keep < n && kept < sp->top_p * sum) kept += probs[work[keep++]];
        for (int32_t i = keep; i < n; i++) probs[work[i]] = 0;
        sum = kept;
    }
    for (int32_t i = 0; i < V; i++) probs[i] = (float)(probs[i] / sum);
}

int32_t qrt_sample_from(const float *probs, int32_t V, qrt_rng *r) {
    double u = qrt_rng_uniform(r), acc = 0;
    int32_t last = 0;
    for (int32_t i = 0; i < V; i++) {
        if (probs[i] <= 0) continue;
        acc += probs[i];
        last = i;
        if (u < acc) return i;
    }
    return last; /* rounding left u just above the total */
}

qrt_status qrt_chooser_init(qrt_chooser *ch, int32_t V, const qrt_sampling *sp) {
    memset(ch, 0, sizeof *ch);
    if (sp) ch->sampling = *sp;
    ch->greedy = qrt_sampling_greedy(sp);
    ch->V = V;
    qrt_rng_seed(&ch->rng, ch->sampling.seed);
    if (ch->greedy) return QRT_OK;
    ch->p = qrt_calloc((size_t)V, sizeof(float));
    ch->work = qrt_calloc((size_t)V, sizeof(int32_t));
    if (!ch->p || !ch->work) {
        qrt_chooser_free(ch);
        return QRT_ERR_MEMORY;
    }
    return QRT_OK;
}

void qrt_chooser_free(qrt_chooser *ch) {
    free(ch->p);
    free(ch->work);
    ch->p = NULL;
    ch->work = NULL;
}

int32_t qrt_choose(qrt_chooser *ch, const float *logits) {
    if (ch->greedy) return qrt_argmax(logits, ch->V);
    qrt_sampling_probs(logits, ch->V, &ch->sampling, ch->p, ch->work);
    return qrt_sample_from(ch->p, ch->V, &ch->rng);
}

int qrt_all_finite(const float *x, size_t n) {
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= isfinite(x[i]) != 0; /* no early exit: the loop vectorizes */
    return ok;
}

qrt_status qrt_fail_nonfinite(int32_t pos, const char *who) {
    return qrt_fail(QRT_ERR_NONFINITE, "non-finite logits%s at position %d: the weights or a kernel produced NaN; "
                    "run `qwenrt inspect --check DIR` on the checkpoint folder", who, pos);
}

int32_t qrt_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}
