/* The Qwen3.5/3.6 text model: load (bind every tensor, check every shape) and the forward pass, written
 * once against the backend table. Reads top to bottom like docs/model.md §2:
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

qrt_status qrt_model_apply_opts(qrt_model *m, const qrt_load_opts *opts) {
    QRT_TRY(select_backend(opts, &m->be));
    if (opts && opts->n_threads > 0) qrt_cpu_set_threads(opts->n_threads);
    m->kv_format = opts ? opts->kv_format : QRT_KV_F32;
    if (m->kv_format < QRT_KV_F32 || m->kv_format > QRT_KV_FP8)
        return qrt_fail(QRT_ERR_ARG, "qrt_load_opts.kv_format is %d; expected 0 (f32), 1 (bf16) or 2 (fp8)",
                        m->kv_format);
    return QRT_OK;
}

/* Where one layer's f32 vectors go while binding: a host buffer filled front to back. */
typedef struct {
    float *base;
    size_t used;
} vec_cursor;

/* Bind the tensors of one decoder layer named prefix + "...", e.g. "model.layers.3." or "mtp.layers.0.". */
static qrt_status bind_layer(qrt_model *m, qrt_layer *l, qrt_layer_kind kind, const char *prefix, vec_cursor *vc) {
    const qrt_config *c = &m->cfg;
    qrt_checkpoint *ck = &m->ck;
    char n[512];
#define VEC(field, suffix, count, add)                                          \
    do {                                                                        \
        snprintf(n, sizeof n, "%s%s", prefix, suffix);                          \
        l->field = vc->base + vc->used;                                         \
        QRT_TRY(qrt_bind_vector_abs(ck, n, (count), (add), l->field));          \
        vc->used += (size_t)(count);                                            \
    } while (0)
#define LIN(field, suffix, rows, cols)                                          \
    do {                                                                        \
        snprintf(n, sizeof n, "%s%s", prefix, suffix);                          \
        QRT_TRY(qrt_bind_linear_abs(ck, n, (rows), (cols), &l->field));         \
    } while (0)
    const int D = c->hidden, F = c->intermediate;
    VEC(in_norm, "input_layernorm.weight", D, 1.0f);
    VEC(post_norm, "post_attention_layernorm.weight", D, 1.0f);
    LIN(gate, "mlp.gate_proj.weight", F, D);
    LIN(up, "mlp.up_proj.weight", F, D);
    LIN(down, "mlp.down_proj.weight", D, F);
    if (kind == QRT_LAYER_LINEAR) {
        const int Hv = c->gdn_v_heads, vdim = Hv * c->gdn_dv;
        LIN(in_qkv, "linear_attn.in_proj_qkv.weight", m->conv_dim, D);
        LIN(in_z, "linear_attn.in_proj_z.weight", vdim, D);
        LIN(in_a, "linear_attn.in_proj_a.weight", Hv, D);
        LIN(in_b, "linear_attn.in_proj_b.weight", Hv, D);
        LIN(out, "linear_attn.out_proj.weight", D, vdim);
        VEC(conv_w, "linear_attn.conv1d.weight", (int64_t)m->conv_dim * c->conv_kernel, 0.0f);
        VEC(A_log, "linear_attn.A_log", Hv, 0.0f);
        VEC(dt_bias, "linear_attn.dt_bias", Hv, 0.0f);
        VEC(gdn_norm, "linear_attn.norm.weight", c->gdn_dv, 0.0f);
    } else {
        const int Dh = c->head_dim, Hq = c->n_heads, Hkv = c->n_kv_heads;
        LIN(q, "self_attn.q_proj.weight", (int64_t)Hq * 2 * Dh, D);
        LIN(k, "self_attn.k_proj.weight", (int64_t)Hkv * Dh, D);
        LIN(v, "self_attn.v_proj.weight", (int64_t)Hkv * Dh, D);
        LIN(o, "self_attn.o_proj.weight", D, (int64_t)Hq * Dh);
        VEC(q_norm, "self_attn.q_norm.weight", Dh, 1.0f);
        VEC(k_norm, "self_attn.k_norm.weight", Dh, 1.0f);
    }
#undef VEC
#undef LIN
    return QRT_OK;
}

/* Floats of f32 vectors one layer keeps (norms, conv, GDN scalars). */
static size_t layer_vector_floats(const qrt_model *m, qrt_layer_kind kind) {
    const qrt_config *c = &m->cfg;
    size_t n = 2 * (size_t)c->hidden;
    if (kind == QRT_LAYER_LINEAR)
        n += (size_t)m->conv_dim * c->conv_kernel + 2 * (size_t)c->gdn_v_heads + (size_t)c->gdn_dv;
    else
        n += 2 * (size_t)c->head_dim;
    return n;
}

/* The MTP head, when the checkpoint (or its --mtp sidecar) has one. Checkpoints that drop mtp.* (the
 * NVFP4 exports do) load without it; a head that is only partly there is an error. */
static qrt_status bind_mtp(qrt_model *m, vec_cursor *vc) {
    const qrt_config *c = &m->cfg;
    qrt_mtp *mtp = &m->mtp;
    if (c->mtp_layers < 1 || !qrt_checkpoint_has_linear(&m->ck, "mtp.fc.weight")) return QRT_OK;
    const int D = c->hidden;
    QRT_TRY(qrt_bind_linear_abs(&m->ck, "mtp.fc.weight", D, 2 * (int64_t)D, &mtp->fc));
    float **norms[] = {&mtp->norm_emb, &mtp->norm_hidden, &mtp->norm_out};
    const char *names[] = {"mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight"};
    for (int i = 0; i < 3; i++) {
        *norms[i] = vc->base + vc->used;
        QRT_TRY(qrt_bind_vector_abs(&m->ck, names[i], D, 1.0f, *norms[i]));
        vc->used += (size_t)D;
    }
    QRT_TRY(bind_layer(m, &mtp->layer, QRT_LAYER_FULL, "mtp.layers.0.", vc));
    mtp->present = 1;
    return QRT_OK;
}

static size_t mtp_vector_floats(const qrt_model *m) {
    return 3 * (size_t)m->cfg.hidden + layer_vector_floats(m, QRT_LAYER_FULL);
}

size_t qrt_model_vector_floats(const qrt_model *m) {
    size_t floats = (size_t)m->cfg.hidden + mtp_vector_floats(m);
    for (int i = 0; i < m->cfg.n_layers; i++) floats += layer_vector_floats(m, m->cfg.layer_kind[i]);
    return floats;
}

static float *rebase(float *p, const float *host, float *dev) { return p ? dev + (p - host) : NULL; }

/* Every linear a layer can hold (a kind binds only its own: the others stay without data). */
#define LAYER_LINEARS 12
static void layer_linears(qrt_layer *l, qrt_linear *lin[LAYER_LINEARS]) {
    qrt_linear *all[LAYER_LINEARS] = {&l->gate, &l->up,   &l->down, &l->in_qkv, &l->in_z, &l->in_a,
                                      &l->in_b, &l->out,  &l->q,    &l->k,      &l->v,    &l->o};
    memcpy(lin, all, sizeof all);
}

static qrt_status prepare_layer(qrt_model *m, qrt_layer *l) {
    qrt_linear *lin[LAYER_LINEARS];
    layer_linears(l, lin);
    for (int j = 0; j < LAYER_LINEARS; j++)
        if (lin[j]->data) QRT_TRY(m->be->prepare_linear(lin[j]));
    return qrt_layer_prepare_groups(m->be, l);
}

static void group_of(qrt_linear_group *g, int n, qrt_linear *a, qrt_linear *b, qrt_linear *c, qrt_linear *d) {
    *g = (qrt_linear_group){n, {a, b, c, d}, NULL, 0, 0};
}

qrt_status qrt_layer_prepare_groups(const qrt_backend *be, qrt_layer *l) {
    /* the order of the parts is the order of the outputs in gdn_block / attention_block / mlp_block */
    if (l->in_qkv.data) group_of(&l->mixer_in, 4, &l->in_qkv, &l->in_z, &l->in_b, &l->in_a);
    else group_of(&l->mixer_in, 3, &l->q, &l->k, &l->v, NULL);
    group_of(&l->mlp_in, 2, &l->gate, &l->up, NULL, NULL);
    l->mlp_in.swiglu = 1;
    if (be->prepare_group) {
        QRT_TRY(be->prepare_group(&l->mixer_in));
        QRT_TRY(be->prepare_group(&l->mlp_in));
    }
    return QRT_OK;
}

/* y[i] = x · part[i]ᵀ: one op when the backend has it, else the parts one by one (the same results). */
static void matmul_group(const qrt_backend *be, const qrt_linear_group *g, const float *x, int T, float *const *y) {
    if (be->matmul_group) be->matmul_group(g, x, T, y);
    else
        for (int i = 0; i < g->n; i++) be->matmul(g->part[i], x, T, y[i]);
}

static void rebase_layer(qrt_layer *l, const float *host, float *dev) {
    float **vec[] = {&l->conv_w, &l->A_log, &l->dt_bias, &l->gdn_norm, &l->q_norm, &l->k_norm, &l->in_norm,
                     &l->post_norm};
    for (size_t j = 0; j < sizeof vec / sizeof vec[0]; j++) *vec[j] = rebase(*vec[j], host, dev);
}

void qrt_model_upload_vectors(qrt_model *m, float *host, size_t floats) {
    m->be->upload(m->vectors, host, floats * sizeof(float));
    m->final_norm = rebase(m->final_norm, host, m->vectors);
    for (int i = 0; i < m->cfg.n_layers; i++) rebase_layer(&m->layers[i], host, m->vectors);
    if (m->mtp.present) {
        m->mtp.norm_emb = rebase(m->mtp.norm_emb, host, m->vectors);
        m->mtp.norm_hidden = rebase(m->mtp.norm_hidden, host, m->vectors);
        m->mtp.norm_out = rebase(m->mtp.norm_out, host, m->vectors);
        rebase_layer(&m->mtp.layer, host, m->vectors);
    }
}

static uint64_t layer_weight_bytes(const qrt_layer *l);

/* Hand every weight to the backend and move the f32 vectors into backend memory. On a GPU this is the
 * upload of the whole model, so it reports progress layer by layer (the CPU reads the mapping in place). */
static qrt_status prepare_weights(qrt_model *m, float *host, size_t floats, int show) {
    const qrt_backend *be = m->be;
    int tied = m->lm_head.data == m->embed.data;
    uint64_t total = qrt_linear_bytes(&m->embed) + (tied ? 0 : qrt_linear_bytes(&m->lm_head));
    for (int i = 0; i < m->cfg.n_layers; i++) total += layer_weight_bytes(&m->layers[i]);
    if (m->mtp.present) total += qrt_linear_bytes(&m->mtp.fc) + layer_weight_bytes(&m->mtp.layer);
    qrt_progress p;
    qrt_progress_begin(&p, "uploading", total, show && strcmp(be->name, "cpu") != 0);
    QRT_TRY(be->prepare_linear(&m->embed));
    qrt_progress_add(&p, qrt_linear_bytes(&m->embed));
    if (tied) m->lm_head = m->embed;
    else QRT_TRY(be->prepare_linear(&m->lm_head));
    qrt_progress_add(&p, tied ? 0 : qrt_linear_bytes(&m->lm_head));
    for (int i = 0; i < m->cfg.n_layers; i++) {
        QRT_TRY(prepare_layer(m, &m->layers[i]));
        qrt_progress_add(&p, layer_weight_bytes(&m->layers[i]));
    }
    if (m->mtp.present) {
        QRT_TRY(be->prepare_linear(&m->mtp.fc));
        QRT_TRY(prepare_layer(m, &m->mtp.layer));
        qrt_progress_add(&p, qrt_linear_bytes(&m->mtp.fc) + layer_weight_bytes(&m->mtp.layer));
    }
    qrt_progress_end(&p);
    qrt_model_upload_vectors(m, host, floats);
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
    if (st == QRT_OK && opts && opts->mtp_dir && (st = qrt_checkpoint_add_mtp(&m->ck, opts->mtp_dir)) != QRT_OK)
        qrt_checkpoint_close(&m->ck);
    if (st != QRT_OK) {
        free(m);
        return st;
    }
    const qrt_config *c = &m->cfg;
    st = qrt_model_apply_opts(m, opts);
    if (st != QRT_OK) {
        qrt_checkpoint_close(&m->ck);
        free(m);
        return st;
    }
    m->conv_dim = 2 * c->gdn_k_heads * c->gdn_dk + c->gdn_v_heads * c->gdn_dv;
    size_t floats = qrt_model_vector_floats(m);
    m->layers = qrt_calloc((size_t)c->n_layers, sizeof *m->layers);
    /* Vectors are widened to f32 in host memory, then uploaded into one backend allocation; the bound
     * pointers are rebased onto it at the end. */
    vec_cursor vc = {m->layers ? qrt_calloc(floats, sizeof(float)) : NULL, 0};
    m->vectors = vc.base ? m->be->alloc(floats * sizeof(float)) : NULL;
    if (!m->vectors) st = QRT_ERR_MEMORY;
    char name[512];
    if (st == QRT_OK) {
        snprintf(name, sizeof name, "%sembed_tokens.weight", m->ck.prefix);
        st = qrt_bind_linear_abs(&m->ck, name, c->vocab, c->hidden, &m->embed);
    }
    if (st == QRT_OK) {
        if (qrt_checkpoint_has_linear(&m->ck, "lm_head.weight"))
            st = qrt_bind_linear_abs(&m->ck, "lm_head.weight", c->vocab, c->hidden, &m->lm_head);
        else if (c->tie_embeddings)
            m->lm_head = m->embed;
        else
            st = qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor 'lm_head.weight' is missing and tie_word_embeddings is false",
                          dir);
    }
    if (st == QRT_OK) {
        m->final_norm = vc.base;
        vc.used = (size_t)c->hidden;
        snprintf(name, sizeof name, "%snorm.weight", m->ck.prefix);
        st = qrt_bind_vector_abs(&m->ck, name, c->hidden, 1.0f, m->final_norm);
    }
    for (int i = 0; i < c->n_layers && st == QRT_OK; i++) {
        snprintf(name, sizeof name, "%slayers.%d.", m->ck.prefix, i);
        st = bind_layer(m, &m->layers[i], c->layer_kind[i], name, &vc);
    }
    if (st == QRT_OK) st = bind_mtp(m, &vc);
    if (st == QRT_OK) st = prepare_weights(m, vc.base, floats, opts && opts->show_progress);
    free(vc.base);
    if (st != QRT_OK) {
        qrt_model_free(m);
        return st;
    }
    /* a GPU backend has just read every page to upload it; the CPU reads the mapping in place */
    if (!strcmp(m->be->name, "cpu")) prefault(m, opts && opts->show_progress);
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

/* The pieces of one session allocation: every layer's state, the MTP's KV cache, the scratch. */
static int session_pieces(qrt_session *s, carve *cv) {
    const qrt_model *m = s->m;
    const qrt_config *c = &m->cfg;
    const size_t T = QRT_MAX_T, D = (size_t)c->hidden, F = (size_t)c->intermediate, Dh = (size_t)c->head_dim;
    const size_t kvrow = (size_t)c->n_kv_heads * Dh, vdim = (size_t)c->gdn_v_heads * c->gdn_dv;
    const size_t qdim = (size_t)c->n_heads * Dh, cd = (size_t)m->conv_dim, Hv = (size_t)c->gdn_v_heads;
    const size_t S = Hv * c->gdn_dk * c->gdn_dv, conv = (size_t)(c->conv_kernel - 1) * cd, C = (size_t)s->max_ctx;
    const size_t R = m->mtp.present ? QRT_MAX_VERIFY : 0; /* rollback records only for speculative models */
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
        cv[n++] = (carve){&l->rec_mixed, R * cd};
        cv[n++] = (carve){&l->rec_conv, R * cd};
        cv[n++] = (carve){&l->rec_a, R * Hv};
        cv[n++] = (carve){&l->rec_b, R * Hv};
    }
    if (m->mtp.present) n += kv_pieces(m, &s->mtp.kv, C, cv + n);
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

qrt_status qrt_session_new(qrt_model *m, int32_t max_ctx, qrt_session **out) {
    *out = NULL;
    if (!m || max_ctx < 1) return qrt_fail(QRT_ERR_ARG, "qrt_session_new: max_ctx must be at least 1");
    qrt_session *s = qrt_calloc(1, sizeof *s);
    if (!s) return QRT_ERR_MEMORY;
    s->m = m;
    s->max_ctx = max_ctx;
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
    *out = s;
    return QRT_OK;
}

static void drop_graphs(qrt_session *s);

void qrt_session_free(qrt_session *s) {
    if (!s) return;
    drop_graphs(s);
    if (s->arena) s->m->be->free(s->arena);
    free(s->ls);
    free(s);
}

/* GDN states start at zero; KV entries past pos are never read, so they need no clearing. */
void qrt_session_reset(qrt_session *s) {
    const qrt_config *c = &s->m->cfg;
    s->pos = 0;
    s->recording = 0;
    s->rec_T = 0;
    for (int i = 0; i < c->n_layers; i++) {
        if (c->layer_kind[i] != QRT_LAYER_LINEAR) continue;
        s->m->be->zero(s->ls[i].S, sizeof(float) * c->gdn_v_heads * c->gdn_dk * c->gdn_dv);
        s->m->be->zero(s->ls[i].conv, sizeof(float) * (c->conv_kernel - 1) * s->m->conv_dim);
    }
}

int32_t qrt_session_pos(const qrt_session *s) { return s->pos; }

/* ---------------------------------------------------------------------------------------------------
 * Graphs. A decode loop runs the same few forwards over and over, only the position and the token ids
 * changing: the main model on one token (greedy decode), on K+1 (a verify), the MTP head on one token (a
 * draft step) or on the j+1 accepted ones (its catch-up). On a backend with graphs each such forward is
 * recorded once and replayed: ~720 kernel launches become one graph launch. The backend reads the position
 * and the ids of a recorded forward from its step slot (backend.h), so a graph serves every position; the
 * key (qrt_graph_entry) holds the rest of what the recording baked in: which forward, T, the requested rows,
 * whether GDN inputs are recorded, the hidden rows the MTP reads. Everything else it touches is the session's
 * (fixed for its life) or the model's.
 *
 * A rollback after a partial accept (the GDN layers' re-run of the kept steps) is recorded per n_keep the same way.
 *
 * A key runs plainly the first time: the warm-up, in which the NVFP4 autotuner times new shapes and scratch
 * buffers grow, neither of which a recording may do; it is recorded right after (from the key alone,
 * record_key), and every later run is a replay. When the backend's epoch moves (a scratch buffer that recordings
 * point at was reallocated), every recording made before is made again. The results are the plain run's bits: the same
 * kernels on the same buffers, attention's chunking depending only on each token's position. Only greedy
 * forwards (picks, not logits) of the decode loop's shapes are recorded: the main model on one token or on up to
 * QRT_GRAPH_MAX_T with every row requested (a verify), the MTP on up to QRT_MAX_VERIFY. Prefill (one requested
 * row; the MTP's longer pieces) and sampling (the logits download and the host's sampling would sit inside) run
 * plainly. */

static void drop_graphs(qrt_session *s) {
    for (int i = 0; i < s->n_graphs; i++)
        if (s->graphs[i].graph) s->graph_be->graph_free(s->graphs[i].graph);
    s->n_graphs = 0;
    s->gstats.graphs = 0;
}

void qrt_session_set_graphs(qrt_session *s, int on) {
    if (!on) drop_graphs(s);
    s->graphs_on = on;
}

void qrt_session_graph_stats(const qrt_session *s, qrt_graph_stats *out) { *out = s->gstats; }

/* The cache entry for key (made, not yet run, when new); NULL when graphs cannot be used. */
static qrt_graph_entry *graph_entry(qrt_session *s, const qrt_graph_entry *key) {
    const qrt_backend *be = s->m->be;
    if (!s->graphs_on || !be->graph_begin || (s->graph_be && s->graph_be != be)) return NULL;
    for (int i = 0; i < s->n_graphs; i++) {
        qrt_graph_entry *g = &s->graphs[i];
        if (g->kind == key->kind && g->T == key->T && g->recording == key->recording && g->rows == key->rows &&
            g->h == key->h)
            return g;
    }
    if (s->n_graphs == QRT_GRAPH_SLOTS) return NULL; /* more keys than K ≤ 16 makes: the rest run plainly */
    qrt_graph_entry *g = &s->graphs[s->n_graphs++];
    *g = *key;
    g->graph = NULL;
    return g;
}

typedef void (*graph_body)(qrt_session *s, const void *arg);

static void record_key(qrt_session *s, qrt_graph_entry *g); /* after the forwards it records */

/* body(s, arg): one forward at position pos over the T host ids (T = 0: none, and no position), which reads them
 * only through be->embed and be->attn_prep / be->attention and changes no host state. Run by replaying key's
 * graph, or plainly and then recorded (see above). */
static void run_graphed(qrt_session *s, const qrt_graph_entry *key, int pos, const int32_t *ids, int T,
                        graph_body body, const void *arg) {
    const qrt_backend *be = s->m->be;
    qrt_graph_entry *g = graph_entry(s, key);
    if (!g) {
        body(s, arg);
        return;
    }
    if (g->graph && g->epoch != be->graph_epoch()) {
        /* a buffer moved: record every graph made before again now (their warm-ups are done), so that keys met
         * once per generation (the first draft step after a prefill) do not wait for their next use */
        for (int i = 0; i < s->n_graphs && s->graphs_on; i++) {
            qrt_graph_entry *e = &s->graphs[i];
            if (!e->graph || e->epoch == be->graph_epoch()) continue;
            be->graph_free(e->graph);
            e->graph = NULL;
            s->gstats.graphs--;
            record_key(s, e);
        }
    }
    if (g->graph) {
        be->graph_launch(g->graph, pos, ids, T);
        s->gstats.replays++;
        return;
    }
    body(s, arg);
    s->gstats.plain++;
    /* recorded right after its warm-up, so that the first generation leaves every key it met recorded and the
     * next ones (bench's timed reps) record nothing */
    if (s->graphs_on) record_key(s, g);
}

/* ---------------------------------------------------------------------------------------------------
 * Forward pass (docs/model.md §2) for T ≤ QRT_MAX_T tokens. Blocks read sc->x and write sc->y. */

/* Gated DeltaNet mixer (§2.4). When the session is recording (a verify), the inputs each token's recurrent step
 * needs are kept so qrt_session_rollback can re-apply a prefix of them: the projections and the conv write straight
 * into the layer's record (four copies per layer fewer than writing scratch and copying it), the conv state is
 * copied, and the recurrence writes its end state to S_verified, leaving S as the start state (no 3 MB copy of the
 * state each way per layer). */
static void gdn_block(qrt_session *s, const qrt_layer *l, qrt_layer_state *ls, int T) {
    const qrt_model *m = s->m;
    const qrt_config *c = &m->cfg;
    const qrt_backend *be = m->be;
    qrt_scratch *sc = &s->sc;
    const int Hk = c->gdn_k_heads, Hv = c->gdn_v_heads, Dk = c->gdn_dk, Dv = c->gdn_dv, cd = m->conv_dim;
    const int rec = s->recording;
    float *mixed = rec ? ls->rec_mixed : sc->mixed, *conv = rec ? ls->rec_conv : sc->conv; /* [T][cd] */
    float *a = rec ? ls->rec_a : sc->a, *b = rec ? ls->rec_b : sc->b;                      /* [T][Hv] */
    float *const outs[] = {mixed, sc->z, b, a}; /* in_qkv, in_z, in_b, in_a */
    matmul_group(be, &l->mixer_in, sc->x, T, outs);
    if (rec) be->copy(ls->conv_snap, ls->conv, sizeof(float) * (c->conv_kernel - 1) * cd);
    be->conv1d_silu(mixed, ls->conv, l->conv_w, T, cd, c->conv_kernel, conv);
    /* HF takes the chunked form for any T > 1 without a cache; we take it only when the piece is long
     * enough for it to pay, so decode and verify (T ≤ 16) run the recurrence token by token: that is what
     * makes a verify's state bit-identical to single-token decoding. The two forms agree to f32 rounding. */
    int chunked = T > 16;
    be->gdn(conv, a, b, l->A_log, l->dt_bias, ls->S, rec ? ls->S_verified : ls->S, T, Hk, Hv, Dk, Dv, chunked, sc->z,
            l->gdn_norm, c->rms_eps, sc->core);
    be->matmul(&l->out, sc->core, T, sc->y);
}

/* Gated full attention (§2.5) at positions pos..pos+T-1, appending T entries to the KV cache. */
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

/* One decoder layer (§2.3) on the residual stream sc->h [T][D], whose input norm the caller has already
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

/* lm_head over r ≤ QRT_MAX_VERIFY consecutive rows h (backend [r][D]) → their logits (host [r][V]); or, with pick
 * (backend [r]) non-NULL, only their argmax. One matmul for the r rows: the weights (715 MB at the 27B shape) are read
 * once instead of r times, and each row's logits are the bits a one-row call gives (matmul is batch-invariant). */
static void lm_head(qrt_session *s, const float *h, int r, float *logits, int32_t *pick) {
    const qrt_model *m = s->m;
    QRT_ASSERT(r >= 1 && r <= QRT_MAX_VERIFY);
    m->be->matmul(&m->lm_head, h, r, s->sc.logits);
    if (pick) m->be->argmax(s->sc.logits, r, m->cfg.vocab, pick);
    else m->be->download(logits, s->sc.logits, sizeof(float) * (size_t)r * m->cfg.vocab);
}

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
        lm_head(s, sc->hfinal + (size_t)a->rows[k] * D, r,
                a->out->logits ? a->out->logits + (size_t)a->idx[k] * c->vocab : NULL,
                a->out->picks ? sc->picks + a->idx[k] : NULL);
    }
}

/* One piece of T ≤ QRT_MAX_T tokens; for each k < n_rows, the output after token rows[k] of this piece is the
 * call's requested row idx[k]. Leaves every token's final-normed hidden in sc->hfinal. A greedy decode step or verify
 * (T ≤ QRT_GRAPH_MAX_T, one piece, so idx[k] = k) runs through its graph. */
static void forward_piece(qrt_session *s, const int32_t *ids, int T, const int32_t *rows, const int32_t *idx,
                          int n_rows, const row_out *out) {
    const piece_args a = {ids, rows, idx, T, n_rows, out};
    if (out->picks && T <= QRT_GRAPH_MAX_T && (T == 1 || n_rows == T)) { /* a decode step or a verify */
        qrt_graph_entry key = {.kind = QRT_GRAPH_MAIN, .T = T, .recording = s->recording};
        for (int k = 0; k < n_rows; k++) key.rows |= 1u << rows[k];
        run_graphed(s, &key, s->pos, ids, T, piece_body, &a);
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
    if (n_rows < 0 || (n_rows && !out.logits && !out.picks) || (out.picks && n_rows > QRT_MAX_T))
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
    if (s->rec_T) qrt_session_rollback(s, s->rec_T);
    if (s->recording && n > QRT_MAX_VERIFY) s->recording = 0;
    s->rec_T = s->recording ? n : 0;
    s->rec_pos = s->pos;
    /* Long inputs run in pieces; each piece computes the requested rows that fall inside it. */
    int32_t piece_rows[QRT_MAX_T], piece_idx[QRT_MAX_T];
    for (int32_t start = 0; start < n; start += QRT_MAX_T) {
        int T = QRT_MIN(QRT_MAX_T, n - start), k = 0;
        for (int32_t i = 0; i < n_rows; i++)
            if (rows[i] >= start && rows[i] < start + T) {
                piece_rows[k] = rows[i] - start;
                piece_idx[k++] = i;
            }
        forward_piece(s, ids + start, T, piece_rows, piece_idx, k, &out);
    }
    if (out.picks && n_rows) s->m->be->download(out.picks, s->sc.picks, sizeof(int32_t) * (size_t)n_rows);
    s->recording = 0;
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

/* ---------------------------------------------------------------------------------------------------
 * Speculative decoding support: rollback after a partial accept, and the MTP head. */

void qrt_session_begin_verify(qrt_session *s) {
    QRT_ASSERT(s->m->mtp.present);
    s->recording = 1;
}

/* The GDN layers after a verify: n_keep = 0 takes all of it (S_verified into S; the conv state is the verify's
 * already); otherwise the first n_keep recorded steps again from the start state, which S still holds. */
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
         * recomputed (the conv outputs of the kept tokens are recorded already) */
        const int hist = c->conv_kernel - 1, from_snap = hist > n_keep ? hist - n_keep : 0;
        const size_t row = sizeof(float) * cd;
        if (from_snap) be->copy(ls->conv, ls->conv_snap + (size_t)(hist - from_snap) * cd, row * from_snap);
        if (hist > from_snap)
            be->copy(ls->conv + (size_t)from_snap * cd, ls->rec_mixed + (size_t)(n_keep - (hist - from_snap)) * cd,
                     row * (hist - from_snap));
        /* the same recurrence on the same inputs: bit-identical to having decoded only these tokens; only the
         * state is wanted: the normed output goes to scratch (z there is the verify's, finite) */
        be->gdn(ls->rec_conv, ls->rec_a, ls->rec_b, l->A_log, l->dt_bias, ls->S, ls->S, n_keep, c->gdn_k_heads, Hv,
                c->gdn_dk, c->gdn_dv, 0, s->sc.z, l->gdn_norm, c->rms_eps, s->sc.core);
    }
}

void qrt_session_rollback(qrt_session *s, int n_keep) {
    QRT_ASSERT(s->rec_T > 0 && n_keep >= 1 && n_keep <= s->rec_T && s->pos == s->rec_pos + s->rec_T);
    /* no position, no ids: a graph per n_keep, and one (T = 0) for keeping everything */
    const int steps = n_keep < s->rec_T ? n_keep : 0;
    const qrt_graph_entry key = {.kind = QRT_GRAPH_ROLLBACK, .T = steps};
    run_graphed(s, &key, 0, NULL, 0, rollback_body, &steps);
    /* KV entries past the new position are simply overwritten later */
    s->pos = s->rec_pos + n_keep;
    s->rec_T = 0;
}

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
    if (a->logits) lm_head(s, last, 1, a->logits, NULL);
    if (a->picks) lm_head(s, last, 1, NULL, a->picks);
}

void qrt_mtp_forward(qrt_session *s, const float *h, const int32_t *tokens, int T, int pos0, float *logits,
                     int32_t *pick) {
    QRT_ASSERT(s->m->mtp.present && T >= 1 && T <= QRT_MAX_T && pos0 + T <= s->max_ctx);
    const mtp_args a = {h, tokens, T, pos0, logits, pick ? s->sc.picks : NULL};
    if (pick && !logits && T <= QRT_MAX_VERIFY) { /* a draft step or a catch-up of greedy decoding */
        const qrt_graph_entry key = {.kind = QRT_GRAPH_MTP, .T = T, .h = h};
        run_graphed(s, &key, pos0, tokens, T, mtp_body, &a);
    } else {
        mtp_body(s, &a);
    }
    if (pick) s->m->be->download(pick, s->sc.picks, sizeof *pick);
}

/* Record g's forward from its key alone: the body's other inputs, the position and the ids, are read from the
 * backend's step slot while recording (the host ids given here are never read). */
static void record_key(qrt_session *s, qrt_graph_entry *g) {
    static const int32_t no_ids[QRT_GRAPH_MAX_T];
    const qrt_backend *be = s->m->be;
    if (!be->graph_begin(s->max_ctx)) return;
    if (g->kind == QRT_GRAPH_MAIN) {
        int32_t rows[QRT_GRAPH_MAX_T], idx[QRT_GRAPH_MAX_T], host_pick;
        int n = 0;
        for (int r = 0; r < g->T; r++)
            if (g->rows >> r & 1) rows[n] = r, idx[n] = n, n++;
        const row_out out = {NULL, &host_pick}; /* picks stay in sc->picks; the caller downloads them */
        const piece_args a = {no_ids, rows, idx, g->T, n, &out};
        const int verify = s->recording;
        s->recording = g->recording;
        piece_body(s, &a);
        s->recording = verify;
    } else if (g->kind == QRT_GRAPH_MTP) {
        const mtp_args a = {g->h, no_ids, g->T, 0, NULL, s->sc.picks};
        mtp_body(s, &a);
    } else {
        rollback_body(s, &g->T);
    }
    g->graph = be->graph_end();
    g->epoch = be->graph_epoch();
    s->graph_be = be;
    s->gstats.records++;
    if (g->graph) s->gstats.graphs++;
    else s->graphs_on = 0; /* recording failed (the backend said why on stderr): this session runs plainly */
}

qrt_status qrt_prefill(qrt_session *s, const int32_t *ids, int32_t n, float *logits) {
    return qrt_forward(s, ids, n, NULL, 1, logits);
}

qrt_status qrt_decode(qrt_session *s, int32_t id, float *logits) { return qrt_forward(s, &id, 1, NULL, 1, logits); }

/* ---------------------------------------------------------------------------------------------------
 * What one decoded token costs in memory traffic (docs/model.md §6). */

static uint64_t layer_weight_bytes(const qrt_layer *l) {
    qrt_linear *lin[LAYER_LINEARS];
    layer_linears((qrt_layer *)l, lin); /* only read here */
    uint64_t b = 0;
    for (int j = 0; j < LAYER_LINEARS; j++)
        if (lin[j]->data) b += qrt_linear_bytes(lin[j]);
    return b;
}

void qrt_model_bytes(const qrt_model *m, qrt_token_bytes *b) {
    const qrt_config *c = &m->cfg;
    memset(b, 0, sizeof *b);
    uint64_t embed_row = qrt_linear_bytes(&m->embed) / (uint64_t)c->vocab;
    b->weights = qrt_linear_bytes(&m->lm_head) + embed_row;
    for (int i = 0; i < c->n_layers; i++) {
        b->weights += layer_weight_bytes(&m->layers[i]);
        b->vectors += layer_vector_floats(m, c->layer_kind[i]) * sizeof(float);
        if (c->layer_kind[i] == QRT_LAYER_LINEAR)
            b->state += 2 * (uint64_t)c->gdn_v_heads * c->gdn_dk * c->gdn_dv * sizeof(float) +
                        2 * (uint64_t)(c->conv_kernel - 1) * m->conv_dim * sizeof(float);
        else
            b->kv_per_ctx += 2 * (uint64_t)c->n_kv_heads * (c->head_dim * qrt_kv_elem_bytes(m->kv_format) +
                                                            (m->kv_format == QRT_KV_FP8 ? sizeof(float) : 0));
    }
    if (m->mtp.present)
        b->mtp_step = qrt_linear_bytes(&m->mtp.fc) + layer_weight_bytes(&m->mtp.layer) +
                      qrt_linear_bytes(&m->lm_head) + embed_row;
}
