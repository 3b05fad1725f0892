#include "model/weights.h"

#include <string.h>

static const char *format_names[QRT_WF_COUNT] = {"F32", "F16", "BF16"};

const char *qrt_wformat_name(qrt_wformat f) { return f < QRT_WF_COUNT ? format_names[f] : "?"; }

static size_t format_elem_bytes(qrt_wformat f) { return f == QRT_WF_F32 ? 4 : 2; }

uint64_t qrt_linear_bytes(const qrt_linear *w) { return (uint64_t)w->n * (uint64_t)w->k * format_elem_bytes(w->fmt); }

qrt_status qrt_checkpoint_open(qrt_checkpoint *ck, const char *dir) {
    memset(ck, 0, sizeof *ck);
    ck->dir = dir;
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

void qrt_checkpoint_close(qrt_checkpoint *ck) { qrt_st_close(&ck->st); }

static const qrt_st_tensor *find(qrt_checkpoint *ck, const char *full) {
    return qrt_st_find(&ck->st, full);
}

static qrt_status missing(qrt_checkpoint *ck, const char *full) {
    return qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s' is missing from the checkpoint", ck->dir, full);
}

qrt_status qrt_bind_linear_abs(qrt_checkpoint *ck, const char *full, int64_t n, int64_t k, qrt_linear *w) {
    const qrt_st_tensor *t = find(ck, full);
    if (!t) return missing(ck, full);
    char shape[128];
    qrt_st_shape_str(t, shape, sizeof shape);
    if (t->ndim != 2 || t->shape[0] != n || t->shape[1] != k)
        return qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s' has shape %s; expected [%lld, %lld] from config.json",
                        ck->st.files[t->file].path, full, shape, (long long)n, (long long)k);
    switch (t->dtype) {
    case QRT_DT_F32: w->fmt = QRT_WF_F32; break;
    case QRT_DT_F16: w->fmt = QRT_WF_F16; break;
    case QRT_DT_BF16: w->fmt = QRT_WF_BF16; break;
    default:
        return qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s' has dtype %s; expected BF16, F16 or F32",
                        ck->st.files[t->file].path, full, qrt_dtype_name(t->dtype));
    }
    w->n = n;
    w->k = k;
    w->data = t->data;
    w->name = t->name;
    return QRT_OK;
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
