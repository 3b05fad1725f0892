/* The forward pass of the Qwen3.5/3.6 text model, written once against the backend table. Reads top to bottom
 * like docs/model.md §2-3: embedding → L × (norm → GDN or gated attention → residual → norm → SwiGLU MLP →
 * residual) → norm → lm_head; then the MTP head; then rollback of a verify's GDN state. */
#include "model/model_internal.h"

/* ---------------------------------------------------------------------------------------------------
 * Forward pass (docs/model.md §2) for T ≤ s->piece tokens. Blocks read sc->x and write sc->y. */

/* Where a forward's requested rows go: their logits (host [n_rows][V]), or only their greedy picks (sc->picks,
 * downloaded at the end into host [n_rows]). */
typedef struct {
    float *logits;
    int32_t *picks;
} row_out;

/* A forward piece's arguments (forward_piece). */
typedef struct {
    const int32_t *ids, *rows, *idx;
    int T, n_rows;
    const row_out *out;
} piece_args;

/* The forward of one piece, top down: piece_body → decoder_stack → decoder_layer → gdn_block or attention_block,
 * mlp_block; lm_head. */
static void decoder_stack(qrt_session *s, const qrt_layer *layers, const qrt_layer_kind *kinds, qrt_layer_state *ls,
                          int n, int pos, int T, const float *final_norm, float *out);
static void decoder_layer(qrt_session *s, const qrt_layer *l, qrt_layer_kind kind, qrt_layer_state *ls, int pos,
                          int T, const float *next_norm, float *next_x);
static void gdn_block(qrt_session *s, const qrt_layer *l, qrt_layer_state *ls, int T);
static void attention_block(qrt_session *s, const qrt_layer *l, const qrt_kv *kv, int pos, int T);
static void mlp_block(qrt_session *s, const qrt_layer *l, int T);
static void lm_head(qrt_session *s, const qrt_linear *W, const float *h, int r, float *logits, int32_t *pick);

/* Embedding → the decoder layers, the last one ending in the final norm (sc->hfinal) → lm_head of the requested
 * rows. */
static void piece_body(qrt_session *s, const void *arg) {
    const piece_args *a = arg;
    const qrt_model *m = s->m;
    const qrt_config *c = &m->cfg;
    qrt_scratch *sc = &s->sc;
    const size_t D = (size_t)c->hidden;
    m->be->embed(&m->embed, a->ids, a->T, sc->h);
    decoder_stack(s, m->layers, c->layer_kind, s->ls, c->n_layers, s->pos, a->T, m->final_norm, sc->hfinal);
    /* runs of consecutive rows (a verify's K + 1) share one lm_head matmul; their idx are consecutive too */
    for (int k = 0, r; k < a->n_rows; k += r) {
        for (r = 1; k + r < a->n_rows && r < QRT_MAX_VERIFY && a->rows[k + r] == a->rows[k] + r;) r++;
        lm_head(s, &m->lm_head, sc->hfinal + (size_t)a->rows[k] * D, r,
                a->out->logits ? a->out->logits + (size_t)a->idx[k] * c->vocab : NULL,
                a->out->picks ? sc->picks + a->idx[k] : NULL);
    }
}

/* The decoder layers in order on sc->h; the last one's residual add ends in final_norm → out [T][D]. */
static void decoder_stack(qrt_session *s, const qrt_layer *layers, const qrt_layer_kind *kinds, qrt_layer_state *ls,
                          int n, int pos, int T, const float *final_norm, float *out) {
    const qrt_config *c = &s->m->cfg;
    s->m->be->rmsnorm(s->sc.h, layers[0].in_norm, T, c->hidden, c->rms_eps, s->sc.x);
    for (int i = 0; i < n; i++) {
        const int last = i == n - 1;
        decoder_layer(s, &layers[i], kinds[i], &ls[i], pos, T, last ? final_norm : layers[i + 1].in_norm,
                      last ? out : s->sc.x);
    }
}

/* One decoder layer (§2) on the residual stream sc->h [T][D], whose input norm the caller has already
 * written to sc->x. The MLP's residual add is fused with the norm that follows it, which belongs to the next
 * layer (or the final norm): next_norm [D] and its output next_x [T][D]. */
static void decoder_layer(qrt_session *s, const qrt_layer *l, qrt_layer_kind kind, qrt_layer_state *ls, int pos,
                          int T, const float *next_norm, float *next_x) {
    const qrt_config *c = &s->m->cfg;
    const qrt_backend *be = s->m->be;
    qrt_scratch *sc = &s->sc;
    const int D = c->hidden;
    if (kind == QRT_LAYER_LINEAR) gdn_block(s, l, ls, T);
    else attention_block(s, l, &ls->kv, pos, T);
    be->add_rmsnorm(sc->h, sc->y, l->post_norm, T, D, c->rms_eps, sc->x);
    mlp_block(s, l, T);
    be->add_rmsnorm(sc->h, sc->y, next_norm, T, D, c->rms_eps, next_x);
}

/* y[i] = x · part[i]ᵀ: one op when the backend has it, else the parts one by one (the same results). */
static void matmul_group(const qrt_backend *be, const qrt_linear_group *g, const float *x, int T, float *const *y) {
    if (be->matmul_group) be->matmul_group(g, x, T, y);
    else
        for (int i = 0; i < g->n; i++) be->matmul(g->part[i], x, T, y[i]);
}

/* Gated DeltaNet mixer (docs/model.md §2.1). During a verify (s->keeping), the inputs each token's
 * recurrent step needs are kept so qrt_session_rollback can re-apply a prefix of them: the projections and the conv
 * write straight into the layer's kept buffers (four copies per layer fewer than writing scratch and copying them),
 * the conv state is copied, and the recurrence writes its end state to S_verified, leaving S as the start state (no 3 MB copy
 * of the state each way per layer). */
static void gdn_block(qrt_session *s, const qrt_layer *l, qrt_layer_state *ls, int T) {
    const qrt_model *m = s->m;
    const qrt_config *c = &m->cfg;
    const qrt_backend *be = m->be;
    qrt_scratch *sc = &s->sc;
    const int Hk = c->gdn_k_heads, Hv = c->gdn_v_heads, Dk = c->gdn_dk, Dv = c->gdn_dv, cd = m->conv_dim;
    const int keep = s->keeping;
    float *mixed = keep ? ls->kept_mixed : sc->mixed, *conv = keep ? ls->kept_conv : sc->conv; /* [T][cd] */
    float *a = keep ? ls->kept_a : sc->a, *b = keep ? ls->kept_b : sc->b;                      /* [T][Hv] */
    float *const outs[] = {mixed, sc->z, b, a}; /* in_qkv, in_z, in_b, in_a */
    matmul_group(be, &l->mixer_in, sc->x, T, outs);
    if (keep) be->copy(ls->conv_snap, ls->conv, sizeof(float) * (c->conv_kernel - 1) * cd);
    be->conv1d_silu(mixed, ls->conv, l->conv_w, T, cd, c->conv_kernel, conv);
    /* HF takes the chunked form for any T > 1 without a cache; we take it only in a prefill piece long enough
     * for it to pay. Decode and every verify (kept for rollback, up to K + 1 = 17 tokens) run the recurrence token
     * by token: that is what makes a verify's state bit-identical to single-token decoding. The two forms agree to
     * f32 rounding. */
    const int chunked = !keep && T > 16;
    be->gdn(conv, a, b, l->A_log, l->dt_bias, ls->S, keep ? ls->S_verified : ls->S, T, Hk, Hv, Dk, Dv, chunked, sc->z,
            l->gdn_norm, c->rms_eps, sc->core);
    be->matmul(&l->out, sc->core, T, sc->y);
}

/* Gated full attention (§2.2) at positions pos..pos+T-1, appending T entries to the KV cache. */
static void attention_block(qrt_session *s, const qrt_layer *l, const qrt_kv *kv, int pos, int T) {
    const qrt_model *m = s->m;
    const qrt_config *c = &m->cfg;
    const qrt_backend *be = m->be;
    qrt_scratch *sc = &s->sc;
    const int Hq = c->n_heads, Hkv = c->n_kv_heads, Dh = c->head_dim;
    float *const outs[] = {sc->qg, sc->ak, sc->av}; /* q, k, v */
    matmul_group(be, &l->mixer_in, sc->x, T, outs);
    /* q_proj rows are per head [query | gate]: the query is normed and rotated in place, the gate read by
     * attention, which applies it to its output */
    be->attn_prep(sc->qg, sc->ak, sc->av, l->q_norm, l->k_norm, c->rms_eps, kv, T, pos, Hq, Hkv, Dh, c->rotary_dim,
                  c->rope_theta);
    be->attention(sc->qg, kv, T, pos, Hq, Hkv, Dh, sc->attn);
    be->matmul(&l->o, sc->attn, T, sc->y);
}

static void mlp_block(qrt_session *s, const qrt_layer *l, int T) {
    const qrt_model *m = s->m;
    qrt_scratch *sc = &s->sc;
    const size_t F = (size_t)m->cfg.intermediate;
    float *const outs[] = {sc->mg, sc->mu}; /* gate, up */
    if (m->be->matmul_swiglu) m->be->matmul_swiglu(&l->mlp_in, sc->x, T, sc->mg, sc->mu);
    else {
        matmul_group(m->be, &l->mlp_in, sc->x, T, outs);
        m->be->swiglu(sc->mg, sc->mu, (size_t)T * F, sc->mg);
    }
    m->be->matmul(&l->down, sc->mg, T, sc->y);
}

/* lm_head W (the model's, or the draft steps' copy) over r ≤ QRT_MAX_VERIFY consecutive rows h (backend [r][D]) →
 * their logits (host [r][V]); or, with pick (backend [r]) non-NULL, only their argmax. One matmul for the r rows: the
 * weights (715 MB at the 27B shape in NVFP4) are read once instead of r times, and each row's logits are the bits a
 * one-row call gives (matmul is batch-invariant). */
static void lm_head(qrt_session *s, const qrt_linear *W, const float *h, int r, float *logits, int32_t *pick) {
    const qrt_model *m = s->m;
    QRT_ASSERT(r >= 1 && r <= QRT_MAX_VERIFY);
    m->be->matmul(W, h, r, s->sc.logits);
    if (pick) m->be->argmax(s->sc.logits, r, m->cfg.vocab, pick);
    else m->be->download(logits, s->sc.logits, sizeof(float) * (size_t)r * m->cfg.vocab);
}

/* ---------------------------------------------------------------------------------------------------
 * Running a forward: the arguments checked, long inputs in pieces, the requested rows, the public calls. */

/* One piece of T ≤ s->piece tokens; for each k < n_rows, the output after token rows[k] of this piece is the
 * call's requested row idx[k]. Leaves every token's final-normed hidden in sc->hfinal. A greedy decode step or verify
 * (T ≤ QRT_GRAPH_MAX_T, one piece, so idx[k] = k) runs through its graph. */
static void forward_piece(qrt_session *s, const int32_t *ids, int T, const int32_t *rows, const int32_t *idx,
                          int n_rows, const row_out *out) {
    const piece_args a = {ids, rows, idx, T, n_rows, out};
    if (out->picks && T <= QRT_GRAPH_MAX_T && (T == 1 || n_rows == T)) { /* a decode step or a verify */
        qrt_graph_entry key = {.kind = QRT_GRAPH_MAIN, .T = T, .keep = s->keeping};
        for (int k = 0; k < n_rows; k++) key.rows |= 1u << rows[k];
        qrt_run_graphed(s, &key, s->pos, ids, T, piece_body, &a);
    } else {
        piece_body(s, &a);
    }
    s->pos += T;
}

static qrt_status forward_rows(qrt_session *s, const int32_t *ids, int32_t n, const int32_t *rows, int32_t n_rows,
                               row_out out) {
    if (!s || !ids || n < 1) return qrt_fail(QRT_ERR_ARG, "qrt_forward: need at least one token");
    const qrt_config *c = &s->m->cfg;
    int32_t last = n - 1;
    if (!rows) {
        if (n_rows > 1) return qrt_fail(QRT_ERR_ARG, "qrt_forward: rows is NULL but n_rows is %d", n_rows);
        rows = &last;
    }
    if (n_rows < 0 || (n_rows && !out.logits && !out.picks) || (out.picks && n_rows > s->piece))
        return qrt_fail(QRT_ERR_ARG, "qrt_forward: bad logits request");
    if (n > s->max_ctx - s->pos)
        return qrt_fail(QRT_ERR_CONTEXT, "%d tokens do not fit: the session holds %d of %d; make the session with a "
                        "larger context (--ctx)", n, s->pos, s->max_ctx);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab)
            return qrt_fail(QRT_ERR_ARG, "token id %d at index %d is outside the vocabulary [0, %d)", ids[i], i,
                            c->vocab);
    for (int32_t i = 0; i < n_rows; i++)
        if (rows[i] < 0 || rows[i] >= n || (i && rows[i] <= rows[i - 1]))
            return qrt_fail(QRT_ERR_ARG, "logits rows must be increasing indices into the %d tokens of this call "
                            "(row %d is %d)", n, i, rows[i]);
    /* a verify's state is complete only after qrt_session_rollback: a forward without one keeps all of it */
    if (s->kept_T) qrt_session_rollback(s, s->kept_T);
    if (s->keeping && n > QRT_MAX_VERIFY) s->keeping = 0;
    s->kept_T = s->keeping ? n : 0;
    s->kept_pos = s->pos;
    /* Long inputs run in pieces; each piece computes the requested rows that fall inside it. */
    int32_t piece_rows[QRT_MAX_T], piece_idx[QRT_MAX_T];
    for (int32_t start = 0; start < n; start += s->piece) {
        int T = QRT_MIN(s->piece, n - start), k = 0;
        for (int32_t i = 0; i < n_rows; i++)
            if (rows[i] >= start && rows[i] < start + T) {
                piece_rows[k] = rows[i] - start;
                piece_idx[k++] = i;
            }
        forward_piece(s, ids + start, T, piece_rows, piece_idx, k, &out);
    }
    if (out.picks && n_rows) s->m->be->download(out.picks, s->sc.picks, sizeof(int32_t) * (size_t)n_rows);
    s->keeping = 0;
    return QRT_OK;
}

qrt_status qrt_forward(qrt_session *s, const int32_t *ids, int32_t n, const int32_t *rows, int32_t n_rows,
                       float *logits) {
    return forward_rows(s, ids, n, rows, n_rows, (row_out){logits, NULL});
}

qrt_status qrt_forward_greedy(qrt_session *s, const int32_t *ids, int32_t n, const int32_t *rows, int32_t n_rows,
                              int32_t *picks) {
    return forward_rows(s, ids, n, rows, n_rows, (row_out){NULL, picks});
}

const float *qrt_session_hidden(const qrt_session *s, int t) {
    return s->sc.hfinal + (size_t)t * s->m->cfg.hidden;
}

qrt_status qrt_prefill(qrt_session *s, const int32_t *ids, int32_t n, float *logits) {
    return qrt_forward(s, ids, n, NULL, 1, logits);
}

qrt_status qrt_decode(qrt_session *s, int32_t id, float *logits) { return qrt_forward(s, &id, 1, NULL, 1, logits); }

/* ---------------------------------------------------------------------------------------------------
 * The MTP head (docs/model.md §3). */

/* docs/model.md §3: u = [norm(embed(token)), norm(h)]; x = fc(u); x = decoder layer (FULL) at its own KV cache;
 * out = mtp.norm(x). */
typedef struct {
    const float *h;
    const int32_t *tokens;
    int T, pos0;
    float *logits;
    int32_t *picks; /* backend */
} mtp_args;

static void mtp_body(qrt_session *s, const void *arg) {
    const mtp_args *a = arg;
    const qrt_model *m = s->m;
    const qrt_config *c = &m->cfg;
    const qrt_backend *be = m->be;
    const qrt_mtp *mtp = &m->mtp;
    qrt_scratch *sc = &s->sc;
    const size_t D = (size_t)c->hidden;
    const float *h = a->h;
    const int T = a->T;
    be->embed(&m->embed, a->tokens, T, sc->mtp_e);
    for (int t = 0; t < T; t++) {
        be->rmsnorm(sc->mtp_e + t * D, mtp->norm_emb, 1, (int)D, c->rms_eps, sc->mtp_u + t * 2 * D);
        be->rmsnorm(h + t * D, mtp->norm_hidden, 1, (int)D, c->rms_eps, sc->mtp_u + t * 2 * D + D);
    }
    be->matmul(&mtp->fc, sc->mtp_u, T, sc->h);
    const qrt_layer_kind full = QRT_LAYER_FULL;
    decoder_stack(s, &mtp->layer, &full, &s->mtp, 1, a->pos0, T, mtp->norm_out, sc->mtp_out);
    const float *last = sc->mtp_out + (size_t)(T - 1) * D;
    if (a->logits) lm_head(s, qrt_draft_lm_head(m), last, 1, a->logits, NULL);
    if (a->picks) lm_head(s, qrt_draft_lm_head(m), last, 1, NULL, a->picks);
}

void qrt_mtp_forward(qrt_session *s, const float *h, const int32_t *tokens, int T, int pos0, float *logits,
                     int32_t *pick) {
    QRT_ASSERT(s->m->mtp.present && T >= 1 && T <= s->piece && pos0 + T <= s->max_ctx);
    const mtp_args a = {h, tokens, T, pos0, logits, pick ? s->sc.picks : NULL};
    if (pick && !logits && T <= QRT_MAX_VERIFY) { /* a draft step or a catch-up of greedy decoding */
        const qrt_graph_entry key = {.kind = QRT_GRAPH_MTP, .T = T, .h = h};
        qrt_run_graphed(s, &key, pos0, tokens, T, mtp_body, &a);
    } else {
        mtp_body(s, &a);
    }
    if (pick) s->m->be->download(pick, s->sc.picks, sizeof *pick);
    s->mtp_last = T - 1;
}

const float *qrt_mtp_hidden(const qrt_session *s) {
    return s->sc.mtp_out + (size_t)s->mtp_last * s->m->cfg.hidden;
}

/* ---------------------------------------------------------------------------------------------------
 * Speculative decoding support: rollback after a partial accept. */

void qrt_session_begin_verify(qrt_session *s) {
    QRT_ASSERT(s->m->mtp.present);
    s->keeping = 1;
}

/* The GDN layers after a verify: n_keep = 0 takes all of it (S_verified into S; the conv state is the verify's
 * already); otherwise the first n_keep kept steps again from the start state, which S still holds. */
static void rollback_body(qrt_session *s, const void *arg) {
    const int n_keep = *(const int *)arg;
    const qrt_model *m = s->m;
    const qrt_config *c = &m->cfg;
    const qrt_backend *be = m->be;
    const int Hv = c->gdn_v_heads, cd = m->conv_dim;
    for (int i = 0; i < c->n_layers; i++) {
        if (c->layer_kind[i] != QRT_LAYER_LINEAR) continue;
        const qrt_layer *l = &m->layers[i];
        qrt_layer_state *ls = &s->ls[i];
        if (n_keep == 0) {
            be->copy(ls->S, ls->S_verified, sizeof(float) * Hv * c->gdn_dk * c->gdn_dv);
            continue;
        }
        /* the conv state is the last Ck-1 raw inputs of snapshot ++ kept tokens, oldest first: copied, not
         * recomputed (the kept tokens' conv outputs are among the kept inputs) */
        const int hist = c->conv_kernel - 1, from_snap = hist > n_keep ? hist - n_keep : 0;
        const size_t row = sizeof(float) * cd;
        if (from_snap) be->copy(ls->conv, ls->conv_snap + (size_t)(hist - from_snap) * cd, row * from_snap);
        if (hist > from_snap)
            be->copy(ls->conv + (size_t)from_snap * cd, ls->kept_mixed + (size_t)(n_keep - (hist - from_snap)) * cd,
                     row * (hist - from_snap));
        /* the same recurrence on the same inputs: bit-identical to having decoded only these tokens; only the
         * state is wanted: the normed output goes to scratch (z there is the verify's, finite) */
        be->gdn(ls->kept_conv, ls->kept_a, ls->kept_b, l->A_log, l->dt_bias, ls->S, ls->S, n_keep, c->gdn_k_heads, Hv,
                c->gdn_dk, c->gdn_dv, 0, s->sc.z, l->gdn_norm, c->rms_eps, s->sc.core);
    }
}

void qrt_session_rollback(qrt_session *s, int n_keep) {
    QRT_ASSERT(s->kept_T > 0 && n_keep >= 1 && n_keep <= s->kept_T && s->pos == s->kept_pos + s->kept_T);
    /* no position, no ids: a graph per n_keep, and one (T = 0) for keeping everything */
    const int steps = n_keep < s->kept_T ? n_keep : 0;
    const qrt_graph_entry key = {.kind = QRT_GRAPH_ROLLBACK, .T = steps};
    qrt_run_graphed(s, &key, 0, NULL, 0, rollback_body, &steps);
    /* KV entries past the new position are simply overwritten later */
    s->pos = s->kept_pos + n_keep;
    s->kept_T = 0;
}

/* ---------------------------------------------------------------------------------------------------
 * The forward a graph key stands for (graphs.c records it). */

/* The body's other inputs, the position and the ids, are read from the backend's step slot while recording (the
 * host ids given here are never read). */
void qrt_graph_key_forward(qrt_session *s, const qrt_graph_entry *g) {
    static const int32_t no_ids[QRT_GRAPH_MAX_T];
    if (g->kind == QRT_GRAPH_MAIN) {
        int32_t rows[QRT_GRAPH_MAX_T], idx[QRT_GRAPH_MAX_T], host_pick;
        int n = 0;
        for (int r = 0; r < g->T; r++)
            if (g->rows >> r & 1) rows[n] = r, idx[n] = n, n++;
        const row_out out = {NULL, &host_pick}; /* picks stay in sc->picks; the caller downloads them */
        const piece_args a = {no_ids, rows, idx, g->T, n, &out};
        const int verify = s->keeping;
        s->keeping = g->keep;
        piece_body(s, &a);
        s->keeping = verify;
    } else if (g->kind == QRT_GRAPH_MTP) {
        const mtp_args a = {g->h, no_ids, g->T, 0, NULL, s->sc.picks};
        mtp_body(s, &a);
    } else {
        rollback_body(s, &g->T);
    }
}
