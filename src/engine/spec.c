#include "engine/spec.h"

#include <string.h>

#include "util/argmax.h"

qrt_status qrt_spec_init(qrt_spec *sp, qrt_session *s, int K, const qrt_gen_opts *opts, qrt_gen_stats *stats) {
    memset(sp, 0, sizeof *sp);
    if (!s->m->mtp.present)
        return qrt_fail(QRT_ERR_UNSUPPORTED, "speculative decoding needs an MTP head (mtp.* tensors); this model "
                        "has none: use --spec-k 0, or add the MTP weights with --mtp DIR");
    if (K < 1 || K > QRT_SPEC_MAX_K || K + 1 > QRT_MAX_VERIFY)
        return qrt_fail(QRT_ERR_ARG, "spec_k %d is outside [1, %d]", K, QRT_SPEC_MAX_K);
    const size_t V = (size_t)s->m->cfg.vocab;
    sp->s = s;
    sp->opts = opts;
    sp->stats = stats;
    sp->K = K;
    sp->hidden_row = -1;
    qrt_status st = qrt_chooser_init(&sp->ch, (int32_t)V, &opts->sampling);
    if (st == QRT_OK && !sp->ch.greedy) { /* greedy needs no logits on the host */
        sp->verify_logits = qrt_calloc((K + 1) * V, sizeof(float));
        sp->draft_logits = qrt_calloc(V, sizeof(float));
        sp->q = qrt_calloc(K * V, sizeof(float));
    }
    if (st != QRT_OK || (!sp->ch.greedy && (!sp->verify_logits || !sp->draft_logits || !sp->q))) {
        qrt_spec_free(sp);
        return st != QRT_OK ? st : QRT_ERR_MEMORY;
    }
    stats->spec_k = K;
    return QRT_OK;
}

void qrt_spec_free(qrt_spec *sp) {
    free(sp->verify_logits);
    free(sp->draft_logits);
    free(sp->q);
    qrt_chooser_free(&sp->ch);
    memset(sp, 0, sizeof *sp);
}

/* The main model over T tokens, n_rows of them requested: greedy keeps only their picks (sp->verify_picks),
 * sampling their logits (sp->verify_logits). */
static qrt_status main_forward(qrt_spec *sp, const int32_t *ids, int T, const int32_t *rows, int n_rows) {
    return sp->ch.greedy ? qrt_forward_greedy(sp->s, ids, T, rows, n_rows, sp->verify_picks)
                         : qrt_forward(sp->s, ids, T, rows, n_rows, sp->verify_logits);
}

/* The main forward's n_rows rows, the first after the token at position pos0 and the others consecutive, must be
 * finite: a NaN row has no right choice, and the verify would accept drafts against garbage. */
static qrt_status check_main(const qrt_spec *sp, int n_rows, int32_t pos0) {
    const size_t V = (size_t)sp->s->m->cfg.vocab;
    for (int j = 0; j < n_rows; j++) {
        const int bad = sp->ch.greedy ? sp->verify_picks[j] == QRT_PICK_NONFINITE
                                      : !qrt_all_finite(sp->verify_logits + (size_t)j * V, V);
        if (bad) return qrt_fail_nonfinite(pos0 + j, "");
    }
    return QRT_OK;
}

/* The MTP head's latest output, the next draft's source, must be finite too (pos: the draft's position). */
static qrt_status check_draft(const qrt_spec *sp, int32_t pos) {
    const int bad = sp->ch.greedy ? sp->draft_pick == QRT_PICK_NONFINITE
                                  : !qrt_all_finite(sp->draft_logits, (size_t)sp->s->m->cfg.vocab);
    return bad ? qrt_fail_nonfinite(pos, " of the MTP head") : QRT_OK;
}

/* The main model's choice after requested row j: its greedy pick, or a draw from its logits. */
static int32_t main_choice(qrt_spec *sp, int j) {
    return sp->ch.greedy ? sp->verify_picks[j]
                         : qrt_choose(&sp->ch, sp->verify_logits + (size_t)j * sp->s->m->cfg.vocab);
}

/* qrt_mtp_forward; with want, the last row's output for the next draft: its greedy pick (sp->draft_pick) or its
 * logits (sp->draft_logits). */
static void mtp_forward(qrt_spec *sp, const float *h, const int32_t *tokens, int T, int pos0, int want) {
    const int greedy = sp->ch.greedy;
    qrt_mtp_forward(sp->s, h, tokens, T, pos0, want && !greedy ? sp->draft_logits : NULL,
                    want && greedy ? &sp->draft_pick : NULL);
}

/* The k-th draft (1-based) for absolute position pos, from the MTP's latest output, into *out; keeps q_k when
 * sampling. A draft hook's choice must be a token: the MTP head and the verify embed it. */
static qrt_status draft(qrt_spec *sp, int k, int32_t pos, int32_t *out) {
    const int32_t V = sp->s->m->cfg.vocab;
    int32_t d;
    if (sp->ch.greedy) {
        d = sp->draft_pick;
    } else {
        float *q = sp->q + (size_t)(k - 1) * V;
        qrt_sampling_probs(sp->draft_logits, V, &sp->ch.sampling, q, sp->ch.work);
        d = qrt_sample_from(q, V, &sp->ch.rng);
    }
    if (sp->opts->draft_hook) d = sp->opts->draft_hook(k, d, pos, sp->opts->draft_user);
    if (d < 0 || d >= V)
        return qrt_fail(QRT_ERR_ARG, "the draft hook returned token %d for draft %d; expected an id in [0, %d)", d, k,
                        V);
    *out = d;
    return QRT_OK;
}

qrt_status qrt_spec_prefill(qrt_spec *sp, const int32_t *ids, int32_t n, int32_t *first) {
    qrt_session *s = sp->s;
    const int32_t P0 = s->pos;
    const float *kept = qrt_session_kept_hidden(s);
    QRT_ASSERT(P0 == 0 || kept);
    int32_t pairs[QRT_MAX_T];
    /* a continuation: the MTP pair at the session's last token is redone with the token that follows it now (the
     * generation that left the session paired it with its own last token, which the new prompt need not repeat) */
    if (P0) mtp_forward(sp, kept, ids, 1, P0 - 1, 0);
    /* piece by piece, so each piece's final hidden states are still in scratch when the MTP reads them */
    for (int32_t start = 0; start < n; start += s->piece) {
        int T = QRT_MIN(s->piece, n - start), last = start + T == n;
        if (sp->opts->cancel && sp->opts->cancel(sp->opts->user)) return *first = -1, QRT_OK;
        QRT_TRY(main_forward(sp, ids + start, T, NULL, last));
        if (last) QRT_TRY(check_main(sp, 1, n - 1));
        if (last) *first = main_choice(sp, 0);
        /* the MTP pair at position t is (hidden of token t, token t+1) */
        for (int t = 0; t < T; t++) pairs[t] = start + t + 1 < n ? ids[start + t + 1] : *first;
        mtp_forward(sp, qrt_session_hidden(s, 0), pairs, T, P0 + start, last);
        sp->hidden_row = T - 1;
    }
    sp->next = *first;
    return QRT_OK;
}

/* Greedy acceptance: drafts while they equal the main argmax; the bonus is the main argmax after them. */
static int accept_greedy(qrt_spec *sp, const int32_t *d, int K, int32_t *bonus) {
    int j = 0;
    while (j < K && sp->verify_picks[j] == d[j]) j++;
    *bonus = sp->verify_picks[j];
    return j;
}

/* Rejection sampling: accept d_k with probability min(1, p(d)/q(d)); at the first rejection draw from
 * norm(max(0, p − q)); after K accepts draw the bonus from p. */
static int accept_sampled(qrt_spec *sp, const int32_t *d, int K, int32_t *bonus) {
    const int32_t V = sp->s->m->cfg.vocab;
    for (int j = 0; j < K; j++) {
        const float *q = sp->q + (size_t)j * V;
        float *p = sp->ch.p;
        qrt_sampling_probs(sp->verify_logits + (size_t)j * V, V, &sp->ch.sampling, p, sp->ch.work);
        float pd = p[d[j]], qd = q[d[j]];
        double u = qrt_rng_uniform(&sp->ch.rng);
        if (qd > 0 ? u * qd < pd : pd > 0) continue;
        double mass = 0;
        for (int32_t i = 0; i < V; i++) mass += p[i] = p[i] > q[i] ? p[i] - q[i] : 0;
        if (mass > 0)
            for (int32_t i = 0; i < V; i++) p[i] = (float)(p[i] / mass);
        else /* p == q: the residual is empty and p itself is the right distribution */
            qrt_sampling_probs(sp->verify_logits + (size_t)j * V, V, &sp->ch.sampling, p, sp->ch.work);
        *bonus = qrt_sample_from(p, V, &sp->ch.rng);
        return j;
    }
    *bonus = qrt_choose(&sp->ch, sp->verify_logits + (size_t)K * V);
    return K;
}

qrt_status qrt_spec_cycle(qrt_spec *sp, int32_t *out, int *n_out) {
    qrt_session *s = sp->s;
    const int32_t P = s->pos;
    *n_out = 0;
    /* near the end of the context, draft fewer; with no room for a draft, decode plainly */
    int K = QRT_MIN(sp->K, s->max_ctx - P - 1);
    sp->cycle_pos = P;
    sp->cycle_K = QRT_MAX(K, 0);
    if (K < 1) {
        QRT_TRY(main_forward(sp, &sp->next, 1, NULL, 1));
        QRT_TRY(check_main(sp, 1, P));
        out[0] = main_choice(sp, 0);
        *n_out = 1;
        return QRT_OK;
    }
    int32_t toks[QRT_SPEC_MAX_K + 1];
    int32_t *d = toks + 1;
    toks[0] = sp->next;
    double t0 = qrt_now_ms();
    QRT_TRY(check_draft(sp, P + 1));
    QRT_TRY(draft(sp, 1, P + 1, &d[0]));
    for (int k = 2; k <= K; k++) {
        mtp_forward(sp, qrt_mtp_hidden(s), &d[k - 2], 1, P + k - 2, 1);
        QRT_TRY(check_draft(sp, P + k));
        QRT_TRY(draft(sp, k, P + k, &d[k - 1]));
    }
    double t1 = qrt_now_ms();
    int32_t rows[QRT_SPEC_MAX_K + 1];
    for (int i = 0; i <= K; i++) rows[i] = i;
    qrt_session_begin_verify(s);
    QRT_TRY(main_forward(sp, toks, K + 1, rows, K + 1));
    double t2 = qrt_now_ms();
    QRT_TRY(check_main(sp, K + 1, P));
    int32_t bonus;
    int j = sp->ch.greedy ? accept_greedy(sp, d, K, &bonus) : accept_sampled(sp, d, K, &bonus);
    if (sp->opts->accept_hook) { /* simulated acceptance (benchmarks): accept the drafts as they are */
        j = QRT_MAX(0, QRT_MIN(K, sp->opts->accept_hook(K, j, sp->opts->accept_user)));
        bonus = main_choice(sp, j);
    }
    for (int i = 0; i < j; i++) out[i] = d[i];
    out[j] = bonus;
    qrt_gen_stats *st = sp->stats;
    st->attempts++;
    st->accepts += j;
    st->full_accepts += j == K;
    for (int i = 0; i < j; i++) st->accepted_at[i]++;
    st->chain_ms += (t1 - t0) + (qrt_now_ms() - t2);
    st->verify_ms += t2 - t1;
    *n_out = j + 1;
    return QRT_OK;
}

void qrt_spec_commit(qrt_spec *sp, const int32_t *out, int n_keep, int more) {
    qrt_session *s = sp->s;
    const double t0 = qrt_now_ms();
    if (sp->cycle_K) qrt_session_rollback(s, n_keep); /* a verify; the plain step at the context's end keeps its one */
    /* the MTP catches up on the kept tokens from the main model's hidden states; its last row's logits give the
     * next cycle's first draft */
    mtp_forward(sp, qrt_session_hidden(s, 0), out, n_keep, sp->cycle_pos, more);
    sp->hidden_row = n_keep - 1;
    sp->next = out[n_keep - 1];
    sp->stats->chain_ms += qrt_now_ms() - t0;
}

void qrt_spec_finish(qrt_spec *sp) {
    if (sp->hidden_row >= 0) qrt_session_keep_hidden(sp->s, sp->hidden_row);
}
