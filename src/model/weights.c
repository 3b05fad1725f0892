#include "model/weights.h"

#include <math.h>
#include <string.h>

qrt_status qrt_checkpoint_open(qrt_checkpoint *ck, const char *dir) {
    memset(ck, 0, sizeof *ck);
    ck->dir = dir;
    ck->first_mtp_file = -1;
    QRT_TRY(qrt_quant_config_load(dir, QRT_QUANT_NONE, &ck->quant));
    QRT_TRY(qrt_st_open_dir(&ck->st, dir));
    if (qrt_st_find(&ck->st, "model.language_model.embed_tokens.weight")) ck->prefix = "model.language_model.";
    else if (qrt_st_find(&ck->st, "model.embed_tokens.weight")) ck->prefix = "model.";
    else {
        qrt_st_close(&ck->st);
        return qrt_fail(QRT_ERR_WEIGHTS, "%s: no 'model.language_model.embed_tokens.weight' or "
                        "'model.embed_tokens.weight' tensor: not a Qwen3.5 text checkpoint", dir);
    }
    return QRT_OK;
}

qrt_status qrt_checkpoint_add_mtp(qrt_checkpoint *ck, const char *mtp_dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/mtp.safetensors", mtp_dir);
    QRT_TRY(qrt_quant_config_load(mtp_dir, QRT_QUANT_ANY, &ck->mtp_quant));
    int first = ck->st.n_files;
    QRT_TRY(qrt_st_add_file(&ck->st, path));
    ck->first_mtp_file = first;
    return QRT_OK;
}

void qrt_checkpoint_close(qrt_checkpoint *ck) {
    qrt_st_close(&ck->st);
    for (int i = 0; i < ck->n_owned; i++) free(ck->owned[i]);
    free(ck->owned);
    ck->owned = NULL;
    ck->n_owned = 0;
}

static const qrt_st_tensor *find(const qrt_checkpoint *ck, const char *full) {
    return qrt_st_find(&ck->st, full);
}

static qrt_status missing(qrt_checkpoint *ck, const char *full) {
    return qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s' is missing from the checkpoint", ck->dir, full);
}

static const char *file_of(const qrt_checkpoint *ck, const qrt_st_tensor *t) { return ck->st.files[t->file].path; }

/* "<p>.weight" → "<p>"; 0 when name does not end in ".weight" (then it can only be a float tensor). */
static int linear_prefix(const char *full, char *p, size_t n) {
    size_t len = strlen(full), suf = strlen(".weight");
    if (len <= suf || strcmp(full + len - suf, ".weight") != 0 || len - suf >= n) return 0;
    memcpy(p, full, len - suf);
    p[len - suf] = 0;
    return 1;
}

static const qrt_st_tensor *find_part(const qrt_checkpoint *ck, const char *p, const char *part) {
    char name[600];
    snprintf(name, sizeof name, "%s.%s", p, part);
    return find(ck, name);
}

int qrt_checkpoint_has_linear(const qrt_checkpoint *ck, const char *full) {
    char p[512];
    if (find(ck, full)) return 1;
    return linear_prefix(full, p, sizeof p) && find_part(ck, p, "weight_packed");
}

static qrt_status check_matrix(const qrt_checkpoint *ck, const qrt_st_tensor *t, qrt_dtype dt, int64_t rows,
                               int64_t cols, const char *what) {
    char shape[128];
    qrt_st_shape_str(t, shape, sizeof shape);
    if (t->dtype != dt)
        return qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s' (%s) has dtype %s; expected %s", file_of(ck, t), t->name,
                        what, qrt_dtype_name(t->dtype), qrt_dtype_name(dt));
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols)
        return qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s' (%s) has shape %s; expected [%lld, %lld] from config.json",
                        file_of(ck, t), t->name, what, shape, (long long)rows, (long long)cols);
    return QRT_OK;
}

/* A tensor-level scale: one F32 element (shape [], [1] or [1, 1]), finite and positive. */
static qrt_status read_scalar_scale(const qrt_checkpoint *ck, const char *p, const char *part, float *out) {
    const qrt_st_tensor *t = find_part(ck, p, part);
    if (!t)
        return qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s.%s' is missing: NVFP4 weight '%s' needs its tensor-level "
                        "scale", ck->dir, p, part, p);
    char shape[128];
    qrt_st_shape_str(t, shape, sizeof shape);
    if (t->dtype != QRT_DT_F32 || t->nbytes != 4)
        return qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s' has dtype %s shape %s; expected one F32 value",
                        file_of(ck, t), t->name, qrt_dtype_name(t->dtype), shape);
    float v;
    memcpy(&v, t->data, 4);
    if (!isfinite(v) || v <= 0)
        return qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s' holds %g; expected a finite positive scale (corrupt "
                        "checkpoint?)", file_of(ck, t), t->name, (double)v);
    *out = v;
    return QRT_OK;
}

/* Block scales must be real numbers: 0x7f / 0xff are e4m3 NaN. */
static qrt_status check_e4m3_finite(const qrt_checkpoint *ck, const qrt_st_tensor *t) {
    for (uint64_t i = 0; i < t->nbytes; i++)
        if ((t->data[i] & 0x7f) == 0x7f) {
            int64_t cols = t->shape[1];
            return qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s' holds NaN (byte 0x%02x) at [%lld, %lld]; expected "
                            "finite e4m3 block scales (corrupt checkpoint?)", file_of(ck, t), t->name, t->data[i],
                            (long long)(i / (uint64_t)cols), (long long)(i % (uint64_t)cols));
        }
    return QRT_OK;
}

/* codes U8 [n, k/2] + scales F8_E4M3 [n, k/16], both layouts share this. */
static qrt_status bind_nvfp4_codes(qrt_checkpoint *ck, const qrt_st_tensor *codes, const char *p, int64_t n,
                                   int64_t k, qrt_linear *w) {
    if (k % 16 != 0)
        return qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s' is NVFP4 but its input size %lld (from config.json) is "
                        "not a multiple of the 16-element scale group", file_of(ck, codes), codes->name, (long long)k);
    QRT_TRY(check_matrix(ck, codes, QRT_DT_U8, n, k / 2, "NVFP4 codes, two per byte"));
    const qrt_st_tensor *sc = find_part(ck, p, "weight_scale");
    if (!sc)
        return qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s.weight_scale' is missing: NVFP4 weight '%s' needs its "
                        "per-16 block scales", ck->dir, p, codes->name);
    QRT_TRY(check_matrix(ck, sc, QRT_DT_F8_E4M3, n, k / 16, "NVFP4 block scales"));
    QRT_TRY(check_e4m3_finite(ck, sc));
    w->fmt = QRT_WF_NVFP4;
    w->data = codes->data;
    w->scales = sc->data;
    w->name = codes->name;
    return QRT_OK;
}

/* compressed-tensors: W = e2m1 · scale / weight_global_scale; scale2 holds the reciprocal (as vLLM's alpha). */
static qrt_status bind_ct_nvfp4(qrt_checkpoint *ck, const qrt_st_tensor *codes, const char *p, int64_t n, int64_t k,
                                qrt_linear *w) {
    QRT_TRY(bind_nvfp4_codes(ck, codes, p, n, k, w));
    float global;
    QRT_TRY(read_scalar_scale(ck, p, "weight_global_scale", &global));
    w->scale2 = 1.0f / global;
    return QRT_OK;
}

/* ModelOpt: W = e2m1 · scale · weight_scale_2. input_scale (activation) is not used: activations stay f32. */
static qrt_status bind_modelopt_nvfp4(qrt_checkpoint *ck, const qrt_st_tensor *codes, const char *p, int64_t n,
                                      int64_t k, qrt_linear *w) {
    QRT_TRY(bind_nvfp4_codes(ck, codes, p, n, k, w));
    return read_scalar_scale(ck, p, "weight_scale_2", &w->scale2);
}

qrt_status qrt_checkpoint_keep(qrt_checkpoint *ck, void *buf) {
    void **grown = realloc(ck->owned, sizeof *grown * (size_t)(ck->n_owned + 1));
    if (!grown) {
        free(buf);
        return qrt_fail(QRT_ERR_MEMORY, "out of memory");
    }
    ck->owned = grown;
    ck->owned[ck->n_owned++] = buf;
    return QRT_OK;
}

/* FP8 block-128: weight e4m3 [n, k], weight_scale_inv [ceil(n/128), ceil(k/128)] (BF16/F16/F32, a multiplier),
 * widened here to an f32 array the checkpoint owns. */
static qrt_status bind_fp8_block(qrt_checkpoint *ck, const qrt_st_tensor *t, const char *p, int64_t n, int64_t k,
                                 qrt_linear *w) {
    QRT_TRY(check_matrix(ck, t, QRT_DT_F8_E4M3, n, k, "FP8 codes"));
    const qrt_st_tensor *s = find_part(ck, p, "weight_scale_inv");
    if (!s)
        return qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s.weight_scale_inv' is missing: F8_E4M3 weight '%s' needs its "
                        "128x128 block scales", file_of(ck, t), p, t->name);
    const int64_t sr = QRT_CEIL_DIV(n, 128), sc = QRT_CEIL_DIV(k, 128);
    if (s->dtype != QRT_DT_F32 && s->dtype != QRT_DT_BF16 && s->dtype != QRT_DT_F16)
        return qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s' has dtype %s; expected F32, BF16 or F16", file_of(ck, s),
                        s->name, qrt_dtype_name(s->dtype));
    QRT_TRY(check_matrix(ck, s, s->dtype, sr, sc, "FP8 block scales, one per 128x128 block"));
    float *scales = qrt_calloc((size_t)(sr * sc), sizeof(float));
    if (!scales) return QRT_ERR_MEMORY;
    for (int64_t i = 0; i < sr * sc; i++) {
        uint16_t h;
        if (s->dtype == QRT_DT_F32) memcpy(&scales[i], s->data + 4 * i, 4);
        else {
            memcpy(&h, s->data + 2 * i, 2);
            scales[i] = s->dtype == QRT_DT_BF16 ? qrt_bf16_to_f32(h) : qrt_f16_to_f32(h);
        }
        if (!isfinite(scales[i])) {
            float bad = scales[i];
            free(scales);
            return qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s' holds %g at block [%lld, %lld]; expected finite scales "
                            "(corrupt checkpoint?)", file_of(ck, s), s->name, (double)bad, (long long)(i / sc),
                            (long long)(i % sc));
        }
    }
    QRT_TRY(qrt_checkpoint_keep(ck, scales));
    w->fmt = QRT_WF_FP8B;
    w->data = t->data;
    w->scales = scales;
    w->name = t->name;
    return QRT_OK;
}

/* The stored form must be what the checkpoint's config declares (float is always allowed: ignore lists keep
 * some linears unquantized). A tensor from the MTP sidecar is checked against the sidecar's own config. */
static qrt_status check_declared(const qrt_checkpoint *ck, const qrt_st_tensor *t, qrt_quant_scheme found) {
    const qrt_quant_decl *d = ck->first_mtp_file >= 0 && t->file >= ck->first_mtp_file ? &ck->mtp_quant : &ck->quant;
    if (found == QRT_QUANT_NONE || d->scheme == QRT_QUANT_ANY || d->scheme == found) return QRT_OK;
    if (d->scheme == QRT_QUANT_NONE)
        return qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s' is stored as %s, but the checkpoint declares no "
                        "quantization (no quantization_config in config.json, no hf_quant_config.json)",
                        file_of(ck, t), t->name, qrt_quant_scheme_name(found));
    return qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s' is stored as %s, but %s declares %s", file_of(ck, t), t->name,
                    qrt_quant_scheme_name(found), d->source, qrt_quant_scheme_name(d->scheme));
}

static qrt_status bind_float(qrt_checkpoint *ck, const qrt_st_tensor *t, int64_t n, int64_t k, qrt_linear *w) {
    switch (t->dtype) {
    case QRT_DT_F32: w->fmt = QRT_WF_F32; break;
    case QRT_DT_F16: w->fmt = QRT_WF_F16; break;
    case QRT_DT_BF16: w->fmt = QRT_WF_BF16; break;
    default:
        return qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s' has dtype %s; expected BF16, F16 or F32, or a quantized "
                        "layout (U8 + weight_scale_2, F8_E4M3 + weight_scale_inv, or weight_packed)", file_of(ck, t),
                        t->name, qrt_dtype_name(t->dtype));
    }
    QRT_TRY(check_matrix(ck, t, t->dtype, n, k, "weight"));
    w->data = t->data;
    w->name = t->name;
    return QRT_OK;
}

qrt_status qrt_bind_linear_abs(qrt_checkpoint *ck, const char *full, int64_t n, int64_t k, qrt_linear *w) {
    memset(w, 0, sizeof *w);
    w->n = n;
    w->k = k;
    char p[512];
    int has_prefix = linear_prefix(full, p, sizeof p);
    const qrt_st_tensor *packed = has_prefix ? find_part(ck, p, "weight_packed") : NULL;
    const qrt_st_tensor *t = find(ck, full);
    if (packed) {
        if (t)
            return qrt_fail(QRT_ERR_WEIGHTS, "%s: both '%s' and '%s' are present; expected one form of the weight",
                            file_of(ck, t), full, packed->name);
        QRT_TRY(check_declared(ck, packed, QRT_QUANT_CT_NVFP4));
        return bind_ct_nvfp4(ck, packed, p, n, k, w);
    }
    if (!t) return missing(ck, full);
    if (has_prefix && t->dtype == QRT_DT_U8) {
        if (!find_part(ck, p, "weight_scale_2"))
            return qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s' is U8 (ModelOpt NVFP4 codes) but '%s.weight_scale_2' is "
                            "missing", file_of(ck, t), full, p);
        QRT_TRY(check_declared(ck, t, QRT_QUANT_MODELOPT_NVFP4));
        return bind_modelopt_nvfp4(ck, t, p, n, k, w);
    }
    if (has_prefix && t->dtype == QRT_DT_F8_E4M3) {
        QRT_TRY(check_declared(ck, t, QRT_QUANT_FP8_BLOCK));
        return bind_fp8_block(ck, t, p, n, k, w);
    }
    return bind_float(ck, t, n, k, w);
}

qrt_status qrt_bind_vector_abs(qrt_checkpoint *ck, const char *full, int64_t count, float add, float *out) {
    const qrt_st_tensor *t = find(ck, full);
    if (!t) return missing(ck, full);
    int64_t have = 1;
    for (int d = 0; d < t->ndim; d++) have *= t->shape[d];
    char shape[128];
    qrt_st_shape_str(t, shape, sizeof shape);
    if (have != count)
        return qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s' has shape %s (%lld elements); expected %lld from "
                        "config.json", ck->st.files[t->file].path, full, shape, (long long)have, (long long)count);
    for (int64_t i = 0; i < count; i++) {
        float v;
        switch (t->dtype) {
        case QRT_DT_F32: memcpy(&v, t->data + 4 * i, 4); break;
        case QRT_DT_F16: {
            uint16_t h;
            memcpy(&h, t->data + 2 * i, 2);
            v = qrt_f16_to_f32(h);
            break;
        }
        case QRT_DT_BF16: {
            uint16_t h;
            memcpy(&h, t->data + 2 * i, 2);
            v = qrt_bf16_to_f32(h);
            break;
        }
        default:
            return qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s' has dtype %s; expected BF16, F16 or F32",
                            ck->st.files[t->file].path, full, qrt_dtype_name(t->dtype));
        }
        out[i] = v + add;
    }
    return QRT_OK;
}
