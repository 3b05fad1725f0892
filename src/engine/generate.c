/* Generation: prefill the prompt, then decode token by token or in speculative cycles. */
#include <string.h>

#include "engine/spec.h"
#include "model/model.h"
#include "util/argmax.h"

static int is_eos(const qrt_config *c, int32_t id) {
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos[i] == id) return 1;
    return 0;
}

/* Append a token; returns non-zero when generation must stop. */
static int emit(const qrt_config *c, const qrt_gen_opts *opts, qrt_gen_stats *st, int32_t *out, int32_t id) {
    out[st->n_new++] = id;
    if (opts->on_token && opts->on_token(id, opts->user)) return 1;
    if (opts->stop_eos && is_eos(c, id)) return 1;
    return st->n_new >= opts->max_new;
}

/* NaN weights would otherwise run silently (the greedy pick of a NaN row is meaningless): the logits after the
 * token at position pos must be finite. Without host logits (greedy) only the backend's pick is seen, which flags
 * such a row. */
static qrt_status check_logits(const float *logits, int32_t V, int32_t next, int32_t pos) {
    const int bad = logits ? !qrt_all_finite(logits, (size_t)V) : next == QRT_PICK_NONFINITE;
    return bad ? qrt_fail_nonfinite(pos, "") : QRT_OK;
}

/* Prefill ids in pieces of s->piece (the pieces qrt_forward cuts a long input into anyway, so the result is the
 * same), checking opts->cancel between them; the last piece gives the first choice. *cancelled: stopped early. */
static qrt_status prefill_pieces(qrt_session *s, const int32_t *ids, int32_t n, const qrt_gen_opts *opts, float *logits,
                                 int32_t *pick, int *cancelled) {
    int32_t start = 0;
    *cancelled = 0;
    if (opts->cancel)
        for (; n - start > s->piece; start += s->piece) {
            if (opts->cancel(opts->user)) return *cancelled = 1, QRT_OK;
            QRT_TRY(qrt_forward(s, ids + start, s->piece, NULL, 0, NULL));
        }
    if (opts->cancel && opts->cancel(opts->user)) return *cancelled = 1, QRT_OK;
    return logits ? qrt_prefill(s, ids + start, n - start, logits)
                  : qrt_forward_greedy(s, ids + start, n - start, NULL, 1, pick);
}

static qrt_status generate_plain(qrt_session *s, const int32_t *ids, int32_t n, const qrt_gen_opts *opts,
                                 int32_t *out, qrt_gen_stats *st) {
    const qrt_config *c = &s->m->cfg;
    qrt_chooser ch;
    QRT_TRY(qrt_chooser_init(&ch, c->vocab, &opts->sampling));
    qrt_chooser_observe(&ch, opts->history, opts->n_history);
    qrt_chooser_observe(&ch, ids, n);
    /* greedy takes each token's argmax from the backend; sampling (or a logits hook) needs the logits on the host */
    int host = !ch.greedy || opts->on_logits;
    float *logits = host ? qrt_calloc((size_t)c->vocab, sizeof(float)) : NULL;
    qrt_status rc = !host || logits ? QRT_OK : QRT_ERR_MEMORY;
    int32_t next = 0;
    int cancelled = 0;
    double t0 = qrt_now_ms(), t1 = t0;
    if (rc == QRT_OK) rc = prefill_pieces(s, ids, n, opts, logits, &next, &cancelled);
    t1 = qrt_now_ms();
    st->prefill_ms = t1 - t0;
    while (rc == QRT_OK && !cancelled && (rc = check_logits(logits, c->vocab, next, s->pos - 1)) == QRT_OK) {
        if (host) next = qrt_choose(&ch, logits);
        if (opts->on_logits) opts->on_logits(logits, c->vocab, next, opts->user);
        if (emit(c, opts, st, out, next)) break;
        const int32_t id = next;
        rc = host ? qrt_decode(s, id, logits) : qrt_forward_greedy(s, &id, 1, NULL, 1, &next);
    }
    st->decode_ms = qrt_now_ms() - t1;
    free(logits);
    qrt_chooser_free(&ch);
    return rc;
}

static qrt_status generate_spec(qrt_session *s, const int32_t *ids, int32_t n, int K, const qrt_gen_opts *opts,
                                int32_t *out, qrt_gen_stats *st) {
    const qrt_config *c = &s->m->cfg;
    qrt_spec sp;
    QRT_TRY(qrt_spec_init(&sp, s, K, opts, st));
    double t0 = qrt_now_ms();
    int32_t first;
    qrt_status rc = qrt_spec_prefill(&sp, ids, n, &first);
    double t1 = qrt_now_ms();
    st->prefill_ms = t1 - t0;
    int done = rc != QRT_OK || first < 0 || emit(c, opts, st, out, first);
    int32_t cycle[QRT_SPEC_MAX_K + 1];
    while (!done && rc == QRT_OK) {
        int got = 0, kept = 0;
        rc = qrt_spec_cycle(&sp, cycle, &got);
        /* the cycle's tokens go out before its rollback, so a stop inside them (end of text, max_new, on_token)
         * leaves the session holding exactly the tokens given out, ready to be continued */
        while (kept < got && !done) done = emit(c, opts, st, out, cycle[kept++]);
        if (rc == QRT_OK) qrt_spec_commit(&sp, cycle, kept, !done);
    }
    if (rc == QRT_OK) qrt_spec_finish(&sp);
    st->decode_ms = qrt_now_ms() - t1;
    qrt_spec_free(&sp);
    return rc;
}

qrt_status qrt_generate(qrt_session *s, const int32_t *ids, int32_t n, const qrt_gen_opts *opts, int32_t *out,
                        qrt_gen_stats *stats) {
    if (!s || !opts || !out || !ids || opts->max_new < 0) return qrt_fail(QRT_ERR_ARG, "qrt_generate: bad arguments");
    if (opts->spec_k < QRT_SPEC_DEFAULT || opts->spec_k > QRT_SPEC_MAX_K)
        return qrt_fail(QRT_ERR_ARG, "spec_k %d is outside [0, %d]", opts->spec_k, QRT_SPEC_MAX_K);
    qrt_gen_stats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    stats->n_prompt = n;
    if (opts->max_new == 0) return QRT_OK;
    int K = opts->spec_k == QRT_SPEC_DEFAULT ? (s->m->mtp.present ? QRT_SPEC_DEFAULT_K : 0) : opts->spec_k;
    /* drafts are verified against unadjusted logits and report none: such generations decode plainly */
    if (qrt_sampling_adjusts(&opts->sampling) || opts->on_logits) K = 0;
    if (n + opts->max_new - 1 > s->max_ctx - s->pos)
        return qrt_fail(QRT_ERR_CONTEXT, "prompt (%d) + new tokens (%d) exceed the session's context of %d; raise --ctx",
                        n, opts->max_new, s->max_ctx - s->pos);
    /* the MTP cache must hold every token the session does: an empty session, or one a speculative generation left */
    const int continuable = s->pos == 0 || qrt_session_kept_hidden(s) != NULL;
    if (opts->spec_k == QRT_SPEC_DEFAULT && !continuable) K = 0;
    if (K > 0 && !continuable)
        return qrt_fail(QRT_ERR_ARG, "speculative generation continues only a session that a speculative generation "
                        "left (the MTP head did not see the tokens of the last one); reset the session or use spec_k "
                        "0 (--spec-k 0)");
    return K ? generate_spec(s, ids, n, K, opts, out, stats) : generate_plain(s, ids, n, opts, out, stats);
}
