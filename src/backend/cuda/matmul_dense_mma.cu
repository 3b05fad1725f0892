/* BF16 and FP8 block-128 matmul y [T][N] = x [T][K] · Wᵀ on the tensor cores, every T (the dense family's path for
 * these formats, matmul_dense.cu).
 *
 * Why: a CUDA-core GEMV spends one f32 FMA and a share of an x load per (weight, token), so at the verify's 7 tokens
 * it ran at ~3x its one-token time and read each weight once per token. Here the weights are the A operand of
 * mma.sync m16n8k16 (bf16 in, f32 out), read once for up to 16 tokens (the B columns). FP8 (e4m3) codes widen to bf16
 * exactly; their block scale multiplies each chunk's sum.
 *
 * Exactness: x (f32) is cut into three bf16 parts by truncation, hi = x's top 16 bits, mid = those of x − hi, lo =
 * x − hi − mid; each part has at most 8 significant bits, so x = hi + mid + lo exactly (for normal x) and each weight
 * · part product is exact in the mma; the only rounding is the f32 accumulation, as on the CPU. Inf in x gives NaN
 * (inf − inf in the split) where an f32 dot product could give ±Inf.
 *
 * Variants dense_mma<FMT, TILES, DEPTH, NT> (named mma<TILES>x<DEPTH>): a block of 8 warps owns TILES 16-row tiles;
 * every warp streams its share of K for them with DEPTH chunks of weights in flight in registers (the first issued
 * before the launch's wait); NT token tiles of 8. Which variant runs at each (N, T): qrt_dense_mma_pick, a table
 * measured with tilebench (docs/benchmarks.md, "BF16 and FP8 on the tensor cores").
 *
 * Order (every variant, every T; the tests check the bits): a row is cut into chunks of 4 16-byte pieces (32 BF16 or
 * 64 FP8 elements); chunk c belongs to warp c % 8 of the block; in a chunk, lane quad position q (lane % 4) holds
 * piece q (one 16-byte load of row g and one of row g+8, g = lane / 4), whose elements fill the k slots 2q, 2q+1,
 * 2q+8, 2q+9 of 2 (BF16) or 4 (FP8) k-steps, 4 elements each in order; x's matching elements are the B fragment of
 * the same lane (column g = the token). Per chunk and token: p = mma chain from 0 over the k-steps in order, each
 * with x's lo, mid, hi part; each warp sums its chunks' p in increasing c (BF16: acc += p; FP8: acc = fmaf(p, the
 * chunk's block scale, acc)), and the 8 warps' sums are added in warp order. A tensor-core dot product of one (row,
 * B column) uses only that row and that column, so the token's place, T and the variant change no bit. Tokens past
 * 16 are further 16-token groups (grid y), each the same computation. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

extern "C" {
#include "util/common.h"
}

#define DENSE_MMA_SPLIT 8  /* warps per block, each a fixed share of K: part of the reduction order */
#define DENSE_MMA_TOKENS 16 /* tokens per block (two n8 tiles) */


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

/* x elements k..k+E-1 of one token row (0 past K, and for a token past T: row NULL). */
template <int E>
__device__ __forceinline__ void load_x(float (&v)[E], const float *row /* [K] or NULL */, int64_t k, int64_t K,
                                       bool vec) {
    if (row && vec && k + E <= K) {
#pragma unroll
        for (int e = 0; e < E; e += 4) {
            const float4 a = __ldg(reinterpret_cast<const float4 *>(row + k + e));
            v[e] = a.x, v[e + 1] = a.y, v[e + 2] = a.z, v[e + 3] = a.w;
        }
        return;
    }
#pragma unroll
    for (int e = 0; e < E; e++) v[e] = row && k + e < K ? __ldg(row + k + e) : 0.0f;
}

/* Two e4m3 codes (the first in the low byte) as a bf16 pair: exact (at most 4 significant bits, exponents within
 * bf16's), through f16. */
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t two) {
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(two & 0xffff), __NV_E4M3);
    const float2 f = __half22float2(*reinterpret_cast<__half2 *>(&h));
    return __byte_perm(__float_as_uint(f.x), __float_as_uint(f.y), 0x7632);
}

/* Elements per 16-byte piece of a row, and bytes per element. */
template <int FMT> struct mma_format;
template <> struct mma_format<QRT_WF_BF16> { enum { EPC = 8, ES = 2 }; };
template <> struct mma_format<QRT_WF_FP8B> { enum { EPC = 16, ES = 1 }; };

/* 128 registers a thread (16 warps per SM), except where x (16 tokens, or FP8's 16 elements per lane) and the
 * weights in flight need more: then 255 (8 warps). */
template <int FMT, int TILES, int DEPTH, int NT> constexpr int dense_mma_min_blocks() {
    return (NT == 2 && TILES * DEPTH >= 8) || (FMT == QRT_WF_FP8B && (NT == 2 || TILES * DEPTH >= 8)) ? 1 : 2;
}

/* The weights one launch covers: one linear, or the parts of a group that read the same x (GDN in_proj qkv|z|b|a in
 * BF16: one launch instead of four, the small parts no longer a launch of 2-3 blocks each). Part i owns the grid's
 * blocks [block_begin[i], block_begin[i + 1]); a block's tiles never span two parts, so a row's computation is the
 * same as in a launch of its part alone. Passed as a __grid_constant__ (read in place, no local-memory copy). */
typedef struct {
    int count;
    int64_t block_begin[QRT_GROUP_MAX + 1];
    const uint8_t *w[QRT_GROUP_MAX];    /* [n][Kp] */
    const float *scales[QRT_GROUP_MAX]; /* FP8: [ceil(n/128)][scale_cols] */
    int64_t n[QRT_GROUP_MAX];
    float *y[QRT_GROUP_MAX];            /* [T][n] */
} dense_parts;

template <int FMT, int TILES, int DEPTH, int NT>
__global__ void __launch_bounds__(DENSE_MMA_SPLIT * 32, (dense_mma_min_blocks<FMT, TILES, DEPTH, NT>()))
    dense_mma(const __grid_constant__ dense_parts parts, int64_t scale_cols, int64_t K, int64_t Kp,
              const float *x /* [T][K] */, int T) {
    static_assert(DEPTH % 2 == 0, "x is double-buffered over the DEPTH slots");
    constexpr int SUMS = TILES * NT * 4;
    constexpr int EPC = mma_format<FMT>::EPC, ES = mma_format<FMT>::ES, CH = 4 * EPC, KSTEPS = EPC / 4;
    constexpr bool FP8 = FMT == QRT_WF_FP8B;
    __shared__ float red[DENSE_MMA_SPLIT][SUMS][32];
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int warp = threadIdx.x >> 5;
    int part = 0;
#pragma unroll
    for (int i = 1; i < QRT_GROUP_MAX; i++)
        if (i < parts.count && blockIdx.x >= parts.block_begin[i]) part = i;
    const uint8_t *const W = parts.w[part];
    const float *const scales = parts.scales[part];
    const int64_t N = parts.n[part];
    float *const y = parts.y[part];
    const int64_t tile0 = ((int64_t)blockIdx.x - parts.block_begin[part]) * TILES;
    const int64_t pieces = Kp / EPC;            /* 16-byte pieces per row */
    const int64_t nch = (pieces + 3) / 4;       /* chunks (4 pieces) per row */
    const int nw = warp < nch ? (int)((nch - 1 - warp) / DENSE_MMA_SPLIT + 1) : 0; /* this warp's chunks */
    const uint64_t policy = [] {
        uint64_t p;
        asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
        return p;
    }();
    /* lane's 16-byte piece q of chunk c of rows g and g + 8 of each tile (rows past N read row N − 1) */
    const uint4 *wa[TILES], *wb[TILES];
    const float *srow[TILES]; /* FP8: the block scales of the tile's 128 rows (a tile never spans two) */
#pragma unroll
    for (int t = 0; t < TILES; t++) {
        const int64_t ra = QRT_MIN((tile0 + t) * 16 + g, N - 1), rb = QRT_MIN((tile0 + t) * 16 + g + 8, N - 1);
        wa[t] = reinterpret_cast<const uint4 *>(W + ra * Kp * ES) + q;
        wb[t] = reinterpret_cast<const uint4 *>(W + rb * Kp * ES) + q;
        srow[t] = FP8 ? scales + ra / 128 * scale_cols : NULL;
    }
    uint4 wr[DEPTH][TILES][2];
    float wsc[DEPTH][TILES]; /* FP8: the chunk's block scale (a chunk of 64 never spans two 128-column blocks) */
    auto load_w = [&](uint4(&slot)[TILES][2], float(&sc)[TILES], int j) {
        const int64_t c = warp + (int64_t)j * DENSE_MMA_SPLIT;
        const bool in = c * 4 + q < pieces;
#pragma unroll
        for (int t = 0; t < TILES; t++) {
            slot[t][0] = in ? ld_weights16(wa[t] + c * 4, policy) : make_uint4(0, 0, 0, 0);
            slot[t][1] = in ? ld_weights16(wb[t] + c * 4, policy) : make_uint4(0, 0, 0, 0);
            if constexpr (FP8) sc[t] = __ldg(srow[t] + c * CH / 128);
        }
    };
    /* Weights are written only at load time, so the first slots may be asked for before the wait (see pdl_start). */
#pragma unroll
    for (int d = 0; d < DEPTH; d++)
        if (d < nw) load_w(wr[d], wsc[d], d);
    pdl_start();

    const int tok0 = blockIdx.y * DENSE_MMA_TOKENS;
    const int ntok = QRT_MIN(T - tok0, DENSE_MMA_TOKENS);
    const float *xrow[NT];
#pragma unroll
    for (int n = 0; n < NT; n++) xrow[n] = g + 8 * n < ntok ? x + (int64_t)(tok0 + g + 8 * n) * K : NULL;
    const bool vec = K % 4 == 0 && ((uintptr_t)x & 15) == 0;
    float xv[2][NT][EPC];
    auto load_xs = [&](float(&slot)[NT][EPC], int j) {
        const int64_t k = (warp + (int64_t)j * DENSE_MMA_SPLIT) * CH + q * EPC;
#pragma unroll
        for (int n = 0; n < NT; n++) load_x<EPC>(slot[n], xrow[n], k, K, vec);
    };
    /* x is read by every block: from L1 (or the L2) it arrives sooner than the weights, so it is loaded one chunk
     * ahead into registers and asked into L1 DEPTH chunks ahead, where the weights are */
    auto prefetch_xs = [&](int j) {
        const int64_t k = (warp + (int64_t)j * DENSE_MMA_SPLIT) * CH + q * EPC;
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
                float p[TILES][4];
#pragma unroll
                for (int t = 0; t < TILES; t++)
#pragma unroll
                    for (int r = 0; r < 4; r++) p[t][r] = 0.0f;
#pragma unroll
                for (int s = 0; s < KSTEPS; s++) {
                    uint32_t b[3][2]; /* [lo, mid, hi][elements 4s, 4s+1 | 4s+2, 4s+3] of token tile n */
                    split3(xv[d & 1][n][4 * s], xv[d & 1][n][4 * s + 1], b[2][0], b[1][0], b[0][0]);
                    split3(xv[d & 1][n][4 * s + 2], xv[d & 1][n][4 * s + 3], b[2][1], b[1][1], b[0][1]);
#pragma unroll
                    for (int t = 0; t < TILES; t++) {
                        uint32_t a[4]; /* elements 4s, 4s+1 | 4s+2, 4s+3 of rows g and g + 8 */
                        if constexpr (FP8) {
                            const uint32_t ua = word_of(wr[d][t][0], s), ub = word_of(wr[d][t][1], s);
                            a[0] = e4m3x2_to_bf16x2(ua), a[1] = e4m3x2_to_bf16x2(ub);
                            a[2] = e4m3x2_to_bf16x2(ua >> 16), a[3] = e4m3x2_to_bf16x2(ub >> 16);
                        } else {
                            a[0] = word_of(wr[d][t][0], 2 * s), a[1] = word_of(wr[d][t][1], 2 * s);
                            a[2] = word_of(wr[d][t][0], 2 * s + 1), a[3] = word_of(wr[d][t][1], 2 * s + 1);
                        }
#pragma unroll
                        for (int part = 0; part < 3; part++)
                            mma_bf16_16816(p[t], a, b[part][0], b[part][1]);
                    }
                }
#pragma unroll
                for (int t = 0; t < TILES; t++)
#pragma unroll
                    for (int r = 0; r < 4; r++) {
                        if constexpr (FP8) acc[t][n][r] = fmaf(p[t][r], wsc[d][t], acc[t][n][r]);
                        else acc[t][n][r] += p[t][r];
                    }
            }
            if (j + DEPTH < nw) load_w(wr[d], wsc[d], j + DEPTH);
        }
    }

#pragma unroll
    for (int t = 0; t < TILES; t++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int r = 0; r < 4; r++) red[warp][(t * NT + n) * 4 + r][lane] = acc[t][n][r];
    __syncthreads();
    for (int e = threadIdx.x; e < SUMS * 32; e += DENSE_MMA_SPLIT * 32) {
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

/* The variants, named mma<TILES>x<DEPTH> (launch_variant's order). mma2x4 (twice the weights in flight) stays for
 * tilebench to time on other devices: on the H100 it tied on lm_head and lost elsewhere. */
static const char *const mma_variant_names[] = {"mma2x2", "mma2x4"};
#define DENSE_MMA_VARIANTS ((int)(sizeof mma_variant_names / sizeof mma_variant_names[0]))

/* The launch of one variant for weights of format FMT. */
struct mma_call {
    dense_parts parts;
    int64_t scale_cols, K, Kp;
    const float *x;
    int T;
};
template <int FMT, int TILES, int DEPTH> static void launch_tiles(mma_call c) {
    for (int i = 0; i < c.parts.count; i++) /* each part's blocks of TILES 16-row tiles */
        c.parts.block_begin[i + 1] = c.parts.block_begin[i] + qrt_grid((size_t)((c.parts.n[i] + 15) / 16), TILES);
    const dim3 grid((unsigned)c.parts.block_begin[c.parts.count], qrt_grid((size_t)c.T, DENSE_MMA_TOKENS));
    if (c.T <= 8)
        QRT_LAUNCH(dense_mma<FMT, TILES, DEPTH, 1>, grid, DENSE_MMA_SPLIT * 32, 0, c.parts, c.scale_cols, c.K, c.Kp,
                   c.x, c.T);
    else
        QRT_LAUNCH(dense_mma<FMT, TILES, DEPTH, 2>, grid, DENSE_MMA_SPLIT * 32, 0, c.parts, c.scale_cols, c.K, c.Kp,
                   c.x, c.T);
}
template <int FMT> static void launch_variant(int v, const mma_call &c) {
    if (v == 0) launch_tiles<FMT, 2, 2>(c);
    else launch_tiles<FMT, 2, 4>(c);
}

/* Variant v over n linears of one format and K (parts of a group, or one), outputs y[i] [T][W[i]->n]. */
static void dense_mma_parts(int v, const qrt_linear *const *W, int n, const float *x, int T, float *const *y) {
    mma_call c;
    memset(&c, 0, sizeof c);
    c.parts.count = n;
    for (int i = 0; i < n; i++) {
        c.parts.w[i] = (const uint8_t *)W[i]->data;
        c.parts.scales[i] = W[i]->fmt == QRT_WF_FP8B ? (const float *)W[i]->scales : NULL;
        c.parts.n[i] = W[i]->n;
        c.parts.y[i] = y[i];
    }
    c.scale_cols = (W[0]->k + 127) / 128, c.K = W[0]->k, c.Kp = qrt_dense_row_elems(W[0]->fmt, W[0]->k);
    c.x = x, c.T = T;
    if (W[0]->fmt == QRT_WF_BF16) launch_variant<QRT_WF_BF16>(v, c);
    else launch_variant<QRT_WF_FP8B>(v, c);
}

extern "C" int qrt_dense_mma_variant_count(void) { return DENSE_MMA_VARIANTS; }
extern "C" const char *qrt_dense_mma_variant_name(int v) {
    return v >= 0 && v < DENSE_MMA_VARIANTS ? mma_variant_names[v] : "?";
}

extern "C" void qrt_dense_mma_variant(int v, const qrt_linear *W, const float *x, int T, float *y) {
    QRT_ASSERT((W->fmt == QRT_WF_BF16 || W->fmt == QRT_WF_FP8B) && v >= 0 && v < DENSE_MMA_VARIANTS && T >= 1);
    dense_mma_parts(v, &W, 1, x, T, &y);
}

extern "C" int qrt_dense_mma_pick(int64_t n, int T) {
    static int forced = -2;
    if (forced == -2) {
        forced = -1;
        const char *e = getenv("QRT_DENSE_MMA");
        for (int v = 0; e && v < DENSE_MMA_VARIANTS; v++)
            if (!strcmp(e, mma_variant_names[v])) forced = v;
        if (e && *e && forced < 0)
            fprintf(stderr, "qwenrt: QRT_DENSE_MMA=%s is not a variant of the BF16 / FP8 matmul (mma2x2, ...: "
                            "tilebench lists them); ignored\n", e);
    }
    if (forced >= 0) return forced;
    /* mma2x2: the fastest at every shape and T that tilebench times (H100, docs/benchmarks.md) */
    (void)n, (void)T;
    return 0;
}

void qrt_cuda_matmul_dense_mma(const qrt_linear *W, const float *x, int T, float *y) {
    qrt_dense_mma_variant(qrt_dense_mma_pick(W->n, T), W, x, T, y);
}

bool qrt_cuda_dense_mma_group_fits(const qrt_linear_group *g) {
    const int fmt = g->part[0]->fmt;
    if (fmt != QRT_WF_BF16 && fmt != QRT_WF_FP8B) return false;
    for (int i = 1; i < g->n; i++)
        if (g->part[i]->fmt != fmt) return false;
    return true;
}

void qrt_cuda_matmul_dense_mma_group(const qrt_linear_group *g, const float *x, int T, float *const *y) {
    QRT_ASSERT(qrt_cuda_dense_mma_group_fits(g) && T >= 1);
    int64_t rows = 0;
    for (int i = 0; i < g->n; i++) rows += g->part[i]->n;
    dense_mma_parts(qrt_dense_mma_pick(rows, T), g->part, g->n, x, T, y);
}
