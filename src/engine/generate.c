/* Greedy generation: prefill the prompt, then decode one token at a time. */
#include <string.h>

#include "model/model.h"

int32_t qrt_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static int is_eos(const qrt_config *c, int32_t id) {
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos[i] == id) return 1;
    return 0;
}

qrt_status qrt_generate(qrt_session *s, const int32_t *ids, int32_t n, const qrt_gen_opts *opts, int32_t *out,
                        qrt_gen_stats *stats) {
    if (!s || !opts || !out || opts->max_new < 0) return qrt_fail(QRT_ERR_ARG, "qrt_generate: bad arguments");
    const qrt_config *c = &s->m->cfg;
    qrt_gen_stats local = {0};
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    stats->n_prompt = n;
    if (opts->max_new == 0) return QRT_OK;
    if (n + opts->max_new - 1 > s->max_ctx - s->pos)
        return qrt_fail(QRT_ERR_CONTEXT, "prompt (%d) + new tokens (%d) exceed the session's context of %d; raise --ctx",
                        n, opts->max_new, s->max_ctx - s->pos);
    float *logits = qrt_calloc((size_t)c->vocab, sizeof(float));
    if (!logits) return QRT_ERR_MEMORY;
    double t0 = qrt_now_ms();
    qrt_status st = qrt_prefill(s, ids, n, logits);
    double t1 = qrt_now_ms();
    stats->prefill_ms = t1 - t0;
    for (int32_t i = 0; st == QRT_OK && i < opts->max_new; i++) {
        int32_t next = qrt_argmax(logits, c->vocab);
        out[stats->n_new++] = next;
        if (opts->on_token && opts->on_token(next, opts->user)) break;
        if (opts->stop_eos && is_eos(c, next)) break;
        if (i + 1 < opts->max_new) st = qrt_decode(s, next, logits);
    }
    stats->decode_ms = qrt_now_ms() - t1;
    free(logits);
    return st;
}
