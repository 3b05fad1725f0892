/* The Qwen3.5/3.6 text model: load (bind every tensor, check every shape) and the forward pass, written
 * once against the backend table. Reads top to bottom like docs/model.md (shared/docs/MODEL.md §2):
 * embedding → L × (norm → GDN or gated attention → residual → norm → SwiGLU MLP → residual) → norm →
 * lm_head. */
#include "model/model.h"

#include <math.h>
#include <string.h>

#include "util/progress.h"
#ifdef QRT_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

/* ---------------------------------------------------------------------------------------------------
 * Loading */

/* The backend opts->device asks for (see qrt_load_opts.device in qwenrt.h). */
static qrt_status select_backend(const qrt_load_opts *opts, const qrt_backend **out) {
    int device = opts ? opts->device : QRT_DEVICE_AUTO;
    if (device < QRT_DEVICE_AUTO || device > QRT_DEVICE_CUDA)
        return qrt_fail(QRT_ERR_ARG, "qrt_load_opts.device is %d; expected 0 (auto), 1 (cpu) or 2 (cuda)", device);
#ifdef QRT_HAVE_CUDA
    if (device == QRT_DEVICE_CUDA || (device == QRT_DEVICE_AUTO && qrt_cuda_device_count() > 0)) {
        *out = qrt_backend_cuda();
        return *out ? QRT_OK : QRT_ERR_UNSUPPORTED;
    }
#else
    if (device == QRT_DEVICE_CUDA)
        return qrt_fail(QRT_ERR_UNSUPPORTED, "this qwenrt was built without CUDA (configure with -DQRT_CUDA=ON); "
                        "use the cpu device");
#endif
    *out = qrt_backend_cpu();
    return QRT_OK;
}

/* Bind the tensors of layer i (both kinds share norms and MLP). vec is where its f32 vectors go;
 * returns the number of floats used through *used. */
static qrt_status bind_layer(qrt_model *m, int i, float *vec, size_t *used) {
    const qrt_config *c = &m->cfg;
    qrt_layer *l = &m->layers[i];
    qrt_checkpoint *ck = &m->ck;
    char n[256];
    size_t off = 0;
#define VEC(field, name_fmt, count, add)                                        \
    do {                                                                        \
        snprintf(n, sizeof n, name_fmt, i);                                     \
        l->field = vec + off;                                                   \
        QRT_TRY(qrt_bind_vector(ck, n, (count), (add), l->field));              \
        off += (size_t)(count);                                                 \
    } while (0)
#define LIN(field, name_fmt, rows, cols)                                        \
    do {                                                                        \
        snprintf(n, sizeof n, name_fmt, i);                                     \
        QRT_TRY(qrt_bind_linear(ck, n, (rows), (cols), &l->field));             \
    } while (0)
    const int D = c->hidden, F = c->intermediate;
    VEC(in_norm, "layers.%d.input_layernorm.weight", D, 1.0f);
    VEC(post_norm, "layers.%d.post_attention_layernorm.weight", D, 1.0f);
    LIN(gate, "layers.%d.mlp.gate_proj.weight", F, D);
    LIN(up, "layers.%d.mlp.up_proj.weight", F, D);
    LIN(down, "layers.%d.mlp.down_proj.weight", D, F);
    if (c->layer_kind[i] == QRT_LAYER_LINEAR) {
        const int Hv = c->gdn_v_heads, vdim = Hv * c->gdn_dv;
        LIN(in_qkv, "layers.%d.linear_attn.in_proj_qkv.weight", m->conv_dim, D);
        LIN(in_z, "layers.%d.linear_attn.in_proj_z.weight", vdim, D);
        LIN(in_a, "layers.%d.linear_attn.in_proj_a.weight", Hv, D);
        LIN(in_b, "layers.%d.linear_attn.in_proj_b.weight", Hv, D);
        LIN(out, "layers.%d.linear_attn.out_proj.weight", D, vdim);
        VEC(conv_w, "layers.%d.linear_attn.conv1d.weight", (int64_t)m->conv_dim * c->conv_kernel, 0.0f);
        VEC(A_log, "layers.%d.linear_attn.A_log", Hv, 0.0f);
        VEC(dt_bias, "layers.%d.linear_attn.dt_bias", Hv, 0.0f);
        VEC(gdn_norm, "layers.%d.linear_attn.norm.weight", c->gdn_dv, 0.0f);
    } else {
        const int Dh = c->head_dim, Hq = c->n_heads, Hkv = c->n_kv_heads;
        LIN(q, "layers.%d.self_attn.q_proj.weight", (int64_t)Hq * 2 * Dh, D);
        LIN(k, "layers.%d.self_attn.k_proj.weight", (int64_t)Hkv * Dh, D);
        LIN(v, "layers.%d.self_attn.v_proj.weight", (int64_t)Hkv * Dh, D);
        LIN(o, "layers.%d.self_attn.o_proj.weight", D, (int64_t)Hq * Dh);
        VEC(q_norm, "layers.%d.self_attn.q_norm.weight", Dh, 1.0f);
        VEC(k_norm, "layers.%d.self_attn.k_norm.weight", Dh, 1.0f);
    }
#undef VEC
#undef LIN
    *used = off;
    return QRT_OK;
}

/* Floats of f32 vectors one layer keeps (norms, conv, GDN scalars). */
static size_t layer_vector_floats(const qrt_model *m, int i) {
    const qrt_config *c = &m->cfg;
    size_t n = 2 * (size_t)c->hidden;
    if (c->layer_kind[i] == QRT_LAYER_LINEAR)
        n += (size_t)m->conv_dim * c->conv_kernel + 2 * (size_t)c->gdn_v_heads + (size_t)c->gdn_dv;
    else
        n += 2 * (size_t)c->head_dim;
    return n;
}

static float *rebase(float *p, const float *host, float *dev) { return p ? dev + (p - host) : NULL; }

/* Hand every weight to the backend and move the f32 vectors into backend memory. */
static qrt_status prepare_weights(qrt_model *m, float *host, size_t floats) {
    const qrt_backend *be = m->be;
    QRT_TRY(be->prepare_linear(&m->embed));
    if (m->lm_head.data != m->embed.data) QRT_TRY(be->prepare_linear(&m->lm_head));
    else m->lm_head = m->embed;
    be->upload(m->vectors, host, floats * sizeof(float));
    m->final_norm = rebase(m->final_norm, host, m->vectors);
    for (int i = 0; i < m->cfg.n_layers; i++) {
        qrt_layer *l = &m->layers[i];
        qrt_linear *lin[] = {&l->gate, &l->up, &l->down, &l->in_qkv, &l->in_z, &l->in_a, &l->in_b, &l->out,
                             &l->q, &l->k, &l->v, &l->o};
        for (size_t j = 0; j < sizeof lin / sizeof lin[0]; j++)
            if (lin[j]->data) QRT_TRY(be->prepare_linear(lin[j]));
        float **vec[] = {&l->conv_w, &l->A_log, &l->dt_bias, &l->gdn_norm, &l->q_norm, &l->k_norm, &l->in_norm,
                         &l->post_norm};
        for (size_t j = 0; j < sizeof vec / sizeof vec[0]; j++) *vec[j] = rebase(*vec[j], host, m->vectors);
    }
    return QRT_OK;
}

/* Touch every weight page once so the first token does not pay for page faults, with a progress bar. */
static void prefault(const qrt_model *m, int show) {
    uint64_t total = 0;
    for (int f = 0; f < m->ck.st.n_files; f++) total += m->ck.st.files[f].size;
    qrt_progress p;
    qrt_progress_begin(&p, "loading", total, show);
    volatile uint8_t sink = 0;
    for (int f = 0; f < m->ck.st.n_files; f++) {
        const qrt_st_file *file = &m->ck.st.files[f];
        const size_t step = 4096, report = 64u << 20;
        for (size_t off = 0; off < file->size; off += report) {
            size_t end = QRT_MIN(file->size, off + report);
            for (size_t b = off; b < end; b += step) sink ^= file->map[b];
            qrt_progress_add(&p, end - off);
        }
    }
    (void)sink;
    qrt_progress_end(&p);
}

qrt_status qrt_model_load(const char *dir, const qrt_load_opts *opts, qrt_model **out) {
    *out = NULL;
    qrt_clear_error();
    if (!dir) return qrt_fail(QRT_ERR_ARG, "qrt_model_load: no checkpoint folder given");
    qrt_dtype_init();
    qrt_model *m = qrt_calloc(1, sizeof *m);
    if (!m) return QRT_ERR_MEMORY;
    qrt_status st = qrt_config_load(dir, &m->cfg);
    if (st == QRT_OK) st = qrt_checkpoint_open(&m->ck, dir);
    if (st != QRT_OK) {
        free(m);
        return st;
    }
    const qrt_config *c = &m->cfg;
    st = select_backend(opts, &m->be);
    if (st != QRT_OK) {
        qrt_checkpoint_close(&m->ck);
        free(m);
        return st;
    }
    if (opts && opts->n_threads > 0) qrt_cpu_set_threads(opts->n_threads);
    m->conv_dim = 2 * c->gdn_k_heads * c->gdn_dk + c->gdn_v_heads * c->gdn_dv;
    size_t floats = (size_t)c->hidden;
    for (int i = 0; i < c->n_layers; i++) floats += layer_vector_floats(m, i);
    m->layers = qrt_calloc((size_t)c->n_layers, sizeof *m->layers);
    /* Vectors are widened to f32 in host memory, then uploaded into one backend allocation; the bound
     * pointers are rebased onto it at the end. */
    float *host = m->layers ? qrt_calloc(floats, sizeof(float)) : NULL;
    m->vectors = host ? m->be->alloc(floats * sizeof(float)) : NULL;
    if (!m->vectors) st = QRT_ERR_MEMORY;
    if (st == QRT_OK) {
        char full[256];
        snprintf(full, sizeof full, "%sembed_tokens.weight", m->ck.prefix);
        st = qrt_bind_linear_abs(&m->ck, full, c->vocab, c->hidden, &m->embed);
    }
    if (st == QRT_OK) {
        if (qrt_st_find(&m->ck.st, "lm_head.weight"))
            st = qrt_bind_linear_abs(&m->ck, "lm_head.weight", c->vocab, c->hidden, &m->lm_head);
        else if (c->tie_embeddings)
            m->lm_head = m->embed;
        else
            st = qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor 'lm_head.weight' is missing and tie_word_embeddings is false",
                          dir);
    }
    size_t off = 0;
    if (st == QRT_OK) {
        m->final_norm = host;
        st = qrt_bind_vector(&m->ck, "norm.weight", c->hidden, 1.0f, m->final_norm);
        off = (size_t)c->hidden;
    }
    for (int i = 0; i < c->n_layers && st == QRT_OK; i++) {
        size_t used = 0;
        st = bind_layer(m, i, host + off, &used);
        off += used;
    }
    if (st == QRT_OK) st = prepare_weights(m, host, floats);
    free(host);
    if (st != QRT_OK) {
        qrt_model_free(m);
        return st;
    }
    prefault(m, opts && opts->show_progress);
    *out = m;
    return QRT_OK;
}

void qrt_model_free(qrt_model *m) {
    if (!m) return;
    qrt_checkpoint_close(&m->ck);
    free(m->layers);
    if (m->vectors) m->be->free(m->vectors);
    free(m);
}

int32_t qrt_model_vocab(const qrt_model *m) { return m->cfg.vocab; }
int32_t qrt_model_eos(const qrt_model *m) { return m->cfg.n_eos ? m->cfg.eos[0] : -1; }

/* ---------------------------------------------------------------------------------------------------
 * Session: KV caches, GDN states and scratch, carved from one allocation. */

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

qrt_status qrt_session_new(qrt_model *m, int32_t max_ctx, qrt_session **out) {
    *out = NULL;
    if (!m || max_ctx < 1) return qrt_fail(QRT_ERR_ARG, "qrt_session_new: max_ctx must be at least 1");
    const qrt_config *c = &m->cfg;
    qrt_session *s = qrt_calloc(1, sizeof *s);
    if (!s) return QRT_ERR_MEMORY;
    s->m = m;
    s->max_ctx = max_ctx;
    const int L = c->n_layers;
    s->kv_k = qrt_calloc((size_t)L, sizeof(float *));
    s->kv_v = qrt_calloc((size_t)L, sizeof(float *));
    s->gdn_S = qrt_calloc((size_t)L, sizeof(float *));
    s->conv_state = qrt_calloc((size_t)L, sizeof(float *));
    int n_pieces = 4 * L + 20;
    carve *cv = qrt_calloc((size_t)n_pieces, sizeof *cv);
    if (!s->kv_k || !s->kv_v || !s->gdn_S || !s->conv_state || !cv) {
        free(cv);
        qrt_session_free(s);
        return QRT_ERR_MEMORY;
    }
    const size_t T = QRT_MAX_T, D = (size_t)c->hidden, F = (size_t)c->intermediate, Dh = (size_t)c->head_dim;
    const size_t kvrow = (size_t)c->n_kv_heads * Dh, vdim = (size_t)c->gdn_v_heads * c->gdn_dv;
    const size_t qdim = (size_t)c->n_heads * Dh;
    int n = 0;
    for (int i = 0; i < L; i++) {
        int full = c->layer_kind[i] == QRT_LAYER_FULL;
        cv[n++] = (carve){&s->kv_k[i], full ? (size_t)max_ctx * kvrow : 0};
        cv[n++] = (carve){&s->kv_v[i], full ? (size_t)max_ctx * kvrow : 0};
        cv[n++] = (carve){&s->gdn_S[i], full ? 0 : (size_t)c->gdn_v_heads * c->gdn_dk * c->gdn_dv};
        cv[n++] = (carve){&s->conv_state[i], full ? 0 : (size_t)(c->conv_kernel - 1) * m->conv_dim};
    }
    qrt_scratch *sc = &s->sc;
    const carve scratch[] = {
        {&sc->h, T * D},        {&sc->x, T * D},          {&sc->y, T * D},       {&sc->mixed, T * m->conv_dim},
        {&sc->conv, T * m->conv_dim},
        {&sc->z, T * vdim},     {&sc->a, T * c->gdn_v_heads}, {&sc->b, T * c->gdn_v_heads}, {&sc->core, T * vdim},
        {&sc->qg, T * 2 * qdim}, {&sc->aq, T * qdim},     {&sc->agate, T * qdim}, {&sc->ak, T * kvrow},
        {&sc->av, T * kvrow},   {&sc->attn, T * qdim},    {&sc->mg, T * F},      {&sc->mu, T * F},
        {&sc->hrow, D},         {&sc->logits, (size_t)c->vocab},
    };
    for (size_t i = 0; i < sizeof scratch / sizeof scratch[0]; i++) cv[n++] = scratch[i];
    QRT_ASSERT(n <= n_pieces);
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
    *out = s;
    return QRT_OK;
}

void qrt_session_free(qrt_session *s) {
    if (!s) return;
    if (s->arena) s->m->be->free(s->arena);
    free(s->kv_k);
    free(s->kv_v);
    free(s->gdn_S);
    free(s->conv_state);
    free(s);
}

/* GDN states start at zero; KV entries past pos are never read, so they need no clearing. */
void qrt_session_reset(qrt_session *s) {
    const qrt_config *c = &s->m->cfg;
    s->pos = 0;
    for (int i = 0; i < c->n_layers; i++) {
        if (c->layer_kind[i] != QRT_LAYER_LINEAR) continue;
        s->m->be->zero(s->gdn_S[i], sizeof(float) * c->gdn_v_heads * c->gdn_dk * c->gdn_dv);
        s->m->be->zero(s->conv_state[i], sizeof(float) * (c->conv_kernel - 1) * s->m->conv_dim);
    }
}

int32_t qrt_session_pos(const qrt_session *s) { return s->pos; }

/* ---------------------------------------------------------------------------------------------------
 * Forward pass (MODEL.md §2) for T ≤ QRT_MAX_T tokens at positions s->pos .. s->pos+T-1. */

/* Gated DeltaNet mixer (§2.4): x [T][D] → y [T][D]. */
static void gdn_block(qrt_session *s, int li, int T) {
    const qrt_model *m = s->m;
    const qrt_config *c = &m->cfg;
    const qrt_backend *be = m->be;
    const qrt_layer *l = &m->layers[li];
    qrt_scratch *sc = &s->sc;
    const int Hk = c->gdn_k_heads, Hv = c->gdn_v_heads, Dk = c->gdn_dk, Dv = c->gdn_dv;
    const int cd = m->conv_dim;
    be->matmul(&l->in_qkv, sc->x, T, sc->mixed);
    be->matmul(&l->in_z, sc->x, T, sc->z);
    be->matmul(&l->in_b, sc->x, T, sc->b);
    be->matmul(&l->in_a, sc->x, T, sc->a);
    be->conv1d_silu(sc->mixed, s->conv_state[li], l->conv_w, T, cd, c->conv_kernel, sc->conv);
    /* HF takes the chunked form for any T > 1 without a cache; we take it only when the prompt piece is
     * long enough for it to pay, and the recurrence otherwise. The two agree to f32 rounding. */
    int chunked = T > 16;
    be->gdn(sc->conv, sc->a, sc->b, l->A_log, l->dt_bias, s->gdn_S[li], T, Hk, Hv, Dk, Dv, chunked,
            sc->core);
    be->rmsnorm_gated(sc->core, sc->z, l->gdn_norm, T * Hv, Dv, c->rms_eps, sc->core);
    be->matmul(&l->out, sc->core, T, sc->y);
}

/* Gated full attention (§2.5): x [T][D] → y [T][D]; appends T entries to the layer's KV cache. */
static void attention_block(qrt_session *s, int li, int T) {
    const qrt_model *m = s->m;
    const qrt_config *c = &m->cfg;
    const qrt_backend *be = m->be;
    const qrt_layer *l = &m->layers[li];
    qrt_scratch *sc = &s->sc;
    const int Hq = c->n_heads, Hkv = c->n_kv_heads, Dh = c->head_dim;
    const size_t kvrow = (size_t)Hkv * Dh;
    be->matmul(&l->q, sc->x, T, sc->qg);
    /* q_proj rows are per head [query Dh | gate Dh] */
    for (int t = 0; t < T; t++)
        for (int h = 0; h < Hq; h++) {
            const float *src = sc->qg + ((size_t)t * Hq + h) * 2 * Dh;
            be->copy(sc->aq + ((size_t)t * Hq + h) * Dh, src, sizeof(float) * Dh);
            be->copy(sc->agate + ((size_t)t * Hq + h) * Dh, src + Dh, sizeof(float) * Dh);
        }
    float *kdst = s->kv_k[li] + (size_t)s->pos * kvrow, *vdst = s->kv_v[li] + (size_t)s->pos * kvrow;
    be->matmul(&l->k, sc->x, T, kdst);
    be->matmul(&l->v, sc->x, T, vdst);
    be->rmsnorm(sc->aq, l->q_norm, T * Hq, Dh, c->rms_eps, sc->aq);
    be->rmsnorm(kdst, l->k_norm, T * Hkv, Dh, c->rms_eps, kdst);
    be->rope(sc->aq, T, Hq, Dh, c->rotary_dim, c->rope_theta, s->pos);
    be->rope(kdst, T, Hkv, Dh, c->rotary_dim, c->rope_theta, s->pos);
    be->attention(sc->aq, s->kv_k[li], s->kv_v[li], T, s->pos, Hq, Hkv, Dh, sc->attn);
    be->sigmoid_mul(sc->attn, sc->agate, (size_t)T * Hq * Dh, sc->attn);
    be->matmul(&l->o, sc->attn, T, sc->y);
}

static void mlp_block(qrt_session *s, int li, int T) {
    const qrt_model *m = s->m;
    const qrt_layer *l = &m->layers[li];
    qrt_scratch *sc = &s->sc;
    const size_t F = (size_t)m->cfg.intermediate;
    m->be->matmul(&l->gate, sc->x, T, sc->mg);
    m->be->matmul(&l->up, sc->x, T, sc->mu);
    m->be->swiglu(sc->mg, sc->mu, (size_t)T * F, sc->mg);
    m->be->matmul(&l->down, sc->mg, T, sc->y);
}

/* One piece of T ≤ QRT_MAX_T tokens; for each i < n_rows, the logits after token rows[i] of this piece go to
 * outs[i] ([V]). */
static void forward_piece(qrt_session *s, const int32_t *ids, int T, const int32_t *rows, float *const *outs,
                          int n_rows) {
    const qrt_model *m = s->m;
    const qrt_config *c = &m->cfg;
    const qrt_backend *be = m->be;
    qrt_scratch *sc = &s->sc;
    const size_t D = (size_t)c->hidden;
    be->embed(&m->embed, ids, T, sc->h);
    for (int li = 0; li < c->n_layers; li++) {
        const qrt_layer *l = &m->layers[li];
        be->rmsnorm(sc->h, l->in_norm, T, (int)D, c->rms_eps, sc->x);
        if (c->layer_kind[li] == QRT_LAYER_LINEAR) gdn_block(s, li, T);
        else attention_block(s, li, T);
        be->add(sc->h, sc->y, (size_t)T * D);
        be->rmsnorm(sc->h, l->post_norm, T, (int)D, c->rms_eps, sc->x);
        mlp_block(s, li, T);
        be->add(sc->h, sc->y, (size_t)T * D);
    }
    for (int i = 0; i < n_rows; i++) {
        be->rmsnorm(sc->h + (size_t)rows[i] * D, m->final_norm, 1, (int)D, c->rms_eps, sc->hrow);
        be->matmul(&m->lm_head, sc->hrow, 1, sc->logits);
        be->download(outs[i], sc->logits, sizeof(float) * c->vocab);
    }
    s->pos += T;
}

qrt_status qrt_forward(qrt_session *s, const int32_t *ids, int32_t n, const int32_t *rows, int32_t n_rows,
                       float *logits) {
    if (!s || !ids || n < 1) return qrt_fail(QRT_ERR_ARG, "qrt_forward: need at least one token");
    const qrt_config *c = &s->m->cfg;
    int32_t last = n - 1;
    if (!rows) {
        if (n_rows > 1) return qrt_fail(QRT_ERR_ARG, "qrt_forward: rows is NULL but n_rows is %d", n_rows);
        rows = &last;
    }
    if (n_rows < 0 || (n_rows && !logits)) return qrt_fail(QRT_ERR_ARG, "qrt_forward: bad logits request");
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
    /* Long inputs run in pieces; each piece computes the requested rows that fall inside it. */
    int32_t piece_rows[QRT_MAX_T];
    float *piece_outs[QRT_MAX_T];
    for (int32_t start = 0; start < n; start += QRT_MAX_T) {
        int T = QRT_MIN(QRT_MAX_T, n - start), k = 0;
        for (int32_t i = 0; i < n_rows; i++)
            if (rows[i] >= start && rows[i] < start + T) {
                piece_rows[k] = rows[i] - start;
                piece_outs[k++] = logits + (size_t)i * c->vocab;
            }
        forward_piece(s, ids + start, T, piece_rows, piece_outs, k);
    }
    return QRT_OK;
}

qrt_status qrt_prefill(qrt_session *s, const int32_t *ids, int32_t n, float *logits) {
    return qrt_forward(s, ids, n, NULL, 1, logits);
}

qrt_status qrt_decode(qrt_session *s, int32_t id, float *logits) { return qrt_forward(s, &id, 1, NULL, 1, logits); }

/* ---------------------------------------------------------------------------------------------------
 * What one decoded token costs in memory traffic (MODEL.md §6). */

void qrt_model_bytes(const qrt_model *m, qrt_token_bytes *b) {
    const qrt_config *c = &m->cfg;
    memset(b, 0, sizeof *b);
    b->weights = qrt_linear_bytes(&m->lm_head) + qrt_linear_bytes(&m->embed) / (uint64_t)c->vocab;
    for (int i = 0; i < c->n_layers; i++) {
        const qrt_layer *l = &m->layers[i];
        const qrt_linear *lin[] = {&l->gate, &l->up, &l->down, &l->in_qkv, &l->in_z, &l->in_a, &l->in_b, &l->out,
                                   &l->q, &l->k, &l->v, &l->o};
        for (size_t j = 0; j < sizeof lin / sizeof lin[0]; j++)
            if (lin[j]->data) b->weights += qrt_linear_bytes(lin[j]);
        b->vectors += layer_vector_floats(m, i) * sizeof(float);
        if (c->layer_kind[i] == QRT_LAYER_LINEAR)
            b->state += 2 * (uint64_t)c->gdn_v_heads * c->gdn_dk * c->gdn_dv * sizeof(float) +
                        2 * (uint64_t)(c->conv_kernel - 1) * m->conv_dim * sizeof(float);
        else
            b->kv_per_ctx += 2 * (uint64_t)c->n_kv_heads * c->head_dim * sizeof(float);
    }
}
