/* NVFP4 matmul, mma_pf (prefill, T > QRT_GRAPH_MAX_T, behind QRT_FP4_PREFILL): a block decodes its 128 weight rows
 * once per 64-element K step into shared memory as f16 and runs the tensor cores on them against 64 tokens of x.
 *
 * Why: mma_gemm (matmul_fp4_gemm.cu) decodes each weight slice in the registers of the warp that uses it, once per 16
 * tokens, and the decode (LOP3 / HMUL2, issue-bound: docs/gemv.md) is then repeated T / 16 times; it does so to keep
 * mma_w1's reduction order bit for bit. Prefill needs no batch invariance (it never runs at decode or verify sizes,
 * like the cuBLASLt path, matmul_blas.cu), so here each weight element is decoded once per 64 tokens, and once into
 * shared memory where every warp of the block reads it.
 *
 * Tile: a block of 4 warps (2 along the rows x 2 along the tokens) covers 128 rows (8 slice-block tiles) x 64 tokens;
 * a warp 64 rows x 32 tokens (4 x 4 mma tiles of m16n8k16, 64 f32 accumulators). Why this size: a warp tile of
 * 64 x 32 reads 128 bytes of shared memory per mma (32 x 32 would read 256, more than the 128 bytes per clock an SM
 * delivers at the mma rate); 128 rows keep x's L2 traffic (4 bytes per token and k with the lo half) at 1/128 of the
 * mma work; 64 tokens keep the grid at 2 blocks per 128 tokens (down_proj at T = 128: 80 blocks) and the shared
 * memory at 64 KB (3 blocks per SM on sm_90, 2 on sm_80, 1 on sm_86/89/120, whose opt-in is 99 KB).
 * K step: 64 elements (two 32-element chunks of one lane column c of a slice block, fp4_to_blocks' layout), in
 * shared memory as: raw[2 stages][8 tiles][32 code uint4 (h, qq, g) + 8 scale uint4 (g)], copied with cp.async;
 * x[hi | lo][2 stages][64 tokens][72 halves]; W[128 rows][72 halves] f16. Rows are padded from 64 to 72 halves
 * (144 bytes): the 8 row addresses of an ldmatrix phase then fall on 8 different 16-byte bank groups. Per step j:
 * wait for stage j, barrier (every warp is done with step j - 1), ask for stage j + 1 into the other buffers, decode
 * raw j into W, barrier, 4 k16 steps of mma. Tiles past the weight's last and tokens past T copy the last tile or
 * token (their rows and columns are never stored), so every cp.async reads memory that exists.
 * Split K: a grid of fewer blocks than SMs (down_proj, 5120 x 17408, is 80 blocks at T = 128) has its K steps split
 * between blocks (at least 16 steps each); each split writes its sums to scratch and fp4_pf_sum adds them in split
 * order, so the result is the same on every run.
 *
 * Numbers. The weights are exact in f16: an E2M1 code as fp4_decode_word gives it (value x 2^-14) times its e4m3
 * block scale is an integer times 2^-24 with at most 6 significant bits and magnitude at most 6 x 448 x 2^-14 (the
 * argument at the top of matmul_fp4.cuh); scale2 and the 2^14 are applied in f32 at the store. x is scaled per token
 * by the power of two that puts its largest magnitude in [2^14, 2^15) (fp4_pow2_scale) and rounded to f16: form 1
 * also keeps lo = f16(x' - hi) and runs a second mma per k16 step on it into the same accumulators (the error per
 * element is then below 2^-22 of the token's largest |x|); form 2 keeps hi alone (relative error 2^-11 per element
 * down to 2^-28 of the largest, 4x below the cuBLASLt path's bf16 x), half the mma work and half of x's traffic.
 * The products are summed in f32 by the tensor cores, k in order within a K step and K steps in order (per split,
 * then the splits in order), hi and lo interleaved per k16 step; the result of a token does not depend on its place
 * (each D column is one token), but it depends on the split, so on T, the weight's shape and the GPU's size through
 * the grid, and it differs from the decode kernels' bits (another order). NaN in x gives NaN for its token; ±Inf
 * gives NaN (form 1: hi - hi) or ±Inf / NaN (form 2). */
#include <string.h>

#include "backend/cuda/matmul_fp4_ring.cuh"

#define PF_WM 2                        /* warps along the rows */
#define PF_WN 2                        /* warps along the tokens */
#define PF_THREADS (32 * PF_WM * PF_WN)
#define PF_ROWS (64 * PF_WM)           /* rows per block: 128 */
#define PF_TILES (PF_ROWS / 16)        /* slice-block tiles per block: 8 */
#define PF_TT (32 * PF_WN)             /* tokens per block: 64 */
#define PF_BK 64                       /* k per step: two chunks of a slice block's lane column */
#define PF_STEPS (FP4_SLICE / PF_BK)   /* steps per slice: 8 */
#define PF_WS (PF_BK + 8)              /* halves per shared row: 144 bytes, see the top */
#define PF_TILE_U4 40                  /* raw uint4 of one tile per step: 32 of codes, 8 of scales */
#define PF_RAW_U4 (PF_TILES * PF_TILE_U4)

/* Dynamic shared memory of a block: raw stages, x stages (hi, and lo in form 1), W. */
static constexpr size_t pf_smem_bytes(bool lo) {
    return 2 * PF_RAW_U4 * sizeof(uint4) + (lo ? 2 : 1) * 2 * PF_TT * PF_WS * sizeof(__half) +
           PF_ROWS * PF_WS * sizeof(__half);
}

/* One block per token: x [T][K] → hi (and lo, LO) f16 [T][Kp] of x scaled by the token's power of two (0 for
 * K ≤ k < Kp), and xdown [T], the factor that undoes the scaling. */
template <bool LO>
__global__ void fp4_pf_prep_x(const float *x /* [T][K] */, int64_t K, int64_t Kp, __half *xh /* [T][Kp] */,
                              __half *xl /* [T][Kp] */, float *xdown /* [T] */) {
    pdl_start();
    __shared__ float red[32];
    const int t = blockIdx.x;
    const float *row = x + (size_t)t * K;
    float m = 0.0f;
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) m = fmaxf(m, fabsf(row[k]));
    m = block_max(m, red);
    float up, down;
    fp4_pow2_scale(m, up, down);
    for (int64_t k8 = (int64_t)threadIdx.x * 8; k8 < Kp; k8 += (int64_t)blockDim.x * 8) {
        __align__(16) __half h[8], l[8];
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const float v = k8 + e < K ? row[k8 + e] * up : 0.0f;
            h[e] = __float2half_rn(v);
            l[e] = __float2half_rn(v - __half2float(h[e]));
        }
        *reinterpret_cast<uint4 *>(xh + (size_t)t * Kp + k8) = *reinterpret_cast<const uint4 *>(h);
        if (LO) *reinterpret_cast<uint4 *>(xl + (size_t)t * Kp + k8) = *reinterpret_cast<const uint4 *>(l);
    }
    if (threadIdx.x == 0) xdown[t] = down;
}

/* Step j's raw codes and scales of the block's tiles into raw [PF_RAW_U4], by the block's NT threads. Step j is slice
 * j / 8, lane column c = j % 8 / 2, chunk steps q = 2·(j % 2) + qq (qq = 0, 1): elements j·64 .. j·64 + 63. */
template <int NT>
__device__ __forceinline__ void pf_stage_raw(const uint8_t *blocks, int64_t tile0, int64_t tiles, int64_t S, int64_t j,
                                             uint4 *raw) {
    const int64_t s = j / PF_STEPS;
    const int c = (int)(j % PF_STEPS) / 2, qp = (int)(j % 2);
    for (int i = threadIdx.x; i < PF_RAW_U4; i += NT) {
        const int tt = i / PF_TILE_U4, r = i % PF_TILE_U4;
        const int64_t tile = QRT_MIN(tile0 + tt, tiles - 1);
        const uint4 *blk = reinterpret_cast<const uint4 *>(blocks + ((size_t)tile * S + s) * FP4_BLOCK_BYTES);
        /* r < 32: the codes of row half h = r / 16, chunk step 2 qp + r / 8 % 2, row g = r % 8 (fp4_load_slice's
         * order); then the scale uint4 of row g = r - 32 (its 8 scales low, row g + 8's high) */
        const int src = r < 32 ? ((r / 16) * 4 + 2 * qp + r / 8 % 2) * 32 + 4 * (r % 8) + c : 256 + 4 * (r - 32) + c;
        cp_async16(raw + i, blk + src);
    }
}

/* Step j's x columns of the TT tokens from t0 (x as [T][Kp] halves; tokens past T copy the last) into xs [TT][PF_WS],
 * by the block's NT threads. */
template <int TT, int NT>
__device__ __forceinline__ void pf_stage_x(const __half *x, int t0, int T, int64_t Kp, int64_t j, __half *xs) {
    for (int i = threadIdx.x; i < TT * PF_BK / 8; i += NT) {
        const int t = i / (PF_BK / 8), u = i % (PF_BK / 8);
        const size_t at = (size_t)QRT_MIN(t0 + t, T - 1) * Kp + j * PF_BK + u * 8;
        cp_async16(reinterpret_cast<uint4 *>(xs + t * PF_WS + u * 8), reinterpret_cast<const uint4 *>(x + at));
    }
}

/* Step j's raw codes and scales and its x columns (hi, and lo in form 1) into stage b, one commit group. */
template <bool LO>
__device__ __forceinline__ void pf_stage(const uint8_t *blocks, int64_t tile0, int64_t tiles, int64_t S,
                                         const __half *xh, const __half *xl, int t0, int T, int64_t j, int b,
                                         uint4 *raw, __half *xs) {
    pf_stage_raw<PF_THREADS>(blocks, tile0, tiles, S, j, raw + b * PF_RAW_U4);
    const int64_t Kp = S * FP4_SLICE;
    pf_stage_x<PF_TT, PF_THREADS>(xh, t0, T, Kp, j, xs + b * PF_TT * PF_WS);
    if (LO) pf_stage_x<PF_TT, PF_THREADS>(xl, t0, T, Kp, j, xs + (2 + b) * PF_TT * PF_WS);
    cp_async_commit();
}

/* Stage b's raw codes → W f16 [PF_ROWS][PF_WS], value x 2^-14 times the block scale, in k order: one 32-element
 * chunk per item (tile tt, row half h, chunk qq, row g), 2 per thread. Consecutive lanes take consecutive rows g, so
 * each 8-lane phase of a 16-byte store covers all 32 banks (rows 144 bytes apart). */
template <int NT>
__device__ __forceinline__ void pf_decode(const uint4 *raw, int qp, __half *ws) {
    for (int i = threadIdx.x; i < PF_TILES * 32; i += NT) {
        const int tt = i / 32, h = i / 16 % 2, qq = i / 8 % 2, g = i % 8;
        const uint4 *rt = raw + tt * PF_TILE_U4;
        const uint4 code = rt[i % 32], sc = rt[32 + g];
        /* the chunk's two block scales (elements 0..15, 16..31), each in both halves */
        const uint32_t two = e4m3x2_lo_to_h2(u4_word(sc, 2 * h + qp) >> (16 * qq));
        const uint32_t s0 = __byte_perm(two, 0, 0x1010), s1 = __byte_perm(two, 0, 0x3232);
        uint4 *dst = reinterpret_cast<uint4 *>(ws + (tt * 16 + 8 * h + g) * PF_WS + qq * 32);
#pragma unroll
        for (int w = 0; w < 4; w++) { /* word w: elements 8w..8w+7; o = (e0,e2) (e1,e3) (e4,e6) (e5,e7) */
            uint32_t o[4];
            fp4_decode_word(u4_word(code, w), o);
            const uint32_t sw = w < 2 ? s0 : s1;
            dst[w] = make_uint4(hmul2_u(__byte_perm(o[0], o[1], 0x5410), sw),  /* (e0, e1) */
                                hmul2_u(__byte_perm(o[0], o[1], 0x7632), sw),  /* (e2, e3) */
                                hmul2_u(__byte_perm(o[2], o[3], 0x5410), sw),  /* (e4, e5) */
                                hmul2_u(__byte_perm(o[2], o[3], 0x7632), sw)); /* (e6, e7) */
        }
    }
}

/* The warp's 4 n8 B tiles (tokens wn·32 .. +31) of k16 step kk from x stage xb [PF_TT][PF_WS]: ldmatrix matrix m of
 * a pair np holds tokens np·16 + (m >> 1)·8 .., k kk·16 + (m & 1)·8 .. */
__device__ __forceinline__ void pf_load_b(const __half *xb, int wn, int kk, int lane, uint32_t (&bf)[4][2]) {
#pragma unroll
    for (int np = 0; np < 2; np++) {
        uint32_t r[4];
        const int tok = wn * 32 + np * 16 + ((lane >> 4) << 3) + (lane & 7);
        ldsm_x4(r, xb + tok * PF_WS + kk * 16 + ((lane >> 3) & 1) * 8);
        bf[2 * np][0] = r[0], bf[2 * np][1] = r[1], bf[2 * np + 1][0] = r[2], bf[2 * np + 1][1] = r[3];
    }
}

/* A warp's sums d (4 m16 tiles from tile0 x 4 n8 tiles of the 32 tokens from tok0), x's scaling undone, stored as y
 * (one split) or into split p's part of the scratch [splits][T][tiles·16]. D fragment: d[.][.][2r + e] is row g + 8r
 * of the m16 tile, token 2c + e of the n8 tile; fp4_store with one token tile of one column (t0 = tok - c) stores
 * exactly that token's rows g and g + 8. */
template <bool PAIR>
__device__ __forceinline__ void pf_store(const float (&d)[4][4][4], const fp4_segments &seg, int64_t tile0,
                                         int64_t tiles, int tok0, int T, const float *xdown, int splits, int p,
                                         float *part) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int mi = 0; mi < 4; mi++) {
        const int64_t tile = tile0 + mi;
        if (tile >= tiles) continue;
        const fp4_tile_out o = splits == 1 ? fp4_tile_target(seg, tile) : fp4_tile_out{};
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int tok = tok0 + ni * 8 + 2 * c + e;
                if (tok >= T) continue;
                const float down = xdown[tok];
                const float v[1][2] = {{d[mi][ni][e] * down, d[mi][ni][2 + e] * down}};
                if (splits == 1) {
                    fp4_store<1, PAIR>(o, T, tok - c, lane, v);
                } else {
                    float *at = part + ((size_t)p * T + tok) * (size_t)(tiles * 16) + tile * 16 + g;
                    at[0] = v[0][0], at[8] = v[0][1];
                }
            }
    }
}

/* One k16 step kk of a warp's 64 rows (wm) x 32 tokens (wn): A from W ws [PF_ROWS][PF_WS], B from x xb [.][PF_WS] */
__device__ __forceinline__ void pf_mma_step(float (&d)[4][4][4], const __half *ws, const __half *xb, int wm, int wn,
                                            int kk) {
    const int lane = threadIdx.x & 31;
    uint32_t a[4][4], bf[4][2];
#pragma unroll
    for (int mi = 0; mi < 4; mi++) /* lane l: row l % 16, k + (l / 16)·8 of the m16 tile */
        ldsm_x4(a[mi], ws + (wm * 64 + mi * 16 + (lane & 15)) * PF_WS + kk * 16 + (lane >> 4) * 8);
    pf_load_b(xb, wn, kk, lane, bf);
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) mma_f16_16816(d[mi][ni], a[mi], bf[ni][0], bf[ni][1]);
}

/* Split K: the block of split p of `splits` runs steps [steps·p / splits, steps·(p + 1) / splits) and writes its sums
 * (x's scaling undone) to part [splits][T][tiles·16] by tile row; fp4_pf_sum adds the splits in order and stores y, so
 * a result does not depend on which block finished first. One split: the block stores y itself. */
template <bool LO, bool PAIR>
__global__ void __launch_bounds__(PF_THREADS, 3)
    fp4_mma_pf(const uint8_t *blocks /* [tiles][S][FP4_BLOCK_BYTES] */, const __grid_constant__ fp4_segments seg,
               const __half *xh /* [T][Kp] */, const __half *xl /* [T][Kp] */, const float *xdown /* [T] */,
               int64_t S, int T, int splits, float *part /* [splits][T][tiles·16] */) {
    pdl_start();
    extern __shared__ uint4 pf_smem[];
    uint4 *raw = pf_smem;                                            /* [2][PF_RAW_U4] */
    __half *xs = reinterpret_cast<__half *>(raw + 2 * PF_RAW_U4);    /* [hi, lo][2][PF_TT][PF_WS] */
    __half *ws = xs + (LO ? 2 : 1) * 2 * PF_TT * PF_WS;             /* [PF_ROWS][PF_WS] */
    const int warp = threadIdx.x >> 5, wm = warp / PF_WN, wn = warp % PF_WN;
    const int TB = (T + PF_TT - 1) / PF_TT;
    /* tokens fastest, then splits: the token blocks of a (row block, split) share its weights in the L2 */
    const int t0 = (int)(blockIdx.x % TB) * PF_TT, p = (int)(blockIdx.x / TB % splits);
    const int64_t tile0 = (int64_t)(blockIdx.x / TB / splits) * PF_TILES, tiles = seg.tile_begin[seg.count];
    const int64_t steps = S * PF_STEPS, j0 = steps * p / splits, j1 = steps * (p + 1) / splits;
    float d[4][4][4]; /* [m16 tile][n8 tile][fragment] */
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) d[mi][ni][e] = 0.0f;
    pf_stage<LO>(blocks, tile0, tiles, S, xh, xl, t0, T, j0, 0, raw, xs);
    for (int64_t j = j0; j < j1; j++) {
        const int b = (int)((j - j0) & 1);
        cp_async_wait<0>();
        __syncthreads(); /* stage j is in buffers b for every warp, and every warp is done with step j - 1 */
        if (j + 1 < j1) pf_stage<LO>(blocks, tile0, tiles, S, xh, xl, t0, T, j + 1, b ^ 1, raw, xs);
        pf_decode<PF_THREADS>(raw + b * PF_RAW_U4, (int)(j & 1), ws);
        __syncthreads(); /* W holds step j */
        const __half *xb = xs + b * PF_TT * PF_WS;
#pragma unroll
        for (int kk = 0; kk < PF_BK / 16; kk++) {
            pf_mma_step(d, ws, xb, wm, wn, kk);
            if (LO) pf_mma_step(d, ws, xb + 2 * PF_TT * PF_WS, wm, wn, kk); /* A's fragments loaded again */
        }
    }
    pf_store<PAIR>(d, seg, tile0 + wm * 4, tiles, t0 + wn * 32, T, xdown, splits, p, part);
}

/* Form 3, fp4_mma_pf3: form 2's arithmetic (x as f16 alone, the same products summed in the same order, so its bits
 * wherever the two split K alike) in a block of 8 warps over 128 rows x 128 tokens (2 x 4 warps of 64 x 32), with
 * the steps pipelined: the raw codes of step j + 3 and the x columns of step j + 2 are asked for while step j + 1 is
 * decoded into the second W buffer and step j runs on the tensor cores, one barrier per step.
 * Why: form 2 waits at every step for copies asked for one step before (a round trip to the L2 per 64 of K), then
 * decodes with every warp while no mma runs, and decodes each weight for 64 tokens; here the copies are two steps
 * ahead, decode and mma of neighbouring steps overlap across warps, and a decode serves 128 tokens. 112 KB of shared
 * memory: raw [4 stages][PF_RAW_U4], x [3 stages][128][PF_WS], W [2][128][PF_WS]: two blocks per SM on sm_90 (sm_80:
 * one; sm_86/89/120 cannot hold it and run form 2). */
#define PF3_WN 4
#define PF3_THREADS (32 * PF_WM * PF3_WN)
#define PF3_TT (32 * PF3_WN) /* tokens per block: 128 */
#define PF3_RAW_STAGES 4
#define PF3_X_STAGES 3

static constexpr size_t pf3_smem_bytes(void) {
    return PF3_RAW_STAGES * PF_RAW_U4 * sizeof(uint4) + (PF3_X_STAGES * PF3_TT + 2 * PF_ROWS) * PF_WS * sizeof(__half);
}

template <bool PAIR>
__global__ void __launch_bounds__(PF3_THREADS, 2)
    fp4_mma_pf3(const uint8_t *blocks /* [tiles][S][FP4_BLOCK_BYTES] */, const __grid_constant__ fp4_segments seg,
                const __half *xh /* [T][Kp] */, const float *xdown /* [T] */, int64_t S, int T, int splits,
                float *part /* [splits][T][tiles·16] */) {
    pdl_start();
    extern __shared__ uint4 pf_smem[];
    uint4 *raw = pf_smem;                                                      /* [4][PF_RAW_U4] */
    __half *xs = reinterpret_cast<__half *>(raw + PF3_RAW_STAGES * PF_RAW_U4); /* [3][PF3_TT][PF_WS] */
    __half *ws = xs + PF3_X_STAGES * PF3_TT * PF_WS;                           /* [2][PF_ROWS][PF_WS] */
    const int warp = threadIdx.x >> 5, wm = warp / PF3_WN, wn = warp % PF3_WN;
    const int TB = (T + PF3_TT - 1) / PF3_TT;
    const int t0 = (int)(blockIdx.x % TB) * PF3_TT, p = (int)(blockIdx.x / TB % splits);
    const int64_t tile0 = (int64_t)(blockIdx.x / TB / splits) * PF_TILES, tiles = seg.tile_begin[seg.count];
    const int64_t steps = S * PF_STEPS, j0 = steps * p / splits, j1 = steps * (p + 1) / splits, Kp = S * FP4_SLICE;
    auto raw_of = [&](int64_t j) { return raw + (int)((j - j0) % PF3_RAW_STAGES) * PF_RAW_U4; };
    auto x_of = [&](int64_t j) { return xs + (int)((j - j0) % PF3_X_STAGES) * PF3_TT * PF_WS; };
    auto w_of = [&](int64_t j) { return ws + (int)((j - j0) & 1) * PF_ROWS * PF_WS; };
    auto raw_in = [&](int64_t j) {
        if (j < j1) pf_stage_raw<PF3_THREADS>(blocks, tile0, tiles, S, j, raw_of(j));
    };
    auto x_in = [&](int64_t j) {
        if (j < j1) pf_stage_x<PF3_TT, PF3_THREADS>(xh, t0, T, Kp, j, x_of(j));
    };
    float d[4][4][4]; /* [m16 tile][n8 tile][fragment] */
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) d[mi][ni][e] = 0.0f;
    /* commit groups: the two before the loop hold raw j0..j0+2 and x j0, j0+1; iteration j's holds raw j + 3 and
     * x j + 2. Iteration j needs raw j + 1 and x j, both in the group two before its own: wait_group 1. */
    raw_in(j0), raw_in(j0 + 1), x_in(j0);
    cp_async_commit();
    raw_in(j0 + 2), x_in(j0 + 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    pf_decode<PF3_THREADS>(raw_of(j0), (int)(j0 & 1), w_of(j0));
    for (int64_t j = j0; j < j1; j++) {
        cp_async_wait<1>();
        __syncthreads(); /* raw j + 1 and x j landed for every thread; W holds step j; every warp is done with step
                          * j - 1, whose raw, x and W buffers are refilled below */
        raw_in(j + 3), x_in(j + 2);
        cp_async_commit();
        if (j + 1 < j1) pf_decode<PF3_THREADS>(raw_of(j + 1), (int)((j + 1) & 1), w_of(j + 1));
        const __half *xb = x_of(j), *wb = w_of(j);
#pragma unroll
        for (int kk = 0; kk < PF_BK / 16; kk++) pf_mma_step(d, wb, xb, wm, wn, kk);
    }
    cp_async_wait<0>(); /* only empty groups are left; none outlives the block */
    pf_store<PAIR>(d, seg, tile0 + wm * 4, tiles, t0 + wn * 32, T, xdown, splits, p, part);
}

/* The splits' sums of mma_pf in split order, then y as an unsplit block stores it: one thread per (token, tile, g). */
template <bool PAIR>
__global__ void fp4_pf_sum(const __grid_constant__ fp4_segments seg, const float *part /* [splits][T][tiles·16] */,
                           int splits, int T) {
    pdl_start();
    const int64_t tiles = seg.tile_begin[seg.count], n = (int64_t)T * tiles * 8;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int g = (int)(i % 8), tok = (int)(i / 8 / tiles);
        const int64_t tile = i / 8 % tiles;
        float v[1][2] = {{0.0f, 0.0f}};
        for (int p = 0; p < splits; p++) {
            const float *at = part + ((size_t)p * T + tok) * (size_t)(tiles * 16) + tile * 16 + g;
            v[0][0] += at[0], v[0][1] += at[8];
        }
        fp4_store<1, PAIR>(fp4_tile_target(seg, tile), T, tok, 4 * g, v);
    }
}

/* x's f16 forms and scales and the splits' sums, grown on demand (qrt_cuda_grow; the prefill kernel never runs
 * inside a recorded graph, but tilebench records it after its warmups have grown the buffer). */
static void *pf_buf = NULL;
static size_t pf_cap = 0; /* bytes */

#define PF_MIN_SPLIT_STEPS 16 /* a split runs at least this many steps (1024 of K): its prologue and sums stay small */

/* x's preparation, mma_pf in form 1, 2 or 3, and the splits' sums; false, launching nothing, where the device cannot
 * give the form's block its shared memory (form 3 on sm_86/89/120). K is split only where the grid would leave SMs
 * idle, into as many splits as fill the GPU once (down_proj at T = 128, form 2: 80 blocks on 132 SMs where 3 per SM
 * fit: 5 splits); a grid of at least one block per SM is left whole (splitting it adds waves, not SMs). */
template <int FORM, bool PAIR>
static bool pf_run(const uint8_t *blocks, const fp4_segments &seg, int64_t K, const float *x, int T) {
    constexpr bool LO = FORM == 1;
    constexpr int TT = FORM == 3 ? PF3_TT : PF_TT, NT = FORM == 3 ? PF3_THREADS : PF_THREADS;
    static fp4_occupancy occ = {0, 0, 0};
    const size_t smem = FORM == 3 ? pf3_smem_bytes() : pf_smem_bytes(LO);
    const int64_t resident = FORM == 3 ? fp4_resident(fp4_mma_pf3<PAIR>, NT, smem, 1, occ, (int64_t)1 << 40)
                                       : fp4_resident(fp4_mma_pf<LO, PAIR>, NT, smem, 1, occ, (int64_t)1 << 40);
    if (resident <= 0) return false;
    const int64_t S = qrt_nvfp4_row_elems(K) / FP4_SLICE, Kp = S * FP4_SLICE, tiles = seg.tile_begin[seg.count];
    const int64_t grid1 = (tiles + PF_TILES - 1) / PF_TILES * ((T + TT - 1) / TT);
    const int64_t most = grid1 < sm_count() ? (resident + grid1 - 1) / grid1 : 1; /* split only to fill idle SMs */
    const int splits = (int)QRT_MAX(1, QRT_MIN(most, S * PF_STEPS / PF_MIN_SPLIT_STEPS));
    const size_t half_bytes = (size_t)T * Kp * sizeof(__half);
    const size_t scale_bytes = ((size_t)T * sizeof(float) + 15) & ~(size_t)15;
    const size_t part_bytes = splits > 1 ? (size_t)splits * T * tiles * 16 * sizeof(float) : 0;
    uint8_t *buf = static_cast<uint8_t *>(qrt_cuda_grow(&pf_buf, &pf_cap, 2 * half_bytes + scale_bytes + part_bytes));
    __half *xh = reinterpret_cast<__half *>(buf), *xl = reinterpret_cast<__half *>(buf + half_bytes);
    float *xdown = reinterpret_cast<float *>(buf + 2 * half_bytes);
    float *part = reinterpret_cast<float *>(buf + 2 * half_bytes + scale_bytes);
    QRT_LAUNCH(fp4_pf_prep_x<LO>, (unsigned)T, 256, 0, x, K, Kp, xh, xl, xdown);
    if (FORM == 3)
        QRT_LAUNCH(fp4_mma_pf3<PAIR>, (unsigned)(grid1 * splits), NT, smem, blocks, seg, (const __half *)xh,
                   (const float *)xdown, S, T, splits, part);
    else
        QRT_LAUNCH((fp4_mma_pf<LO, PAIR>), (unsigned)(grid1 * splits), NT, smem, blocks, seg, (const __half *)xh,
                   (const __half *)xl, (const float *)xdown, S, T, splits, part);
    if (splits > 1)
        QRT_LAUNCH(fp4_pf_sum<PAIR>, (unsigned)QRT_MIN(qrt_grid((size_t)T * tiles * 8, 256), 65536u), 256, 0, seg,
                   (const float *)part, splits, T);
    return true;
}

template <bool PAIR>
static void pf_run_form(const uint8_t *blocks, const fp4_segments &seg, int64_t K, const float *x, int T, int form) {
    if (form == 3 && pf_run<3, PAIR>(blocks, seg, K, x, T)) return;
    const bool ran = form == 1 ? pf_run<1, PAIR>(blocks, seg, K, x, T) : pf_run<2, PAIR>(blocks, seg, K, x, T);
    QRT_ASSERT(ran); /* 64 KB: every GPU this builds for has it */
}

void fp4_run_prefill(const uint8_t *blocks, const fp4_segments &seg, int64_t K, const float *x, int T, int form) {
    QRT_ASSERT(form >= 1 && form <= 3 && T >= 1);
    if (seg.pair != FP4_PARTS) pf_run_form<true>(blocks, seg, K, x, T, form);
    else pf_run_form<false>(blocks, seg, K, x, T, form);
}

extern "C" int qrt_cuda_fp4_prefill_form(void) {
    static int form = -1;
    if (form < 0) {
        const char *e = getenv("QRT_FP4_PREFILL");
        form = 0;
        if (e && *e && strcmp(e, "0")) {
            if (!strcmp(e, "1") || !strcmp(e, "2") || !strcmp(e, "3")) form = e[0] - '0';
            else
                fprintf(stderr, "qwenrt: QRT_FP4_PREFILL=%s is not 0, 1 (x as f16 hi + lo), 2 (x as f16) or 3 (form 2 "
                                "in 128-token blocks, pipelined): the NVFP4 prefill kernel stays off\n", e);
        }
    }
    return form;
}
