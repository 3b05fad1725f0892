/* Synthetic models: a preset shape with random weights made in host memory, no checkpoint files.
 *
 * Benchmarks need the exact shapes, formats and bytes of a model, not its knowledge, and writing a 27B
 * checkpoint to disk to read it back costs minutes and tens of GB. Here every weight is drawn in memory by a
 * counter-based generator (splitmix64 of tensor seed and row), rows in parallel with OpenMP, handed to the
 * backend's prepare_linear one tensor at a time, and freed right away when the backend took a copy (CUDA),
 * so host memory peaks at one tensor beyond the model itself.
 *
 * Magnitudes: linears have std ≈ 1/sqrt(K) as a trained model roughly does, norms are 1 + N(0, 0.1), GDN
 * scalars as synth.c draws them, so activations stay finite through all layers and greedy outputs are
 * deterministic, which is all a benchmark (and its parity check) needs. Acceptance of MTP drafts on random
 * weights is meaningless: qwenrt bench simulates it (--sim-al). */
#include <math.h>
#include <string.h>

#include "io/dtype.h"
#include "tools/synthetic.h"
#include "util/mix64.h"

typedef struct {
    const char *name;
    int vocab, hidden, inter, layers, heads, kv_heads, head_dim, gk, gv, dk, dv, conv;
} shape_preset;

/* The same shapes as `qwenrt synth` (docs/model.md §1 for the 27B). */
static const shape_preset presets[] = {
    {"tiny", 2048, 256, 512, 8, 6, 2, 64, 2, 6, 64, 64, 4},
    {"qwen3.6-27b", 248320, 5120, 17408, 64, 24, 4, 256, 16, 48, 128, 128, 4},
};

qrt_status qrt_config_preset(const char *name, qrt_config *c) {
    const shape_preset *p = NULL;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (name && !strcmp(name, presets[i].name)) p = &presets[i];
    if (!p) return qrt_fail(QRT_ERR_ARG, "synthetic model preset '%s' is unknown; use tiny or qwen3.6-27b", name);
    memset(c, 0, sizeof *c);
    snprintf(c->model_type, sizeof c->model_type, "qwen3_5_text");
    c->vocab = p->vocab, c->hidden = p->hidden, c->intermediate = p->inter, c->n_layers = p->layers;
    for (int i = 0; i < p->layers; i++) { /* every fourth layer is full attention, as in the real models */
        c->layer_kind[i] = (i + 1) % 4 == 0 ? QRT_LAYER_FULL : QRT_LAYER_LINEAR;
        c->n_full += c->layer_kind[i] == QRT_LAYER_FULL;
    }
    c->n_heads = p->heads, c->n_kv_heads = p->kv_heads, c->head_dim = p->head_dim, c->rotary_dim = p->head_dim / 4;
    c->rope_theta = 1e7;
    c->gdn_k_heads = p->gk, c->gdn_v_heads = p->gv, c->gdn_dk = p->dk, c->gdn_dv = p->dv, c->conv_kernel = p->conv;
    c->rms_eps = 1e-6f;
    c->mtp_layers = 1;
    c->max_pos = 262144;
    c->eos[0] = p->vocab - 1;
    c->n_eos = 1;
    return QRT_OK;
}

/* ---- the generator -------------------------------------------------------------------------------- */

/* Word i of the stream (seed): counter-based, so any row can be drawn by any thread. */
static inline uint64_t word(uint64_t seed, uint64_t i) { return qrt_mix64(seed + (i + 1) * QRT_MIX64_STEP); }

/* Approximately N(0, 1) from one word: the sum of four 16-bit uniforms (Irwin–Hall), rescaled. */
static inline float normal_of(uint64_t z) {
    float u = 0;
    for (int j = 0; j < 4; j++) u += (float)((z >> (16 * j)) & 0xffff) / 65536.0f;
    return (u - 2.0f) * 1.7320508f;
}

/* ---- weights ------------------------------------------------------------------------------------- */

typedef struct {
    qrt_model *m;
    qrt_wformat fmt;   /* of the linears (the embedding is always BF16) */
    qrt_wformat plain; /* of the GDN projections, lm_head and mtp.fc: fmt, or BF16 in the stored layout */
    uint64_t next_seed;
} builder;

static void fill_bf16(uint16_t *w, int64_t n, int64_t k, float std, uint64_t seed) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; r++) {
        uint64_t rs = qrt_mix64(seed ^ ((uint64_t)r * 0xD1B54A32D192ED03ull));
        for (int64_t c = 0; c < k; c++) w[r * k + c] = qrt_f32_to_bf16(normal_of(word(rs, (uint64_t)c)) * std);
    }
}

/* E2M1 codes uniform over all 16 nibbles (RMS 2.93), block scales e4m3 in [0.75, 1.375]: std ≈ 2.93 ·
 * scale2 · 1.05, so scale2 sets the weight's std. */
static void fill_nvfp4(uint8_t *codes, uint8_t *scales, int64_t n, int64_t k, uint64_t seed) {
    const int64_t cb = k / 2, sb = k / 16;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; r++) {
        uint64_t rs = qrt_mix64(seed ^ ((uint64_t)r * 0xD1B54A32D192ED03ull));
        uint8_t *cr = codes + r * cb;
        for (int64_t c = 0; c < cb; c += 8) {
            uint64_t z = word(rs, (uint64_t)(c / 8));
            int64_t left = cb - c < 8 ? cb - c : 8;
            memcpy(cr + c, &z, (size_t)left);
        }
        uint64_t z = 0;
        for (int64_t j = 0; j < sb; j++) {
            if (j % 16 == 0) z = word(~rs, (uint64_t)(j / 16));
            scales[r * sb + j] = (uint8_t)(0x34 + ((z >> (4 * (j % 16))) & 7)); /* e4m3 0.75 .. 1.375 */
        }
    }
}

/* e4m3 codes with exponents 2^-3..2^0 (RMS ≈ 0.5, never NaN), f32 block scales set the std. */
static void fill_fp8(uint8_t *codes, float *scales, int64_t n, int64_t k, float std, uint64_t seed) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; r++) {
        uint64_t rs = qrt_mix64(seed ^ ((uint64_t)r * 0xD1B54A32D192ED03ull));
        for (int64_t c = 0; c < k; c++) {
            uint64_t z = word(rs, (uint64_t)c);
            codes[r * k + c] = (uint8_t)((z & 0x80) | (0x20 + ((z >> 8) & 0x1f)));
        }
    }
    const int64_t blocks = QRT_CEIL_DIV(n, 128) * QRT_CEIL_DIV(k, 128);
    for (int64_t b = 0; b < blocks; b++) scales[b] = std / 0.5f;
}

/* Draw one [n, k] linear in fmt into host memory (w->data, w->scales). */
static qrt_status draw_linear(builder *b, qrt_linear *w, qrt_wformat fmt, int64_t n, int64_t k, const char *name) {
    const uint64_t seed = qrt_mix64(++b->next_seed * 0x2545F4914F6CDD1Dull);
    const float std = 1.0f / sqrtf((float)k);
    memset(w, 0, sizeof *w);
    w->fmt = fmt, w->n = n, w->k = k, w->name = name;
    void *data = NULL, *scales = NULL;
    if (fmt == QRT_WF_NVFP4) {
        data = qrt_alloc_aligned((size_t)(n * k / 2));
        scales = qrt_alloc_aligned((size_t)(n * k / 16));
        if (data && scales) fill_nvfp4(data, scales, n, k, seed);
        w->scale2 = std / (2.93f * 1.05f);
    } else if (fmt == QRT_WF_FP8B) {
        data = qrt_alloc_aligned((size_t)(n * k));
        scales = qrt_alloc_aligned(sizeof(float) * (size_t)(QRT_CEIL_DIV(n, 128) * QRT_CEIL_DIV(k, 128)));
        if (data && scales) fill_fp8(data, scales, n, k, std, seed);
    } else {
        data = qrt_alloc_aligned((size_t)(n * k) * 2);
        if (data) fill_bf16(data, n, k, std, seed);
    }
    if (!data || (fmt != QRT_WF_BF16 && !scales)) {
        free(data), free(scales);
        return qrt_fail(QRT_ERR_MEMORY, "synthetic model: cannot allocate %.1f GB of host memory for '%s'; use a "
                        "smaller preset or a machine with more memory", (double)n * k / 1e9, name);
    }
    w->data = data, w->scales = scales;
    return QRT_OK;
}

static qrt_status make_linear(builder *b, qrt_linear *w, qrt_wformat fmt, int64_t n, int64_t k, const char *name) {
    QRT_TRY(draw_linear(b, w, fmt, n, k, name));
    return qrt_model_hand_over(b->m, w);
}

/* ---- vectors ------------------------------------------------------------------------------------- */

typedef struct {
    float *base;
    size_t used;
    uint64_t seed;
} vec_cursor;

typedef enum { V_NORM, V_PLAIN_NORM, V_CONV, V_A_LOG, V_DT_BIAS } vec_kind;

static float *make_vector(vec_cursor *vc, size_t count, vec_kind kind) {
    float *v = vc->base + vc->used;
    vc->used += count;
    const uint64_t seed = qrt_mix64(++vc->seed);
    for (size_t i = 0; i < count; i++) {
        uint64_t z = word(seed, i);
        switch (kind) {
        case V_NORM: /* stored as 1 + w, as the loader adds 1 to the zero-centred norms */
        case V_PLAIN_NORM: v[i] = 1.0f + 0.1f * normal_of(z); break;
        case V_CONV: v[i] = 0.3f * normal_of(z); break;
        case V_A_LOG: v[i] = logf(1.0f + 15.0f * (float)(z >> 40) / 16777216.0f); break;
        case V_DT_BIAS: v[i] = normal_of(z); break;
        }
    }
    return v;
}

static qrt_status make_layer(builder *b, qrt_layer *l, qrt_layer_kind kind, vec_cursor *vc) {
    const qrt_config *c = &b->m->cfg;
    const int64_t D = c->hidden, F = c->intermediate;
    const qrt_wformat f = b->fmt;
    l->in_norm = make_vector(vc, (size_t)D, V_NORM);
    l->post_norm = make_vector(vc, (size_t)D, V_NORM);
    QRT_TRY(make_linear(b, &l->gate, f, F, D, "mlp.gate_proj"));
    QRT_TRY(make_linear(b, &l->up, f, F, D, "mlp.up_proj"));
    QRT_TRY(make_linear(b, &l->down, f, D, F, "mlp.down_proj"));
    if (kind == QRT_LAYER_LINEAR) {
        const int64_t Hv = c->gdn_v_heads, vdim = Hv * c->gdn_dv;
        const qrt_wformat g = b->plain;
        QRT_TRY(make_linear(b, &l->in_qkv, g, b->m->conv_dim, D, "linear_attn.in_proj_qkv"));
        QRT_TRY(make_linear(b, &l->in_z, g, vdim, D, "linear_attn.in_proj_z"));
        QRT_TRY(make_linear(b, &l->in_a, g, Hv, D, "linear_attn.in_proj_a"));
        QRT_TRY(make_linear(b, &l->in_b, g, Hv, D, "linear_attn.in_proj_b"));
        QRT_TRY(make_linear(b, &l->out, g, D, vdim, "linear_attn.out_proj"));
        l->conv_w = make_vector(vc, (size_t)b->m->conv_dim * c->conv_kernel, V_CONV);
        l->A_log = make_vector(vc, (size_t)Hv, V_A_LOG);
        l->dt_bias = make_vector(vc, (size_t)Hv, V_DT_BIAS);
        l->gdn_norm = make_vector(vc, (size_t)c->gdn_dv, V_PLAIN_NORM);
    } else {
        const int64_t Dh = c->head_dim, Hq = c->n_heads, Hkv = c->n_kv_heads;
        QRT_TRY(make_linear(b, &l->q, f, Hq * 2 * Dh, D, "self_attn.q_proj"));
        QRT_TRY(make_linear(b, &l->k, f, Hkv * Dh, D, "self_attn.k_proj"));
        QRT_TRY(make_linear(b, &l->v, f, Hkv * Dh, D, "self_attn.v_proj"));
        QRT_TRY(make_linear(b, &l->o, f, D, Hq * Dh, "self_attn.o_proj"));
        l->q_norm = make_vector(vc, (size_t)Dh, V_NORM);
        l->k_norm = make_vector(vc, (size_t)Dh, V_NORM);
    }
    return qrt_layer_prepare_groups(b->m->be, l);
}

/* "stored": the layout published NVFP4 checkpoints of this model use (and `qwenrt synth --format nvfp4` writes): the
 * MLP and attention linears NVFP4, the GDN projections, lm_head and mtp.fc BF16. */
static qrt_status parse_format(const char *format, qrt_wformat *out, qrt_wformat *plain) {
    if (!format || !strcmp(format, "bf16")) *out = QRT_WF_BF16;
    else if (!strcmp(format, "nvfp4") || !strcmp(format, "stored")) *out = QRT_WF_NVFP4;
    else if (!strcmp(format, "fp8")) *out = QRT_WF_FP8B;
    else
        return qrt_fail(QRT_ERR_ARG, "synthetic model format '%s' is unknown; use bf16, nvfp4, stored or fp8", format);
    *plain = format && !strcmp(format, "stored") ? QRT_WF_BF16 : *out;
    return QRT_OK;
}

static qrt_status build(qrt_model *m, qrt_wformat fmt, qrt_wformat plain, int mtp, float *host, size_t floats) {
    const qrt_config *c = &m->cfg;
    builder b = {m, fmt, plain, 0};
    vec_cursor vc = {host, 0, 0x51};
    QRT_TRY(make_linear(&b, &m->embed, QRT_WF_BF16, c->vocab, c->hidden, "embed_tokens"));
    QRT_TRY(draw_linear(&b, &m->lm_head, plain, c->vocab, c->hidden, "lm_head"));
    qrt_status st = qrt_model_make_draft_head(m, &m->lm_head, mtp); /* from the host rows, before they move */
    if (st != QRT_OK) {
        free((void *)m->lm_head.data), free((void *)m->lm_head.scales);
        return st;
    }
    QRT_TRY(qrt_model_hand_over(m, &m->lm_head));
    m->final_norm = make_vector(&vc, (size_t)c->hidden, V_NORM);
    for (int i = 0; i < c->n_layers; i++) QRT_TRY(make_layer(&b, &m->layers[i], c->layer_kind[i], &vc));
    if (mtp) {
        qrt_mtp *h = &m->mtp;
        QRT_TRY(make_linear(&b, &h->fc, plain, c->hidden, 2 * (int64_t)c->hidden, "mtp.fc"));
        h->norm_emb = make_vector(&vc, (size_t)c->hidden, V_NORM);
        h->norm_hidden = make_vector(&vc, (size_t)c->hidden, V_NORM);
        h->norm_out = make_vector(&vc, (size_t)c->hidden, V_NORM);
        QRT_TRY(make_layer(&b, &h->layer, QRT_LAYER_FULL, &vc));
        h->present = 1;
    }
    QRT_ASSERT(vc.used <= floats);
    qrt_model_upload_vectors(m, host, floats);
    return QRT_OK;
}

qrt_status qrt_model_synthetic(const char *preset, const char *format, int mtp, const qrt_load_opts *opts,
                               qrt_model **out) {
    *out = NULL;
    qrt_clear_error();
    qrt_dtype_init();
    qrt_wformat fmt = QRT_WF_BF16, plain = QRT_WF_BF16;
    QRT_TRY(parse_format(format, &fmt, &plain));
    qrt_model *m = qrt_calloc(1, sizeof *m);
    if (!m) return QRT_ERR_MEMORY;
    m->ck.first_mtp_file = -1;
    qrt_status st = qrt_config_preset(preset, &m->cfg);
    if (st == QRT_OK) st = qrt_model_apply_opts(m, opts);
    if (st != QRT_OK) {
        free(m);
        return st;
    }
    const qrt_config *c = &m->cfg;
    m->conv_dim = 2 * c->gdn_k_heads * c->gdn_dk + c->gdn_v_heads * c->gdn_dv;
    m->cfg.mtp_layers = mtp ? 1 : 0;
    size_t floats = qrt_model_vector_floats(m);
    m->layers = qrt_calloc((size_t)c->n_layers, sizeof *m->layers);
    float *host = m->layers ? qrt_calloc(floats, sizeof(float)) : NULL;
    m->vectors = host ? m->be->alloc(floats * sizeof(float)) : NULL;
    st = m->vectors ? build(m, fmt, plain, mtp, host, floats) : QRT_ERR_MEMORY;
    free(host);
    if (st != QRT_OK) {
        qrt_model_free(m);
        return st;
    }
    *out = m;
    return QRT_OK;
}
