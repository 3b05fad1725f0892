#include "engine/sample.h"

#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/argmax.h"
#include "util/common.h"
#include "util/mix64.h"

void qrt_rng_seed(qrt_rng *r, uint64_t seed) { r->state = seed ^ QRT_MIX64_STEP; }

/* splitmix64: small, fast, and good enough for sampling */
double qrt_rng_uniform(qrt_rng *r) { return (double)(qrt_splitmix64(&r->state) >> 11) * (1.0 / 9007199254740992.0); }

int qrt_sampling_greedy(const qrt_sampling *sp) { return !sp || sp->temperature <= 0; }

int qrt_sampling_adjusts(const qrt_sampling *sp) {
    return sp && (sp->min_p > 0 || (sp->repetition_penalty > 0 && sp->repetition_penalty != 1) ||
                  sp->presence_penalty != 0 || sp->frequency_penalty != 0 || sp->n_logit_bias > 0);
}

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
    /* the best candidate has weight exp(0) = 1 before normalising, so min_p * p_max is min_p itself */
    if (sp->min_p > 0) {
        sum = 0;
        for (int32_t i = 0; i < n; i++) {
            if (probs[work[i]] < sp->min_p) probs[work[i]] = 0;
            sum += probs[work[i]];
        }
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
    ch->adjust = qrt_sampling_adjusts(sp);
    ch->greedy = qrt_sampling_greedy(sp) && !ch->adjust;
    ch->V = V;
    qrt_rng_seed(&ch->rng, ch->sampling.seed);
    if (ch->greedy) return QRT_OK;
    ch->p = qrt_calloc((size_t)V, sizeof(float));
    ch->work = qrt_calloc((size_t)V, sizeof(int32_t));
    int adjust_ok = !ch->adjust || ((ch->adjusted = qrt_calloc((size_t)V, sizeof(float))) &&
                                    (ch->count = qrt_calloc((size_t)V, sizeof(int32_t))) &&
                                    (ch->seen = qrt_calloc((size_t)V, 1)));
    if (!ch->p || !ch->work || !adjust_ok) {
        qrt_chooser_free(ch);
        return QRT_ERR_MEMORY;
    }
    return QRT_OK;
}

void qrt_chooser_free(qrt_chooser *ch) {
    free(ch->p), free(ch->work), free(ch->adjusted), free(ch->count), free(ch->seen);
    ch->p = ch->adjusted = NULL;
    ch->work = ch->count = NULL;
    ch->seen = NULL;
}

void qrt_chooser_observe(qrt_chooser *ch, const int32_t *ids, int32_t n) {
    if (!ch->adjust) return;
    for (int32_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < ch->V) ch->seen[ids[i]] = 1;
}

/* ch->adjusted = logits after the penalties (llama.cpp's order: repetition, then presence / frequency) and the
 * bias. A bias of -100 bans the token, as OpenAI documents, rather than only lowering it. */
static const float *adjust_logits(qrt_chooser *ch, const float *logits) {
    const qrt_sampling *sp = &ch->sampling;
    float *a = ch->adjusted, rp = sp->repetition_penalty;
    memcpy(a, logits, (size_t)ch->V * sizeof *a);
    if (rp > 0 && rp != 1)
        for (int32_t i = 0; i < ch->V; i++)
            if (ch->seen[i]) a[i] = a[i] > 0 ? a[i] / rp : a[i] * rp;
    if (sp->presence_penalty != 0 || sp->frequency_penalty != 0)
        for (int32_t i = 0; i < ch->V; i++)
            if (ch->count[i]) a[i] -= (float)ch->count[i] * sp->frequency_penalty + sp->presence_penalty;
    for (int32_t k = 0; k < sp->n_logit_bias; k++) {
        const qrt_logit_bias *b = &sp->logit_bias[k];
        if (b->id >= 0 && b->id < ch->V) a[b->id] = b->bias <= -100 ? -INFINITY : a[b->id] + b->bias;
    }
    return a;
}

int32_t qrt_choose(qrt_chooser *ch, const float *logits) {
    if (ch->greedy) return qrt_argmax(logits, ch->V);
    const float *l = ch->adjust ? adjust_logits(ch, logits) : logits;
    int32_t id = qrt_argmax(l, ch->V);
    /* every token banned: the model's own choice rather than a distribution of NaNs */
    if (l[id] == -INFINITY) id = qrt_argmax(logits, ch->V);
    else if (!qrt_sampling_greedy(&ch->sampling)) {
        qrt_sampling_probs(l, ch->V, &ch->sampling, ch->p, ch->work);
        id = qrt_sample_from(ch->p, ch->V, &ch->rng);
    }
    if (ch->adjust) ch->count[id]++, ch->seen[id] = 1;
    return id;
}

qrt_status qrt_fail_nonfinite(int32_t pos, const char *who) {
    return qrt_fail(QRT_ERR_NONFINITE, "non-finite logits%s at position %d: the weights or a kernel produced NaN; "
                    "run `qwenrt inspect --check DIR` on the checkpoint folder", who, pos);
}
