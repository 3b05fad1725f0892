/* The CUDA backend's C interface: the op table, plus the hooks the tests and tilebench need to reach
 * individual kernel variants. Everything here is callable from C; pointers are device memory unless
 * the comment says host. Built only with -DQRT_CUDA=ON (QRT_HAVE_CUDA defined). */
#ifndef QRT_CUDA_BACKEND_H
#define QRT_CUDA_BACKEND_H
#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices (0 when there is no driver or no GPU; never fails). */
int qrt_cuda_device_count(void);
/* The CUDA op table, bound to device 0; NULL with a qrt_fail message when no GPU can be used. */
const qrt_backend *qrt_backend_cuda(void);
/* "NVIDIA H200 (sm_90, 132 SMs, 60 MB L2)" into buf. */
void qrt_cuda_describe(char *buf, size_t n);
void qrt_cuda_sync(void);

/* ---- NVFP4 W4A16 matmul variants (matmul_fp4.cu) ---- */
int qrt_nvfp4_variant_count(void);
const char *qrt_nvfp4_variant_name(int v);
/* The reduction order variant v follows (-1 for no variant): variants of one order give bit-identical rows for any T,
 * and the autotuner picks only among order 0 (today every variant is order 0). */
int qrt_nvfp4_variant_order(int v);
/* 1 when variant v runs its own kernel at T tokens on an n x k weight on this GPU; 0 when mma_w1 runs in its place
 * (mma_gemm below 16 tokens, mma_cl and mma_ck above one token or below sm_90, mma_ck where its sums do not fit),
 * which gives the same bits: the autotuner and tilebench skip it. */
int qrt_nvfp4_variant_runs(int v, int T, int64_t n, int64_t k);
/* Run variant v on a prepared NVFP4 weight: y [T][N] = x [T][K] · Wᵀ. */
void qrt_nvfp4_matmul_variant(int v, const qrt_linear *W, const float *x, int T, float *y);
/* Variant v on a paired gate|up group (g->paired): y [T][N] = silu(x · gateᵀ) · (x · upᵀ), as matmul_swiglu. */
void qrt_nvfp4_matmul_swiglu_variant(int v, const qrt_linear_group *g, const float *x, int T, float *y);
/* The variant the table picks for (N, K, T): QRT_NVFP4_VARIANT if set, else the cached or freshly
 * measured fastest (timed on W with scratch activations). */
int qrt_nvfp4_pick(const qrt_linear *W, int T);

/* ---- attention (attention.cu) ---- */
/* Prefill calls of at least this many tokens at Dh 256 take q and p as one bf16 term each (the fast tiling) unless
 * QRT_ATTN_PREFILL_TWO=1; shorter ones, and other Dh, take them as hi + lo (QRT_ATTN_PREFILL_TWO=0: one term at
 * Dh 256 at every length). */
#define QRT_CUDA_ATTN_FAST_MIN_T 1024

/* ---- BF16 / FP8 block-128 tensor-core matmul variants (matmul_dense_mma.cu): every variant gives the same bits ---- */
int qrt_dense_mma_variant_count(void);
const char *qrt_dense_mma_variant_name(int v);
/* Run variant v on a prepared BF16 or FP8 block-128 weight: y [T][N] = x [T][K] · Wᵀ. */
void qrt_dense_mma_variant(int v, const qrt_linear *W, const float *x, int T, float *y);
/* The variant the model runs on n rows at T tokens: QRT_DENSE_MMA (a name) if set, else the measured table. */
int qrt_dense_mma_pick(int64_t n, int T);

/* ---- prefill matmuls on the tensor cores through cuBLASLt (matmul_blas.cu) ---- */
/* The smallest T at which matmul, matmul_group and matmul_swiglu take this path for weight format fmt (a measured
 * table; QRT_BLAS_MIN_T overrides it; always above QRT_GRAPH_MAX_T); effectively never for F32. */
int qrt_cuda_blas_min_t(int fmt);
/* Whether they take it for a weight (or group) of format fmt holding elems = N·K elements at T tokens: T at least
 * the format's threshold and the weight not tiny (matmul_blas.cu says why). */
int qrt_cuda_blas_takes(int fmt, int64_t elems, int T);
/* y [T][N] = x [T][K] · Wᵀ through the cuBLASLt path at any T (BF16, F16, FP8 block-128, NVFP4 not a pair part). */
void qrt_cuda_matmul_blas(const qrt_linear *W, const float *x, int T, float *y);
/* y = x · Wᵀ through the hand kernels at any T (dense, or NVFP4's autotuned variant): matmul off this path. */
void qrt_cuda_matmul_hand(const qrt_linear *W, const float *x, int T, float *y);
/* Every part of a group through it (F32 parts through the hand kernel), x converted once. */
void qrt_cuda_matmul_group_blas(const qrt_linear_group *g, const float *x, int T, float *const *y);

/* ---- the NVFP4 prefill kernel mma_pf (matmul_fp4_prefill.cu) ---- */
/* What QRT_FP4_PREFILL asks for (read once): 0 (unset or 0: matmul, matmul_group and matmul_swiglu keep the
 * autotuned variants), 1, 2 or 3: they run mma_pf on NVFP4 weights above QRT_GRAPH_MAX_T and below the cuBLASLt
 * path's threshold, with x as f16 hi + lo (1) or as f16 alone (2; 3: the same in 128-token blocks, pipelined, where
 * the device gives its block 112 KB of shared memory, else 2). Any other value: 0, with a message on stderr. */
int qrt_cuda_fp4_prefill_form(void);
/* The form an NVFP4 call at T that the cuBLASLt path does not take runs mma_pf in (qrt_cuda_fp4_prefill_form above
 * QRT_GRAPH_MAX_T and below the cuBLASLt threshold, outside a recorded graph), else 0: the autotuned variant. */
int qrt_cuda_fp4_prefill_at(int T);
/* y [T][N] = x [T][K] · Wᵀ through mma_pf in form 1, 2 or 3 at any T (an NVFP4 weight, not a pair part). */
void qrt_cuda_matmul_fp4_prefill(const qrt_linear *W, const float *x, int T, float *y, int form);
/* matmul_group and matmul_swiglu with their NVFP4 launches through mma_pf in form 1, 2 or 3 at any T (the cuBLASLt path
 * still takes a part that is not fused when it would take it alone). */
void qrt_cuda_matmul_group_fp4_prefill(const qrt_linear_group *g, const float *x, int T, float *const *y, int form);
void qrt_cuda_matmul_swiglu_fp4_prefill(const qrt_linear_group *g, const float *x, int T, float *y, float *up,
                                        int form);

/* ---- helpers for tests and benchmarks (elementwise.cu) ---- */
/* Fill bytes of device memory with a pseudo-random pattern (a hash of seed and the byte index). */
void qrt_cuda_fill_random_bytes(void *p, size_t bytes, uint64_t seed);
/* Fill n floats with uniform values in [lo, hi). */
void qrt_cuda_fill_random_f32(float *p, size_t n, uint64_t seed, float lo, float hi);
/* Read every byte of p once (16-byte loads) and fold it into *sink (device int): the read-bandwidth probe. */
void qrt_cuda_read_probe(const void *p, size_t bytes, unsigned *sink);

#ifdef __cplusplus
}
#endif
#endif
