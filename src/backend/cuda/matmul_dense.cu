/* Dense matmul y [T][N] = x [T][K] · Wᵀ for BF16, F16, F32 and FP8 block-128 weights (FP8: each chunk of 16 e4m3 is
 * widened and multiplied by its block scale, as the CPU backend does). Picked by T:
 *   dense_gemv<fmt, TT>   T <= 16: one warp per row, TT tokens share each 16-byte weight load; x first copied into
 *                         lane order (permute_x_lanes) for coalesced loads
 *   dense_tiled<fmt>      T > 16: 8 warps x 4 rows per block, a 16-token x tile in shared memory
 * Order (batch invariance): the row is cut into 16-byte chunks (8 BF16/F16, 4 F32 or 16 FP8 elements); chunk c belongs
 * to lane c % 32, which sums its chunks in increasing c, each chunk's elements in order with fmaf; the 32 lane sums are
 * added by the xor butterfly of warp_sum. Device layout (prepare_linear): rows padded with zeros to 16 bytes. */
#include "backend/cuda/cuda_internal.cuh"

extern "C" {
#include "util/common.h"
}

/* ---- activations in lane order --------------------------------------------------------------------
 * A GEMV lane reads the x elements of its own weight chunk: with x row-major, the 32 lanes of a warp read
 * 32 addresses one chunk apart, 32 cache lines per load instruction (bound by L1 wavefronts, a fraction of the read
 * bandwidth, bound by L1 wavefronts). So x is first copied into lane order: chunks of CE elements, in
 * groups of 32 chunks (one per lane); inside a group, quad q (4 floats) of lane l sits at (q·32 + l)·4.
 * A warp's float4 load of quad q is then 512 contiguous bytes. Elements past K are written as 0.
 * xp: [T][G][CE/4][32][4] floats, G = ceil(K / (32·CE)). */
__global__ void permute_x_lanes(const float *x /* [T][K] */, int64_t K, int T, int CE, int64_t G,
                                float4 *xp /* [T][G][CE/4][32] */) {
    pdl_start();
    const int64_t quads = (int64_t)T * G * (CE / 4) * 32;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < quads; i += (int64_t)gridDim.x * blockDim.x) {
        const int lane = (int)(i % 32);
        const int64_t q = i / 32 % (CE / 4), g = i / 32 / (CE / 4) % G, t = i / 32 / (CE / 4) / G;
        const int64_t k0 = (g * 32 + lane) * CE + q * 4;
        const float *src = x + t * K;
        float4 v;
        v.x = k0 + 0 < K ? src[k0 + 0] : 0.0f;
        v.y = k0 + 1 < K ? src[k0 + 1] : 0.0f;
        v.z = k0 + 2 < K ? src[k0 + 2] : 0.0f;
        v.w = k0 + 3 < K ? src[k0 + 3] : 0.0f;
        xp[i] = v;
    }
}

/* One lane-order buffer, grown on demand (a move reported to the graph epoch); every op runs on the calling thread's
 * default stream, so it is never in use by two kernels at once. */
static float4 *xp_buf = NULL;
static size_t xp_cap = 0; /* float4s */

static const float4 *permute_x(const float *x, int64_t K, int T, int CE, int64_t *G_out) {
    const int64_t G = (K + 32 * CE - 1) / (32 * CE);
    const size_t quads = (size_t)T * G * (CE / 4) * 32;
    if (quads > xp_cap) {
        if (xp_buf) QRT_CUDA_CHECK(cudaFree(xp_buf));
        xp_cap = quads < ((size_t)1 << 18) ? ((size_t)1 << 18) : quads;
        QRT_CUDA_CHECK(cudaMalloc(&xp_buf, xp_cap * sizeof(float4)));
        qrt_cuda_scratch_moved();
    }
    size_t blocks = (quads + 255) / 256;
    QRT_LAUNCH(permute_x_lanes, (unsigned)(blocks < 4096 ? blocks : 4096), 256, 0, x, K, T, CE, G, xp_buf);
    *G_out = G;
    return xp_buf;
}


/* ---- dense (BF16 / F16 / F32) and FP8 block-128 ------------------------------------------------------ */

template <int FMT> struct dense_traits;
template <> struct dense_traits<QRT_WF_BF16> { enum { CE = 8, ES = 2 }; };
template <> struct dense_traits<QRT_WF_F16> { enum { CE = 8, ES = 2 }; };
template <> struct dense_traits<QRT_WF_F32> { enum { CE = 4, ES = 4 }; };
template <> struct dense_traits<QRT_WF_FP8B> { enum { CE = 16, ES = 1 }; };

/* FP8 block scales of a row (scales [ceil(N/128)][cols], f32); NULL for the float formats. */
__device__ __forceinline__ const float *fp8_row_scales(const float *scales, int64_t cols, int64_t row) {
    return scales ? scales + (row / 128) * cols : NULL;
}

template <int FMT, int TT>
__global__ void __launch_bounds__(128) dense_gemv(const uint8_t *W /* [N][Kp] */, const float *scales,
                                                  int64_t scale_cols, int64_t N, int64_t Kp,
                                                  const float4 *xp /* [T][G][CE/4][32] lane order */, int64_t G,
                                                  int T, float *y /* [T][N] */) {
    pdl_start();
    constexpr int CE = dense_traits<FMT>::CE, ES = dense_traits<FMT>::ES;
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * 4 + (threadIdx.x >> 5);
    if (row >= N) return;
    const uint8_t *wrow = W + row * Kp * ES;
    const float *srow = fp8_row_scales(scales, scale_cols, row);
    const int64_t nchunks = Kp / CE;
    for (int t0 = 0; t0 < T; t0 += TT) {
        float acc[TT];
#pragma unroll
        for (int tt = 0; tt < TT; tt++) acc[tt] = 0.0f;
#pragma unroll 4
        for (int64_t c = lane; c < nchunks; c += 32) {
            float w[CE];
            load_w_chunk<FMT>(wrow, c, w, srow);
#pragma unroll
            for (int tt = 0; tt < TT; tt++) {
                if (t0 + tt >= T) break;
                const float4 *xq = xp + (((int64_t)(t0 + tt) * G + c / 32) * (CE / 4)) * 32 + lane;
#pragma unroll
                for (int j = 0; j < CE; j += 4) {
                    const float4 f = __ldg(xq + (j / 4) * 32);
                    acc[tt] = fmaf(w[j], f.x, acc[tt]);
                    acc[tt] = fmaf(w[j + 1], f.y, acc[tt]);
                    acc[tt] = fmaf(w[j + 2], f.z, acc[tt]);
                    acc[tt] = fmaf(w[j + 3], f.w, acc[tt]);
                }
            }
        }
#pragma unroll
        for (int tt = 0; tt < TT; tt++) {
            float s = warp_sum(acc[tt]);
            if (lane == 0 && t0 + tt < T) y[(size_t)(t0 + tt) * N + row] = s;
        }
    }
}

#define TILED_ROWS_PER_WARP 4
#define TILED_WARPS 8
#define TILED_TOKENS 16

template <int FMT>
__global__ void __launch_bounds__(TILED_WARPS * 32) dense_tiled(const uint8_t *W /* [N][Kp] */, const float *scales,
                                                                int64_t scale_cols, int64_t N, int64_t K, int64_t Kp,
                                                                const float *x /* [T][K] */, int T,
                                                                float *y /* [T][N] */) {
    pdl_start();
    constexpr int CE = dense_traits<FMT>::CE, ES = dense_traits<FMT>::ES, SLAB = 32 * CE;
    /* +4: keeps 16-byte alignment of every row and staggers the rows over the banks */
    __shared__ __align__(16) float xs[TILED_TOKENS][SLAB + 4];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t row0 = ((int64_t)blockIdx.x * TILED_WARPS + warp) * TILED_ROWS_PER_WARP;
    const int t0 = blockIdx.y * TILED_TOKENS;
    const int64_t nchunks = Kp / CE;
    float acc[TILED_ROWS_PER_WARP][TILED_TOKENS];
#pragma unroll
    for (int r = 0; r < TILED_ROWS_PER_WARP; r++)
#pragma unroll
        for (int tt = 0; tt < TILED_TOKENS; tt++) acc[r][tt] = 0.0f;
    for (int64_t slab = 0; slab < nchunks; slab += 32) {
        __syncthreads(); /* the previous slab's reads are done */
        for (int i = threadIdx.x; i < TILED_TOKENS * SLAB; i += TILED_WARPS * 32) {
            int tt = i / SLAB, kk = i % SLAB;
            int64_t k = slab * CE + kk;
            xs[tt][kk] = (t0 + tt < T && k < K) ? x[(size_t)(t0 + tt) * K + k] : 0.0f;
        }
        __syncthreads();
        const int64_t c = slab + lane;
        if (c >= nchunks) continue; /* such a lane owns no chunk here, as in dense_gemv */
        float w[TILED_ROWS_PER_WARP][CE];
#pragma unroll
        for (int r = 0; r < TILED_ROWS_PER_WARP; r++) {
            if (row0 + r < N)
                load_w_chunk<FMT>(W + (row0 + r) * Kp * ES, c, w[r], fp8_row_scales(scales, scale_cols, row0 + r));
            else
#pragma unroll
                for (int j = 0; j < CE; j++) w[r][j] = 0.0f;
        }
#pragma unroll
        for (int tt = 0; tt < TILED_TOKENS; tt++) {
            float xv[CE];
#pragma unroll
            for (int j = 0; j < CE; j += 4) {
                float4 f = *reinterpret_cast<const float4 *>(&xs[tt][lane * CE + j]);
                xv[j] = f.x, xv[j + 1] = f.y, xv[j + 2] = f.z, xv[j + 3] = f.w;
            }
#pragma unroll
            for (int r = 0; r < TILED_ROWS_PER_WARP; r++)
#pragma unroll
                for (int j = 0; j < CE; j++) acc[r][tt] = fmaf(w[r][j], xv[j], acc[r][tt]);
        }
    }
#pragma unroll
    for (int r = 0; r < TILED_ROWS_PER_WARP; r++)
#pragma unroll
        for (int tt = 0; tt < TILED_TOKENS; tt++) {
            float s = warp_sum(acc[r][tt]);
            if (lane == 0 && row0 + r < N && t0 + tt < T) y[(size_t)(t0 + tt) * N + row0 + r] = s;
        }
}

template <int FMT> static void launch_dense(const qrt_linear *W, const float *x, int T, float *y) {
    const int64_t N = W->n, K = W->k, Kp = qrt_dense_row_elems(FMT, K);
    const uint8_t *w = (const uint8_t *)W->data;
    const float *sc = FMT == QRT_WF_FP8B ? (const float *)W->scales : NULL;
    const int64_t scols = (K + 127) / 128;
    if (T <= 16) {
        int64_t G;
        const float4 *xp = permute_x(x, K, T, dense_traits<FMT>::CE, &G);
        unsigned grid = qrt_grid((size_t)N, 4);
        if (T == 1) QRT_LAUNCH(dense_gemv<FMT, 1>, grid, 128, 0, w, sc, scols, N, Kp, xp, G, T, y);
        else if (T == 2) QRT_LAUNCH(dense_gemv<FMT, 2>, grid, 128, 0, w, sc, scols, N, Kp, xp, G, T, y);
        else if (T <= 4) QRT_LAUNCH(dense_gemv<FMT, 4>, grid, 128, 0, w, sc, scols, N, Kp, xp, G, T, y);
        else if (T <= 8) QRT_LAUNCH(dense_gemv<FMT, 8>, grid, 128, 0, w, sc, scols, N, Kp, xp, G, T, y);
        else QRT_LAUNCH(dense_gemv<FMT, 16>, grid, 128, 0, w, sc, scols, N, Kp, xp, G, T, y);
    } else {
        dim3 grid(qrt_grid((size_t)N, TILED_WARPS * TILED_ROWS_PER_WARP), qrt_grid((size_t)T, TILED_TOKENS));
        QRT_LAUNCH(dense_tiled<FMT>, grid, TILED_WARPS * 32, 0, w, sc, scols, N, K, Kp, x, T, y);
    }
}

void qrt_cuda_matmul_dense(const qrt_linear *W, const float *x, int T, float *y) {
    switch (W->fmt) {
    case QRT_WF_BF16: launch_dense<QRT_WF_BF16>(W, x, T, y); break;
    case QRT_WF_F16: launch_dense<QRT_WF_F16>(W, x, T, y); break;
    case QRT_WF_F32: launch_dense<QRT_WF_F32>(W, x, T, y); break;
    case QRT_WF_FP8B: launch_dense<QRT_WF_FP8B>(W, x, T, y); break;
    default: QRT_ASSERT(!"not a dense weight format");
    }
}
