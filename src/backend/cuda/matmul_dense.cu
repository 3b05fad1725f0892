/* Dense matmul y [T][N] = x [T][K] · Wᵀ for F16 and F32 weights on the CUDA cores; BF16 and FP8 block-128 run on the
 * tensor cores at every T (matmul_dense_mma.cu). Picked by T:
 *   dense_gemv<fmt, TT, R>  T <= 16: one warp per R rows (1, 2, 4 or 8, by a table measured on the H200:
 *                           dense_rows), TT tokens share each 16-byte weight load; x first copied into lane order
 *                           (permute_x_lanes) for coalesced loads
 *   dense_tiled<fmt>        T > 16: 8 warps x 4 rows per block, a 16-token x tile in shared memory
 * Order (batch invariance): the row is cut into 16-byte chunks (8 F16 or 4 F32 elements); chunk c belongs
 * to lane c % 32, which sums its chunks in increasing c, each chunk's elements in order with fmaf; the 32 lane sums are
 * added by the xor butterfly of warp_sum. Device layout (prepare_linear): rows padded with zeros to 16 bytes. */
#include <stdlib.h>
#include <string.h>

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
static void *xp_buf = NULL;
static size_t xp_cap = 0; /* bytes */

static const float4 *permute_x(const float *x, int64_t K, int T, int CE, int64_t *G_out) {
    const int64_t G = (K + 32 * CE - 1) / (32 * CE);
    const size_t quads = (size_t)T * G * (CE / 4) * 32;
    const size_t bytes = QRT_MAX(quads, (size_t)1 << 18) * sizeof(float4);
    float4 *xp = static_cast<float4 *>(qrt_cuda_grow(&xp_buf, &xp_cap, bytes));
    size_t blocks = (quads + 255) / 256;
    QRT_LAUNCH(permute_x_lanes, (unsigned)(blocks < 4096 ? blocks : 4096), 256, 0, x, K, T, CE, G, xp);
    *G_out = G;
    return xp;
}


/* ---- dense (F16 / F32) ------------------------------------------------------------------------------ */

template <int FMT> struct dense_traits;
template <> struct dense_traits<QRT_WF_F16> { enum { CE = 8, ES = 2 }; };
template <> struct dense_traits<QRT_WF_F32> { enum { CE = 4, ES = 4 }; };

/* dense_gemv<FMT, TT, R>: one warp per R consecutive rows, TT tokens per pass. A lane loads its 16-byte chunk of each
 * of the R rows, then each token's x chunk once for all R: x is read once per R rows instead of once per row, which is
 * what bounds a one-row-per-warp GEMV at several tokens (every token's x chunk is as many bytes as the weight chunk or
 * more, all of it through L1). Each (row, token) is summed exactly as at R = 1 (its chunks in increasing c per lane,
 * then warp_sum), so R changes no bit. */
template <int FMT, int TT, int R>
__global__ void __launch_bounds__(128) dense_gemv(const uint8_t *W /* [N][Kp] */, int64_t N, int64_t Kp,
                                                  const float4 *xp /* [T][G][CE/4][32] lane order */, int64_t G,
                                                  int T, float *y /* [T][N] */) {
    pdl_start();
    constexpr int CE = dense_traits<FMT>::CE, ES = dense_traits<FMT>::ES;
    const int lane = threadIdx.x & 31;
    const int64_t row0 = ((int64_t)blockIdx.x * 4 + (threadIdx.x >> 5)) * R;
    if (row0 >= N) return;
    const uint8_t *wrow[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int64_t row = row0 + r < N ? row0 + r : N - 1; /* rows past N read the last one, store nothing */
        wrow[r] = W + row * Kp * ES;
    }
    const int64_t nchunks = Kp / CE;
    for (int t0 = 0; t0 < T; t0 += TT) {
        float acc[R][TT];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int tt = 0; tt < TT; tt++) acc[r][tt] = 0.0f;
#pragma unroll(R > 2 ? 1 : 4)
        for (int64_t c = lane; c < nchunks; c += 32) {
            float w[R][CE];
#pragma unroll
            for (int r = 0; r < R; r++) load_w_chunk<FMT>(wrow[r], c, w[r]);
#pragma unroll
            for (int tt = 0; tt < TT; tt++) {
                if (t0 + tt >= T) break;
                const float4 *xq = xp + (((int64_t)(t0 + tt) * G + c / 32) * (CE / 4)) * 32 + lane;
#pragma unroll
                for (int j = 0; j < CE; j += 4) {
                    const float4 f = __ldg(xq + (j / 4) * 32);
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        acc[r][tt] = fmaf(w[r][j], f.x, acc[r][tt]);
                        acc[r][tt] = fmaf(w[r][j + 1], f.y, acc[r][tt]);
                        acc[r][tt] = fmaf(w[r][j + 2], f.z, acc[r][tt]);
                        acc[r][tt] = fmaf(w[r][j + 3], f.w, acc[r][tt]);
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int tt = 0; tt < TT; tt++) {
                const float s = warp_sum(acc[r][tt]);
                if (lane == 0 && t0 + tt < T && row0 + r < N) y[(size_t)(t0 + tt) * N + row0 + r] = s;
            }
    }
}

#define TILED_ROWS_PER_WARP 4
#define TILED_WARPS 8
#define TILED_TOKENS 16

template <int FMT>
__global__ void __launch_bounds__(TILED_WARPS * 32) dense_tiled(const uint8_t *W /* [N][Kp] */, int64_t N, int64_t K,
                                                                int64_t Kp,
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
                load_w_chunk<FMT>(W + (row0 + r) * Kp * ES, c, w[r]);
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

/* dense_gemv at TT tokens per pass (T rounded up to 1, 2, 4, 8 or 16) and R rows per warp. */
template <int FMT, int R>
static void launch_gemv_rows(const uint8_t *w, int64_t N, int64_t Kp, const float4 *xp,
                             int64_t G, int T, float *y) {
    const unsigned grid = qrt_grid((size_t)N, 4 * R);
    if (T == 1) QRT_LAUNCH(dense_gemv<FMT, 1, R>, grid, 128, 0, w, N, Kp, xp, G, T, y);
    else if (T == 2) QRT_LAUNCH(dense_gemv<FMT, 2, R>, grid, 128, 0, w, N, Kp, xp, G, T, y);
    else if (T <= 4) QRT_LAUNCH(dense_gemv<FMT, 4, R>, grid, 128, 0, w, N, Kp, xp, G, T, y);
    else if (T <= 8) QRT_LAUNCH(dense_gemv<FMT, 8, R>, grid, 128, 0, w, N, Kp, xp, G, T, y);
    else QRT_LAUNCH(dense_gemv<FMT, 16, R>, grid, 128, 0, w, N, Kp, xp, G, T, y);
}
template <int FMT>
static void launch_gemv(int R, const uint8_t *w, int64_t N, int64_t Kp,
                        const float4 *xp, int64_t G, int T, float *y) {
    switch (R) {
    case 1: launch_gemv_rows<FMT, 1>(w, N, Kp, xp, G, T, y); break;
    case 2: launch_gemv_rows<FMT, 2>(w, N, Kp, xp, G, T, y); break;
    case 4: launch_gemv_rows<FMT, 4>(w, N, Kp, xp, G, T, y); break;
    default: launch_gemv_rows<FMT, 8>(w, N, Kp, xp, G, T, y); break;
    }
}

/* Rows per warp of dense_gemv at T tokens on N rows: the fastest in tilebench's BF16 shapes of Qwen3.6-27B on the H200
 * when this kernel still ran BF16 (its per-shape times are in the git history of docs/benchmarks.md; F16 has the
 * same bytes per row and per chunk): short N (5120) gains from sharing x only at 2..4 and 9..16 tokens, long N
 * (16384 and up) at every T, lm_head's 248320 rows most from 4 rows at 5..8 tokens. Every R gives the same bits.
 * QRT_DENSE_ROWS=1|2|4|8 forces one (for tilebench's comparisons). */
static int dense_rows(int T, int64_t N) {
    static int forced = -1;
    if (forced < 0) {
        const char *e = getenv("QRT_DENSE_ROWS");
        forced = e && (!strcmp(e, "1") || !strcmp(e, "2") || !strcmp(e, "4") || !strcmp(e, "8")) ? atoi(e) : 0;
    }
    if (forced) return forced;
    if (N <= 8192) return T == 1 || (T >= 5 && T <= 8) ? 1 : 2;
    if (T == 1) return 4;
    if (T == 2 || T > 8) return 8;
    if (T >= 5 && N >= 65536) return 4;
    return 2;
}

template <int FMT> static void launch_dense(const qrt_linear *W, const float *x, int T, float *y) {
    const int64_t N = W->n, K = W->k, Kp = qrt_dense_row_elems(FMT, K);
    const uint8_t *w = (const uint8_t *)W->data;
    if (T <= 16) {
        int64_t G;
        const float4 *xp = permute_x(x, K, T, dense_traits<FMT>::CE, &G);
        launch_gemv<FMT>(dense_rows(T, N), w, N, Kp, xp, G, T, y);
    } else {
        dim3 grid(qrt_grid((size_t)N, TILED_WARPS * TILED_ROWS_PER_WARP), qrt_grid((size_t)T, TILED_TOKENS));
        QRT_LAUNCH(dense_tiled<FMT>, grid, TILED_WARPS * 32, 0, w, N, K, Kp, x, T, y);
    }
}

void qrt_cuda_matmul_dense(const qrt_linear *W, const float *x, int T, float *y) {
    switch (W->fmt) {
    case QRT_WF_BF16:
    case QRT_WF_FP8B: qrt_cuda_matmul_dense_mma(W, x, T, y); break;
    case QRT_WF_F16: launch_dense<QRT_WF_F16>(W, x, T, y); break;
    case QRT_WF_F32: launch_dense<QRT_WF_F32>(W, x, T, y); break;
    default: QRT_ASSERT(!"not a dense weight format");
    }
}
