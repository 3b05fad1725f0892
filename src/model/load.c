/* Loading a model: pick the backend, bind every tensor of the checkpoint (checking every shape), hand the
 * weights to the backend and move the f32 vectors into its memory. Also what one decoded token costs in
 * memory traffic, which is counted over the same tensors. */
#include "model/model.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_quant.h"
#include "io/dtype.h"
#include "io/quant_encode.h"
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

/* Tokens per prefill piece: the backend's, or QRT_PREFILL_PIECE (for measuring the trade of a piece's scratch memory
 * against the prefill matmuls' rate: a larger piece dequantizes each NVFP4 weight fewer times). */
static qrt_status prefill_piece(const qrt_backend *be, int *piece) {
    *piece = be->prefill_piece;
    const char *e = getenv("QRT_PREFILL_PIECE");
    if (!e || !*e) return QRT_OK;
    char *end;
    const long v = strtol(e, &end, 10);
    if (*end || v < 64 || v > QRT_MAX_T || v % 64)
        return qrt_fail(QRT_ERR_ARG, "QRT_PREFILL_PIECE is '%s'; expected a multiple of 64 from 64 to %d (tokens per "
                        "prefill piece), or unset for the backend's %d", e, QRT_MAX_T, be->prefill_piece);
    *piece = (int)v;
    return QRT_OK;
}

qrt_status qrt_model_apply_opts(qrt_model *m, const qrt_load_opts *opts) {
    QRT_TRY(select_backend(opts, &m->be));
    if (opts && opts->n_threads > 0) qrt_cpu_set_threads(opts->n_threads);
    m->kv_format = opts ? opts->kv_format : QRT_KV_F32;
    if (m->kv_format == QRT_KV_DEFAULT) m->kv_format = m->be == qrt_backend_cpu() ? QRT_KV_F32 : QRT_KV_BF16;
    if (m->kv_format < QRT_KV_F32 || m->kv_format > QRT_KV_FP8)
        return qrt_fail(QRT_ERR_ARG, "qrt_load_opts.kv_format is %d; expected -1 (the device's default), 0 (f32), 1 "
                        "(bf16) or 2 (fp8)", m->kv_format);
    return prefill_piece(m->be, &m->prefill_piece);
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

static uint64_t layer_weight_bytes(const qrt_layer *l) {
    qrt_linear *lin[LAYER_LINEARS];
    layer_linears((qrt_layer *)l, lin); /* only read here */
    uint64_t b = 0;
    for (int j = 0; j < LAYER_LINEARS; j++)
        if (lin[j]->data) b += qrt_linear_bytes(lin[j]);
    return b;
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


qrt_status qrt_model_hand_over(qrt_model *m, qrt_linear *w) {
    void *data = (void *)w->data, *scales = (void *)w->scales;
    qrt_status st = m->be->prepare_linear(w);
    if (st != QRT_OK || w->data != data) { /* failed, or the backend has its own copy now */
        free(data), free(scales);
        return st;
    }
    if ((st = qrt_checkpoint_keep(&m->ck, data)) != QRT_OK) {
        free(scales);
        return st;
    }
    return scales ? qrt_checkpoint_keep(&m->ck, scales) : QRT_OK;
}

/* ---- the draft steps' NVFP4 lm_head -------------------------------------------------------------- */

/* Whether the draft steps read an NVFP4 copy of lm_head: QRT_DRAFT_HEAD=nvfp4 or =lm_head decides; by default a GPU
 * backend makes one (a draft step there is bound by the bytes it reads: docs/benchmarks.md has the stored layout's
 * K = 6 rows with and without it), the CPU backend, the reference, does not. *asked: the environment asked for it, so
 * a model that cannot have one says why. */
static int draft_head_wanted(const qrt_backend *be, int *asked) {
    const char *e = getenv("QRT_DRAFT_HEAD");
    *asked = e && !strcmp(e, "nvfp4");
    if (*asked) return 1;
    if (e && !strcmp(e, "lm_head")) return 0;
    if (e && *e) fprintf(stderr, "qwenrt: QRT_DRAFT_HEAD=%s is neither nvfp4 nor lm_head; using the default\n", e);
    return be != qrt_backend_cpu();
}

qrt_status qrt_model_make_draft_head(qrt_model *m, const qrt_linear *lm, int mtp) {
    memset(&m->mtp.draft_head, 0, sizeof m->mtp.draft_head);
    int asked = 0;
    if (!mtp || lm->fmt == QRT_WF_NVFP4 || !draft_head_wanted(m->be, &asked)) return QRT_OK;
    const int64_t N = lm->n, K = lm->k;
    if ((lm->fmt != QRT_WF_BF16 && lm->fmt != QRT_WF_F16 && lm->fmt != QRT_WF_F32) || K % 16) {
        if (asked)
            fprintf(stderr, "qwenrt: QRT_DRAFT_HEAD=nvfp4 needs lm_head in BF16, F16 or F32 with a row length divisible "
                    "by 16 (it is %s, %lld columns); the draft steps read lm_head\n", qrt_wformat_name(lm->fmt),
                    (long long)K);
        return QRT_OK;
    }
    qrt_dtype_init();
    /* one f32 row per thread; the rows are widened twice, since the tensor scale (compressed-tensors': over the
     * whole matrix) must be known before the first row is encoded */
    float *rows = malloc(sizeof(float) * (size_t)K * (size_t)omp_get_max_threads());
    uint8_t *codes = qrt_alloc_aligned((size_t)(N * K / 2)), *scales = qrt_alloc_aligned((size_t)(N * K / 16));
    if (!rows || !codes || !scales) {
        free(rows), free(codes), free(scales);
        return qrt_fail(QRT_ERR_MEMORY, "cannot allocate %.2f GB of host memory for the draft steps' NVFP4 copy "
                        "of lm_head; QRT_DRAFT_HEAD=lm_head does without it", (double)N * K * 9 / 16 / 1e9);
    }
    float amax = 0.0f;
#pragma omp parallel for schedule(static) reduction(max : amax)
    for (int64_t r = 0; r < N; r++) {
        float *row = rows + (size_t)K * (size_t)omp_get_thread_num();
        qrt_cpu_row_to_f32(lm, r, 0, K, row);
        for (int64_t i = 0; i < K; i++) amax = fmaxf(amax, fabsf(row[i]));
    }
    const float global = qrt_nvfp4_global_scale(amax);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
        float *row = rows + (size_t)K * (size_t)omp_get_thread_num();
        qrt_cpu_row_to_f32(lm, r, 0, K, row);
        qrt_nvfp4_quantize_row(row, K, global, codes + r * K / 2, scales + r * K / 16);
    }
    free(rows);
    qrt_linear *d = &m->mtp.draft_head;
    *d = (qrt_linear){.fmt = QRT_WF_NVFP4, .n = N, .k = K, .data = codes, .scales = scales, .scale2 = 1.0f / global,
                      .name = "lm_head (NVFP4 copy for the draft steps)"};
    const qrt_status st = qrt_model_hand_over(m, d);
    if (st != QRT_OK) memset(d, 0, sizeof *d); /* the load fails; nothing points at freed memory */
    return st;
}

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
    QRT_TRY(qrt_model_make_draft_head(m, &m->lm_head, m->mtp.present)); /* from the host rows, before they move */
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
 * What one decoded token costs in memory traffic (docs/model.md §6). */

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
                      qrt_linear_bytes(qrt_draft_lm_head(m)) + embed_row;
}
