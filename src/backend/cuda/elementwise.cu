/* Embedding gather and the elementwise ops, plus the fills and the read probe the tests and tilebench use.
 * Variants:
 *   0  embed_rows<fmt>     one block per token, a thread per 16-byte chunk of the row (padded as in matmul_dense.cu)
 *   1  swiglu_kernel       y = silu(g)·u, grid-stride
 *   2  fill_bytes / fill_f32   hash-based pseudo-random fills (never zeros in f32: uniform in [lo, hi))
 *   3  read_probe          16-byte loads over a buffer, the measured read bandwidth
 *   4  argmax_partial / argmax_final   128 blocks of 256 threads per row each reduce a strided share of it to
 *                          (largest value, its first index) and whether it saw a NaN or an infinity; one warp per
 *                          row folds the 128 (the order does not matter: the choice is a total order) and gives -1
 *                          (QRT_PICK_NONFINITE) for a row with a non-finite value. Two launches, so a 248K-float
 *                          vocabulary row streams from 128 SMs. */
#include <limits.h>

#include "backend/cuda/cuda_internal.cuh"

extern "C" {
#include "util/common.h"
#include "util/mix64.h"
}

/* One 16-byte chunk of a table row per thread (rows are padded to 16 bytes, so every chunk is aligned), widened by
 * the dense matmuls' load_w_chunk: one load per thread instead of one per element (element by element, each load
 * waits out its own round trip). */
template <int FMT>
__global__ void embed_rows(const uint8_t *E /* [V][Dp] */, int64_t D, int64_t Dp, const int32_t *ids /* [T] */,
                           float *out /* [T][D] */) {
    pdl_start();
    constexpr int PER = FMT == QRT_WF_F32 ? 4 : 8; /* elements per chunk */
    const int t = blockIdx.x;
    const uint8_t *row = E + (size_t)ids[t] * Dp * (16 / PER);
    float *o = out + (size_t)t * D;
    for (int64_t c = threadIdx.x; c < Dp / PER; c += blockDim.x) {
        float w[PER];
        load_w_chunk<FMT>(row, c, w);
#pragma unroll
        for (int e = 0; e < PER; e++)
            if (c * PER + e < D) o[c * PER + e] = w[e];
    }
}

void qrt_cuda_embed(const qrt_linear *E, const int32_t *ids_dev, int T, float *out) {
    const int64_t Dp = qrt_dense_row_elems(E->fmt, E->k);
    const uint8_t *e = (const uint8_t *)E->data;
    const int64_t chunks = Dp / (E->fmt == QRT_WF_F32 ? 4 : 8);
    const unsigned threads = chunks >= 1024 ? 1024 : (unsigned)((chunks + 31) / 32 * 32);
    switch (E->fmt) {
    case QRT_WF_F32: QRT_LAUNCH(embed_rows<QRT_WF_F32>, T, threads, 0, e, E->k, Dp, ids_dev, out); break;
    case QRT_WF_BF16: QRT_LAUNCH(embed_rows<QRT_WF_BF16>, T, threads, 0, e, E->k, Dp, ids_dev, out); break;
    case QRT_WF_F16: QRT_LAUNCH(embed_rows<QRT_WF_F16>, T, threads, 0, e, E->k, Dp, ids_dev, out); break;
    default: QRT_ASSERT(!"embedding table must be F32, BF16 or F16");
    }
}

static unsigned ew_grid(size_t n) {
    size_t g = (n + 255) / 256;
    return (unsigned)(g < 65536 ? (g ? g : 1) : 65536);
}

__global__ void swiglu_kernel(const float *g, const float *u, size_t n, float *y) {
    pdl_start();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = silu_f(g[i]) * u[i];
}
void qrt_cuda_swiglu(const float *g, const float *u, size_t n, float *y) {
    if (!n) return;
    QRT_LAUNCH(swiglu_kernel, ew_grid(n), 256, 0, g, u, n, y);
}

#define ARGMAX_BLOCKS 128 /* 4 per lane of argmax_final; 32 blocks keep too few loads in flight for a 248K row */
#define ARGMAX_MAX_ROWS 64 /* rows per launch pair: the partials live in static device memory */

__device__ float argmax_part_v[ARGMAX_MAX_ROWS * ARGMAX_BLOCKS];
__device__ int argmax_part_i[ARGMAX_MAX_ROWS * ARGMAX_BLOCKS];
__device__ int argmax_part_bad[ARGMAX_MAX_ROWS * ARGMAX_BLOCKS]; /* the block saw a NaN or an infinity */

/* (v, i) beats (bv, bi): larger, or as large at a smaller index. A NaN v never beats anything. */
__device__ __forceinline__ void argmax_take(float v, int i, float &bv, int &bi) {
    if (v > bv || (v == bv && i < bi)) bv = v, bi = i;
}
__device__ __forceinline__ void argmax_warp(float &bv, int &bi) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float v = __shfl_xor_sync(0xffffffffu, bv, off);
        const int i = __shfl_xor_sync(0xffffffffu, bi, off);
        argmax_take(v, i, bv, bi);
    }
}

__global__ void __launch_bounds__(256) argmax_partial(const float *x /* [rows][n] */, int n) {
    pdl_start();
    __shared__ float wv[8];
    __shared__ int wi[8];
    const float *row = x + (size_t)blockIdx.y * n;
    float bv = -INFINITY;
    int bi = INT_MAX; /* "nothing yet": a real -inf at any index beats it */
    int bad = 0;
    /* unrolled so that 8 loads are in flight at once (one per iteration waits out a round trip each); the choice is a
     * total order, so the visiting order changes nothing */
#pragma unroll 8
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const float v = row[i];
        bad |= !isfinite(v);
        argmax_take(v, i, bv, bi);
    }
    argmax_warp(bv, bi);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) wv[warp] = bv, wi[warp] = bi;
    bad = __syncthreads_or(bad);
    if (warp) return;
    bv = lane < 8 ? wv[lane] : -INFINITY;
    bi = lane < 8 ? wi[lane] : INT_MAX;
    argmax_warp(bv, bi);
    if (lane == 0) {
        argmax_part_v[blockIdx.y * ARGMAX_BLOCKS + blockIdx.x] = bv;
        argmax_part_i[blockIdx.y * ARGMAX_BLOCKS + blockIdx.x] = bi;
        argmax_part_bad[blockIdx.y * ARGMAX_BLOCKS + blockIdx.x] = bad;
    }
}

__global__ void __launch_bounds__(32) argmax_final(const float *x /* [rows][n] */, int n, int32_t *out /* [rows] */) {
    pdl_start();
    const int r = blockIdx.x, lane = threadIdx.x;
    float bv = -INFINITY;
    int bi = INT_MAX, bad = 0;
    (void)x;
#pragma unroll
    for (int j = 0; j < ARGMAX_BLOCKS / 32; j++) {
        argmax_take(argmax_part_v[r * ARGMAX_BLOCKS + j * 32 + lane], argmax_part_i[r * ARGMAX_BLOCKS + j * 32 + lane],
                    bv, bi);
        bad |= argmax_part_bad[r * ARGMAX_BLOCKS + j * 32 + lane];
    }
    argmax_warp(bv, bi);
    bad = __any_sync(0xffffffffu, bad);
    /* a NaN or an infinity anywhere: QRT_PICK_NONFINITE, as the CPU's argmax gives; the row's choice would be noise */
    if (lane == 0) out[r] = bad ? -1 : bi;
}

void qrt_cuda_argmax(const float *x, int rows, int n, int32_t *out) {
    QRT_ASSERT(n > 0);
    for (int r0 = 0; r0 < rows; r0 += ARGMAX_MAX_ROWS) {
        const int nr = QRT_MIN(ARGMAX_MAX_ROWS, rows - r0);
        QRT_LAUNCH(argmax_partial, dim3(ARGMAX_BLOCKS, nr), 256, 0, x + (size_t)r0 * n, n);
        QRT_LAUNCH(argmax_final, nr, 32, 0, x + (size_t)r0 * n, n, out + r0);
    }
}

__global__ void fill_bytes(uint64_t *p, size_t words, uint64_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += (size_t)gridDim.x * blockDim.x)
        p[i] = qrt_mix64(seed * QRT_MIX64_STEP + i);
}
__global__ void fill_tail_bytes(uint8_t *p, size_t n, uint64_t seed) {
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) p[i] = (uint8_t)qrt_mix64(seed + 0x51ed2701u + i);
}
__global__ void fill_f32(float *p, size_t n, uint64_t seed, float lo, float hi) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float u = (float)(qrt_mix64(seed * QRT_MIX64_STEP + i) >> 40) * (1.0f / 16777216.0f);
        p[i] = lo + (hi - lo) * u;
    }
}

extern "C" void qrt_cuda_fill_random_bytes(void *p, size_t bytes, uint64_t seed) {
    QRT_ASSERT((uintptr_t)p % 8 == 0);
    size_t words = bytes / 8;
    if (words) fill_bytes<<<ew_grid(words), 256>>>((uint64_t *)p, words, seed);
    if (bytes % 8) fill_tail_bytes<<<1, 32>>>((uint8_t *)p + words * 8, bytes % 8, seed);
    QRT_CUDA_LAUNCHED();
}
extern "C" void qrt_cuda_fill_random_f32(float *p, size_t n, uint64_t seed, float lo, float hi) {
    if (!n) return;
    fill_f32<<<ew_grid(n), 256>>>(p, n, seed, lo, hi);
    QRT_CUDA_LAUNCHED();
}

__global__ void __launch_bounds__(512) read_probe(const uint4 *p, size_t n, unsigned *sink) {
    uint32_t acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) { /* four loads in flight */
        uint4 a = __ldg(p + i), b = __ldg(p + i + stride), c = __ldg(p + i + 2 * stride), d = __ldg(p + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        uint4 a = __ldg(p + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x9e3779b9u) *sink = acc; /* keeps the loads; practically never taken */
}

extern "C" void qrt_cuda_read_probe(const void *p, size_t bytes, unsigned *sink) {
    QRT_ASSERT((uintptr_t)p % 16 == 0);
    read_probe<<<sm_count() * 4, 512>>>((const uint4 *)p, bytes / 16, sink);
    QRT_CUDA_LAUNCHED();
}
