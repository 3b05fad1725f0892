/* A session: one sequence's KV caches, GDN states and scratch, carved from one backend allocation. */
#include "model/model_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    float **slot;
    size_t floats;
} carve;

static size_t carve_total(const carve *cv, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += QRT_CEIL_DIV(cv[i].floats, 16) * 16; /* 64-byte aligned pieces */
    return total;
}

static void carve_assign(const carve *cv, int n, float *base) {
    for (int i = 0; i < n; i++) {
        *cv[i].slot = cv[i].floats ? base : NULL;
        base += QRT_CEIL_DIV(cv[i].floats, 16) * 16;
    }
}

/* A KV cache's pieces: k and v in the model's KV format (whole floats of storage), FP8's scales. The carve
 * slots are floats; kv_assign points the typed fields at them afterwards. */
typedef struct {
    float *k, *v, *ks, *vs;
} kv_slots;

static int kv_pieces(const qrt_model *m, qrt_kv *kv, size_t C, carve *cv) {
    const qrt_config *c = &m->cfg;
    const size_t elems = C * c->n_kv_heads * c->head_dim, floats = QRT_CEIL_DIV(elems * qrt_kv_elem_bytes(m->kv_format), 4);
    const size_t scales = m->kv_format == QRT_KV_FP8 ? C * c->n_kv_heads : 0;
    kv->fmt = m->kv_format;
    cv[0] = (carve){(float **)&kv->k, floats};
    cv[1] = (carve){(float **)&kv->v, floats};
    cv[2] = (carve){&kv->ks, scales};
    cv[3] = (carve){&kv->vs, scales};
    return 4;
}

/* The shortest piece a session falls back to when memory is short (or the model's, if shorter). */
#define QRT_PIECE_MIN 2048
static int32_t piece_floor(const qrt_model *m) { return QRT_MIN(m->prefill_piece, QRT_PIECE_MIN); }

/* The pieces of one session allocation: every layer's state, the MTP's KV cache, the scratch. */
static int session_pieces(qrt_session *s, carve *cv) {
    const qrt_model *m = s->m;
    const qrt_config *c = &m->cfg;
    const size_t T = (size_t)s->piece;
    const size_t D = (size_t)c->hidden, F = (size_t)c->intermediate, Dh = (size_t)c->head_dim;
    const size_t kvrow = (size_t)c->n_kv_heads * Dh, vdim = (size_t)c->gdn_v_heads * c->gdn_dv;
    const size_t qdim = (size_t)c->n_heads * Dh, cd = (size_t)m->conv_dim, Hv = (size_t)c->gdn_v_heads;
    const size_t S = Hv * c->gdn_dk * c->gdn_dv, conv = (size_t)(c->conv_kernel - 1) * cd, C = (size_t)s->max_ctx;
    const size_t R = m->mtp.present ? QRT_MAX_VERIFY : 0; /* inputs kept for rollback only in speculative models */
    int n = 0;
    for (int i = 0; i < c->n_layers; i++) {
        qrt_layer_state *l = &s->ls[i];
        if (c->layer_kind[i] == QRT_LAYER_FULL) {
            n += kv_pieces(m, &l->kv, C, cv + n);
            continue;
        }
        cv[n++] = (carve){&l->S, S};
        cv[n++] = (carve){&l->conv, conv};
        cv[n++] = (carve){&l->S_verified, R ? S : 0};
        cv[n++] = (carve){&l->conv_snap, R ? conv : 0};
        cv[n++] = (carve){&l->kept_mixed, R * cd};
        cv[n++] = (carve){&l->kept_conv, R * cd};
        cv[n++] = (carve){&l->kept_a, R * Hv};
        cv[n++] = (carve){&l->kept_b, R * Hv};
    }
    if (m->mtp.present) n += kv_pieces(m, &s->mtp.kv, C, cv + n);
    cv[n++] = (carve){&s->mtp_hidden, m->mtp.present ? (size_t)c->hidden : 0};
    qrt_scratch *sc = &s->sc;
    const carve scratch[] = {
        {&sc->h, T * D},         {&sc->x, T * D},          {&sc->y, T * D},        {&sc->mixed, T * cd},
        {&sc->conv, T * cd},     {&sc->z, T * vdim},       {&sc->a, T * Hv},       {&sc->b, T * Hv},
        {&sc->core, T * vdim},   {&sc->qg, T * 2 * qdim},  {&sc->ak, T * kvrow},   {&sc->av, T * kvrow},
        {&sc->attn, T * qdim},   {&sc->mg, T * F},         {&sc->mu, T * F},       {&sc->hfinal, T * D},
        {&sc->logits, QRT_MAX_VERIFY * (size_t)c->vocab}, {(float **)&sc->picks, T},
        {&sc->mtp_u, m->mtp.present ? T * 2 * D : 0},      {&sc->mtp_e, m->mtp.present ? T * D : 0},
        {&sc->mtp_out, m->mtp.present ? T * D : 0},
    };
    for (size_t i = 0; i < sizeof scratch / sizeof scratch[0]; i++) cv[n++] = scratch[i];
    return n;
}

static size_t session_bytes(const qrt_model *m, int32_t max_ctx, int32_t piece);

/* Tokens per forward piece: the model's (qrt_model_apply_opts), never longer than the context, halved (to no less
 * than piece_floor) while a session with it would leave less than QRT_CTX_RESERVE of the backend's memory free: the
 * context comes first, a longer piece only makes the prefill faster (on a GPU a piece's matmuls dequantize each NVFP4
 * weight once per piece; docs/benchmarks.md has TTFT and session memory by piece length). */
static int32_t session_piece(const qrt_model *m, int32_t max_ctx) {
    QRT_ASSERT(m->prefill_piece > 0 && m->prefill_piece <= QRT_MAX_T);
    const int32_t floor = QRT_MIN(piece_floor(m), max_ctx);
    int32_t piece = QRT_MIN(m->prefill_piece, max_ctx);
    if (piece == floor) return piece;
    const size_t avail = m->be->mem_available();
    while (piece > floor && session_bytes(m, max_ctx, piece) + QRT_CTX_RESERVE > avail)
        piece = QRT_MAX(floor, piece / 2);
    return piece;
}

qrt_status qrt_session_new(qrt_model *m, int32_t max_ctx, qrt_session **out) {
    *out = NULL;
    if (!m || max_ctx < 1) return qrt_fail(QRT_ERR_ARG, "qrt_session_new: max_ctx must be at least 1");
    qrt_session *s = qrt_calloc(1, sizeof *s);
    if (!s) return QRT_ERR_MEMORY;
    s->m = m;
    s->max_ctx = max_ctx;
    s->piece = session_piece(m, max_ctx);
    s->ls = qrt_calloc((size_t)m->cfg.n_layers, sizeof *s->ls);
    carve *cv = qrt_calloc(8 * (size_t)m->cfg.n_layers + 40, sizeof *cv);
    if (!s->ls || !cv) {
        free(cv);
        qrt_session_free(s);
        return QRT_ERR_MEMORY;
    }
    int n = session_pieces(s, cv);
    QRT_ASSERT(n <= 8 * m->cfg.n_layers + 40);
    size_t total = carve_total(cv, n);
    s->arena = m->be->alloc(total * sizeof(float));
    if (!s->arena) {
        free(cv);
        qrt_session_free(s);
        return qrt_fail(QRT_ERR_MEMORY, "qrt_session_new: cannot allocate %.1f MB for a %d-token session; lower "
                        "max_ctx", total * 4.0 / 1e6, max_ctx);
    }
    carve_assign(cv, n, s->arena);
    free(cv);
    const char *g = getenv("QRT_CUDA_GRAPHS");
    s->graphs_on = !(g && !strcmp(g, "0"));
    s->mtp_hidden_pos = -1;
    *out = s;
    return QRT_OK;
}

/* Bytes of a session of max_ctx tokens in pieces of piece (its one allocation); SIZE_MAX when the host is out of
 * memory. */
static size_t session_bytes(const qrt_model *m, int32_t max_ctx, int32_t piece) {
    qrt_session s = {.m = (qrt_model *)m, .max_ctx = max_ctx, .piece = piece};
    s.ls = qrt_calloc((size_t)m->cfg.n_layers, sizeof *s.ls);
    carve *cv = qrt_calloc(8 * (size_t)m->cfg.n_layers + 40, sizeof *cv);
    const size_t total = s.ls && cv ? carve_total(cv, session_pieces(&s, cv)) * sizeof(float) : SIZE_MAX;
    free(cv), free(s.ls);
    return total;
}

int32_t qrt_session_default_ctx(const qrt_model *m, size_t *available) {
    const size_t avail = m->be->mem_available(), budget = avail > QRT_CTX_RESERVE ? avail - QRT_CTX_RESERVE : 0;
    *available = avail;
    int32_t lo = 0, hi = m->cfg.max_pos; /* the largest ctx in [1, max_pos] that fits the budget: lo */
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo + 1) / 2;
        if (session_bytes(m, mid, QRT_MIN(piece_floor(m), mid)) <= budget) lo = mid; /* the piece may shrink to it */
        else hi = mid - 1;
    }
    return lo;
}

void qrt_session_free(qrt_session *s) {
    if (!s) return;
    qrt_drop_graphs(s);
    if (s->arena) s->m->be->free(s->arena);
    free(s->ls);
    free(s);
}

/* GDN states start at zero; KV entries past pos are never read, so they need no clearing. */
void qrt_session_reset(qrt_session *s) {
    const qrt_config *c = &s->m->cfg;
    s->pos = 0;
    s->keeping = 0;
    s->kept_T = 0;
    s->mtp_hidden_pos = -1;
    for (int i = 0; i < c->n_layers; i++) {
        if (c->layer_kind[i] != QRT_LAYER_LINEAR) continue;
        s->m->be->zero(s->ls[i].S, sizeof(float) * c->gdn_v_heads * c->gdn_dk * c->gdn_dv);
        s->m->be->zero(s->ls[i].conv, sizeof(float) * (c->conv_kernel - 1) * s->m->conv_dim);
    }
}

int32_t qrt_session_pos(const qrt_session *s) { return s->pos; }

void qrt_session_keep_hidden(qrt_session *s, int t) {
    QRT_ASSERT(s->m->mtp.present && s->pos > 0 && t >= 0 && t < s->piece);
    s->m->be->copy(s->mtp_hidden, qrt_session_hidden(s, t), sizeof(float) * (size_t)s->m->cfg.hidden);
    s->mtp_hidden_pos = s->pos - 1;
}

/* A position, not a flag: every forward of the main model moves pos, so none needs to clear it (only a reset,
 * which may be followed by as many tokens again). */
const float *qrt_session_kept_hidden(const qrt_session *s) {
    return s->pos > 0 && s->mtp_hidden_pos == s->pos - 1 ? s->mtp_hidden : NULL;
}
