/* BF16 matmul y [T][N] = x [T][K] · Wᵀ on the tensor cores, every T (the dense family's BF16 path, matmul_dense.cu).
 *
 * Why: a CUDA-core GEMV spends one f32 FMA and a share of an x load per (weight, token), so at the verify's 7 tokens
 * it ran at ~3x its one-token time and read each weight once per token. Here the weights are the A operand of
 * mma.sync m16n8k16 (bf16 in, f32 out), read once for up to 16 tokens (the B columns).
 *
 * Exactness: x (f32) is cut into three bf16 parts by truncation, hi = x's top 16 bits, mid = those of x − hi, lo =
 * x − hi − mid; each part has at most 8 significant bits, so x = hi + mid + lo exactly (for normal x) and each weight
 * · part product is exact in the mma; the only rounding is the f32 accumulation, as on the CPU.
 *
 * Variants dense_mma<TILES, DEPTH>: a block of DENSE_MMA_SPLIT warps owns TILES 16-row tiles; every warp streams its
 * share of K for those tiles with DEPTH chunks of weights in flight in registers (issued before the launch's wait).
 * Which variant runs at each (T, N): qrt_bf16_pick, a table measured with tilebench (docs/benchmarks.md, "BF16 on
 * the tensor cores").
 *
 * Order (every variant, every T; the tests check the bits): a row is cut into chunks of 32 elements; chunk c belongs to
 * warp c % 8 of the block; in a chunk, lane quad position q (lane % 4) holds elements 8q..8q+7 (one 16-byte load of
 * row g and one of row g+8, g = lane / 4), which fill the k slots 2q, 2q+1, 2q+8, 2q+9 of two k-steps (elements
 * 0..3, then 4..7); x's matching elements are the B fragment of the same lane (column g = the token). Per chunk and
 * token: p = mma chain from 0 over (lo, mid, hi) × (k-step 0, 1); each warp sums its chunks' p in increasing c
 * (acc += p), and the block adds the 8 warps' sums in warp order. A tensor-core dot product of one (row, B column)
 * uses only that row and that column, so the token's place, T and the variant change no bit. Tokens past 16 are
 * further 16-token groups (grid y), each the same computation. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

extern "C" {
#include "util/common.h"
}

#define DENSE_MMA_SPLIT 8  /* warps per block, each a fixed share of K: part of the reduction order */
#define DENSE_MMA_TOKENS 16 /* tokens per block (two n8 tiles) */

__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Weights are read once: not kept in L1, and first out of the L2 (what later launches read again stays). */
__device__ __forceinline__ uint4 ld_weights16(const uint4 *p, uint64_t policy) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p), "l"(policy));
    return r;
}

__device__ __forceinline__ uint32_t word_of(const uint4 &u, int i) { return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w; }

/* The three bf16 parts of x0 and x1 (x0 in the low half of each pair), exact: see the top of the file. */
__device__ __forceinline__ void split3(float x0, float x1, uint32_t &hi, uint32_t &mid, uint32_t &lo) {
    const uint32_t u0 = __float_as_uint(x0), u1 = __float_as_uint(x1);
    hi = __byte_perm(u0, u1, 0x7632);
    const float r0 = x0 - __uint_as_float(u0 & 0xffff0000u), r1 = x1 - __uint_as_float(u1 & 0xffff0000u);
    const uint32_t v0 = __float_as_uint(r0), v1 = __float_as_uint(r1);
    mid = __byte_perm(v0, v1, 0x7632);
    const float s0 = r0 - __uint_as_float(v0 & 0xffff0000u), s1 = r1 - __uint_as_float(v1 & 0xffff0000u);
    lo = __byte_perm(__float_as_uint(s0), __float_as_uint(s1), 0x7632);
}

/* x elements k..k+7 of one token row (0 past K, and for a token past T: row NULL). */
__device__ __forceinline__ void load_x8(float (&v)[8], const float *row /* [K] or NULL */, int64_t k, int64_t K,
                                        bool vec) {
    if (row && vec && k + 8 <= K) {
        const float4 a = __ldg(reinterpret_cast<const float4 *>(row + k));
        const float4 b = __ldg(reinterpret_cast<const float4 *>(row + k + 4));
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        return;
    }
#pragma unroll
    for (int e = 0; e < 8; e++) v[e] = row && k + e < K ? __ldg(row + k + e) : 0.0f;
}

/* Two blocks per SM, except where 16 tokens' x and 8 chunk-tiles of weights need more than 128 registers a thread. */
template <int TILES, int DEPTH, int NT> constexpr int dense_mma_min_blocks() { return NT == 2 && TILES * DEPTH >= 8 ? 1 : 2; }

template <int TILES, int DEPTH, int NT>
__global__ void __launch_bounds__(DENSE_MMA_SPLIT * 32, (dense_mma_min_blocks<TILES, DEPTH, NT>()))
    dense_mma(const uint8_t *W /* [N][Kp] bf16 */, int64_t N, int64_t K, int64_t Kp, const float *x /* [T][K] */,
              int T, float *y /* [T][N] */) {
    static_assert(DEPTH % 2 == 0, "x is double-buffered over the DEPTH slots");
    __shared__ float red[DENSE_MMA_SPLIT][TILES * NT * 4][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int64_t tile0 = (int64_t)blockIdx.x * TILES;
    const int64_t pieces = Kp / 8;              /* 16-byte pieces per row */
    const int64_t nch = (pieces + 3) / 4;       /* 32-element chunks per row */
    const int nw = warp < nch ? (int)((nch - 1 - warp) / DENSE_MMA_SPLIT + 1) : 0; /* this warp's chunks */
    const uint64_t policy = [] {
        uint64_t p;
        asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
        return p;
    }();
    /* lane's 16-byte piece q of chunk c of rows g and g + 8 of each tile (rows past N read row N − 1) */
    const uint4 *wa[TILES], *wb[TILES];
#pragma unroll
    for (int t = 0; t < TILES; t++) {
        const int64_t ra = QRT_MIN((tile0 + t) * 16 + g, N - 1), rb = QRT_MIN((tile0 + t) * 16 + g + 8, N - 1);
        wa[t] = reinterpret_cast<const uint4 *>(W + ra * Kp * 2) + q;
        wb[t] = reinterpret_cast<const uint4 *>(W + rb * Kp * 2) + q;
    }
    uint4 wr[DEPTH][TILES][2];
    auto load_w = [&](uint4(&slot)[TILES][2], int j) {
        const int64_t c = warp + (int64_t)j * DENSE_MMA_SPLIT;
        const bool in = c * 4 + q < pieces;
#pragma unroll
        for (int t = 0; t < TILES; t++) {
            slot[t][0] = in ? ld_weights16(wa[t] + c * 4, policy) : make_uint4(0, 0, 0, 0);
            slot[t][1] = in ? ld_weights16(wb[t] + c * 4, policy) : make_uint4(0, 0, 0, 0);
        }
    };
    /* Weights are written only at load time, so the first slots may be asked for before the wait (see pdl_start). */
#pragma unroll
    for (int d = 0; d < DEPTH; d++)
        if (d < nw) load_w(wr[d], d);
    pdl_start();

    const int tok0 = blockIdx.y * DENSE_MMA_TOKENS;
    const int ntok = QRT_MIN(T - tok0, DENSE_MMA_TOKENS);
    const float *xrow[NT];
#pragma unroll
    for (int n = 0; n < NT; n++) xrow[n] = g + 8 * n < ntok ? x + (int64_t)(tok0 + g + 8 * n) * K : NULL;
    const bool vec = K % 4 == 0 && ((uintptr_t)x & 15) == 0;
    float xv[2][NT][8];
    auto load_xs = [&](float(&slot)[NT][8], int j) {
        const int64_t k = (warp + (int64_t)j * DENSE_MMA_SPLIT) * 32 + q * 8;
#pragma unroll
        for (int n = 0; n < NT; n++) load_x8(slot[n], xrow[n], k, K, vec);
    };
    /* x is read by every block: from L1 (or the L2) it arrives sooner than the weights, so it is loaded one chunk
     * ahead into registers and asked into L1 DEPTH chunks ahead, where the weights are */
    auto prefetch_xs = [&](int j) {
        const int64_t k = (warp + (int64_t)j * DENSE_MMA_SPLIT) * 32 + q * 8;
#pragma unroll
        for (int n = 0; n < NT; n++)
            if (xrow[n] && k < K) asm volatile("prefetch.global.L1 [%0];\n" ::"l"(xrow[n] + k));
    };
#pragma unroll
    for (int d = 1; d < DEPTH; d++)
        if (d < nw) prefetch_xs(d);
    if (nw > 0) load_xs(xv[0], 0);

    float acc[TILES][NT][4];
#pragma unroll
    for (int t = 0; t < TILES; t++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int r = 0; r < 4; r++) acc[t][n][r] = 0.0f;

    for (int j0 = 0; j0 < nw; j0 += DEPTH) {
#pragma unroll
        for (int d = 0; d < DEPTH; d++) {
            const int j = j0 + d;
            if (j >= nw) break;
            if (j + DEPTH < nw) prefetch_xs(j + DEPTH);
            if (j + 1 < nw) load_xs(xv[(d + 1) & 1], j + 1);
#pragma unroll
            for (int n = 0; n < NT; n++) {
                uint32_t b[3][4]; /* [lo, mid, hi][element pair] of token tile n */
#pragma unroll
                for (int p = 0; p < 4; p++)
                    split3(xv[d & 1][n][2 * p], xv[d & 1][n][2 * p + 1], b[2][p], b[1][p], b[0][p]);
#pragma unroll
                for (int t = 0; t < TILES; t++) {
                    float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                    for (int part = 0; part < 3; part++)
#pragma unroll
                        for (int s = 0; s < 2; s++)
                            mma_bf16_16816(p, word_of(wr[d][t][0], 2 * s), word_of(wr[d][t][1], 2 * s),
                                           word_of(wr[d][t][0], 2 * s + 1), word_of(wr[d][t][1], 2 * s + 1),
                                           b[part][2 * s], b[part][2 * s + 1]);
#pragma unroll
                    for (int r = 0; r < 4; r++) acc[t][n][r] += p[r];
                }
            }
            if (j + DEPTH < nw) load_w(wr[d], j + DEPTH);
        }
    }

#pragma unroll
    for (int t = 0; t < TILES; t++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int r = 0; r < 4; r++) red[warp][(t * NT + n) * 4 + r][lane] = acc[t][n][r];
    __syncthreads();
    for (int e = threadIdx.x; e < TILES * NT * 4 * 32; e += DENSE_MMA_SPLIT * 32) {
        const int l = e & 31, i = e >> 5, r = i & 3, n = (i >> 2) % NT, t = (i >> 2) / NT;
        float s = red[0][i][l];
#pragma unroll
        for (int w = 1; w < DENSE_MMA_SPLIT; w++) s += red[w][i][l];
        /* accumulator r of lane l: row g (r < 2) or g + 8, column (token) 2·(l % 4) + (r & 1) */
        const int64_t row = (tile0 + t) * 16 + (l >> 2) + (r >= 2 ? 8 : 0);
        const int tok = n * 8 + 2 * (l & 3) + (r & 1);
        if (row < N && tok < ntok) y[(int64_t)(tok0 + tok) * N + row] = s;
    }
}

/* The variants, named mma<TILES>x<DEPTH>. */
typedef struct {
    const char *name;
    int tiles, depth;
} dense_mma_variant;
static const dense_mma_variant mma_variants[] = {{"mma1x4", 1, 4}, {"mma2x2", 2, 2}, {"mma2x4", 2, 4}, {"mma4x2", 4, 2}};
#define DENSE_MMA_VARIANTS ((int)(sizeof mma_variants / sizeof mma_variants[0]))

template <int TILES, int DEPTH>
static void launch_tiles(const uint8_t *w, int64_t N, int64_t K, int64_t Kp, const float *x, int T, float *y) {
    const dim3 grid(qrt_grid((size_t)((N + 15) / 16), TILES), qrt_grid((size_t)T, DENSE_MMA_TOKENS));
    if (T <= 8) QRT_LAUNCH(dense_mma<TILES, DEPTH, 1>, grid, DENSE_MMA_SPLIT * 32, 0, w, N, K, Kp, x, T, y);
    else QRT_LAUNCH(dense_mma<TILES, DEPTH, 2>, grid, DENSE_MMA_SPLIT * 32, 0, w, N, K, Kp, x, T, y);
}

extern "C" int qrt_bf16_variant_count(void) { return DENSE_MMA_VARIANTS; }
extern "C" const char *qrt_bf16_variant_name(int v) { return v >= 0 && v < DENSE_MMA_VARIANTS ? mma_variants[v].name : "?"; }

extern "C" void qrt_bf16_matmul_variant(int v, const qrt_linear *W, const float *x, int T, float *y) {
    QRT_ASSERT(W->fmt == QRT_WF_BF16 && v >= 0 && v < DENSE_MMA_VARIANTS && T >= 1);
    const int64_t N = W->n, K = W->k, Kp = qrt_dense_row_elems(QRT_WF_BF16, K);
    const uint8_t *w = (const uint8_t *)W->data;
    switch (v) {
    case 0: launch_tiles<1, 4>(w, N, K, Kp, x, T, y); break;
    case 1: launch_tiles<2, 2>(w, N, K, Kp, x, T, y); break;
    case 2: launch_tiles<2, 4>(w, N, K, Kp, x, T, y); break;
    default: launch_tiles<4, 2>(w, N, K, Kp, x, T, y); break;
    }
}

extern "C" int qrt_bf16_pick(int64_t n, int T) {
    static int forced = -2;
    if (forced == -2) {
        forced = -1;
        const char *e = getenv("QRT_BF16_VARIANT");
        for (int v = 0; e && v < DENSE_MMA_VARIANTS; v++)
            if (!strcmp(e, mma_variants[v].name)) forced = v;
        if (e && *e && forced < 0)
            fprintf(stderr, "qwenrt: QRT_BF16_VARIANT=%s is not mma1x4, mma2x2, mma2x4 or mma4x2; ignored\n", e);
    }
    if (forced >= 0) return forced;
    (void)T, (void)n;
    return 1;
}

void qrt_cuda_matmul_bf16_mma(const qrt_linear *W, const float *x, int T, float *y) {
    qrt_bf16_matmul_variant(qrt_bf16_pick(W->n, T), W, x, T, y);
}
