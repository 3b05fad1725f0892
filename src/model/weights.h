/* A linear layer's weight as the checkpoint stores it, and the tensor-name binding of a checkpoint. */
#ifndef QRT_WEIGHTS_H
#define QRT_WEIGHTS_H
#include "io/config.h"
#include "io/safetensors.h"

typedef enum {
    QRT_WF_F32 = 0,
    QRT_WF_F16,
    QRT_WF_BF16,
    QRT_WF_NVFP4, /* data: u8 [N][K/2], element 2j in the low nibble (E2M1 codes); scales: e4m3 [N][K/16];
                   * W = e2m1 · f32(scale) · scale2 (compressed-tensors: scale2 = 1 / weight_global_scale;
                   * ModelOpt: scale2 = weight_scale_2) */
    QRT_WF_FP8B,  /* data: e4m3 [N][K]; scales: f32 [ceil(N/128)][ceil(K/128)] (weight_scale_inv, widened
                   * at load); W = f32(e4m3) · scale[r/128][c/128] */
    QRT_WF_COUNT
} qrt_wformat;

const char *qrt_wformat_name(qrt_wformat f);

/* y[T][N] = x[T][K] · Wᵀ, W row-major [N][K] as PyTorch stores it. */
typedef struct {
    qrt_wformat fmt;
    int64_t n, k;     /* N output features (rows), K input features */
    const void *data; /* [N][K] elements of fmt, in the checkpoint's mapping (or the backend's copy) */
    const void *scales; /* quantized formats only: see qrt_wformat */
    float scale2;       /* NVFP4 tensor-level multiplier */
    const char *name;   /* checkpoint tensor name, for messages */
} qrt_linear;

/* Bytes a matmul reads from this weight (what one decoded token costs). */
uint64_t qrt_linear_bytes(const qrt_linear *w);

/* Where a model's tensors come from: the checkpoint's files and the key prefix of its text model. */
typedef struct {
    const char *dir;
    qrt_st_set st;
    const char *prefix; /* "model.language_model." or "model." */
} qrt_checkpoint;

qrt_status qrt_checkpoint_open(qrt_checkpoint *ck, const char *dir);
void qrt_checkpoint_close(qrt_checkpoint *ck);

/* Names are full checkpoint keys (ck->prefix already applied where it belongs). */
/* Find full_name; check it is a matrix [n, k] of a supported format; fill w. */
qrt_status qrt_bind_linear_abs(qrt_checkpoint *ck, const char *full_name, int64_t n, int64_t k, qrt_linear *w);
/* Find full_name holding exactly count elements (any shape with that many, e.g. [48] or [640, 1, 4]);
 * write them as f32 to out, adding `add` to each (1 for the zero-centred RMSNorm weights). */
qrt_status qrt_bind_vector_abs(qrt_checkpoint *ck, const char *full_name, int64_t count, float add, float *out);
#endif
