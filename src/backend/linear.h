/* A linear layer's weight as the backends read it: its storage format and where its codes and scales are.
 * The checkpoint binds these (model/weights.h); the backends' matmuls read them. */
#ifndef QRT_LINEAR_H
#define QRT_LINEAR_H
#include <stdint.h>

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

/* Bytes a matmul reads from this weight (what one decoded token costs): codes + scales for the quantized
 * formats (FP8 scales counted as the f32 the engine reads). */
uint64_t qrt_linear_bytes(const qrt_linear *w);
#endif
