/* Matmul y [T][N] = x [T][K] · Wᵀ for every weight format, and the NVFP4 autotuner.
 *
 * Variants (dense = BF16/F16/F32 and FP8 block-128, picked by T; NVFP4 = W4A16, picked by measurement). FP8 runs
 * the dense kernels: each chunk of 16 e4m3 is widened and multiplied by its block scale, as the CPU backend does.
 *   dense 0  dense_gemv<fmt, TT>   T ≤ 16: one warp per row, TT tokens share each 16-byte weight load;
 *                                  x first copied into lane order (permute_x_lanes) for coalesced loads
 *   dense 1  dense_tiled<fmt>      T > 16: 8 warps × 4 rows per block, 16-token x tile in shared memory
 *   NVFP4 (all on the tensor cores, one reduction order, autotuned; x split into f16 hi + lo by fp4_prep_x, made
 *   per call inside the timed call; see "the mma family" below)
 *   nvfp4 0  mma_w1         one warp per 16-row tile, 4 tiles per block, each slice loaded into registers
 *   nvfp4 1  mma_k4         a block of 4 warps per tile, splitting its slices (long K: down_proj)
 *   nvfp4 2  mma_k4_sx      as 1, on one token preparing x in the block (as mma_w1 does) instead of fp4_prep_x:
 *                           wins on short K with few tiles (GDN out, attention o, MTP fc)
 *   nvfp4 3  mma_st12x2     "streamed": a GPU-filling grid, each warp an equal run of (tile, slice) units streamed
 *   nvfp4 4  mma_st16x2     through its own 2-slot cp.async ring (12 or 16 warps per block); split tiles summed by
 *                           the warp that completes them. Wins on long N (lm_head, gate+up) and down_proj at T = 1
 *   nvfp4 5  mma_gemm       T >= 16 (prefill): 8 tile warps per block share each slice's x fragments of 16 tokens
 *                           in shared memory (below 16 tokens it runs mma_w1)
 *   nvfp4 6  mma_il12x2     "interleaved": each block owns an equal run of whole tiles, its 12 warps take the
 *                           block's units slice after slice through mma_st's rings, sums after a block barrier (no
 *                           atomics). Wins at T = 1 on the short shapes (attention q|k|v, GDN / attention out)
 *   nvfp4 7  mma_cl12x2     "clustered" (T = 1, sm_90): mma_st's runs and rings inside clusters of 2 blocks, each
 *   nvfp4 8  mma_cl8x3      cluster owning whole tiles, split tiles summed through distributed shared memory after one
 *                           cluster barrier (12 warps x 2 slots or 8 x 3). Win at T = 1 on gate+up, lm_head and
 *                           the GDN / attention inputs (H200: gate+up 34.6 -> 30.8 us, down 21.7 -> 20.5, lm_head
 *                           178 -> 175)
 *   nvfp4 9  mma_ck8x3      "clustered, K split" (T = 1, sm_90): mma_cl with each block of a cluster of 2 taking half
 *   nvfp4 10 mma_ck8x2e     of every tile's slices (so half of x to prepare), every p summed in the second block;
 *   nvfp4 11 mma_ck12x2     8 warps x 3 slots, 8 x 2 refilled as soon as a slot is read (e: early), 12 x 2 with
 *                           slots 1.. copied once x is prepared. Win on the long-K and short-K shapes (H200: down
 *                           20.2 -> 17.0-17.3 us with 8x2e, then 15.8 with 12x2; GDN / attention out 9.9 -> 7.9, MTP
 *                           fc 13.2 -> 10.4)
 *   nvfp4 12 mma_ck8x2eh    mma_ck, "hold": slots 1.. asked for behind every warp's x loads, unit 0 held in registers
 *   nvfp4 13 mma_ck12x2eh   so slot 0 refills before x is converted, p summed through st.async and an mbarrier
 *   nvfp4 14 mma_ck12x2eht  (8 or 12 warps x 2 slots, early refill); eht also cuts each block's last unit over its
 *                           last 4 warps by chunk step. H200: down 15.6 -> 15.1 (eh) -> 14.8-14.9 us (eht), gdn_in
 *                           14.2 -> 13.7, GDN / attention out 7.4 -> 7.1 (session 19)
 *   Tried and dropped on the H200 (docs/benchmarks.md, 2026-12-01): a persistent grid streaming slice blocks through
 *   a shared-memory ring with bulk copies (TMA, mbarriers) was slower everywhere (the consumers, not the memory, were
 *   the limit); a register prefetch of the next slice, a single mma chain per slice and forced lower register counts
 *   lost occupancy or spilled; programmatic dependent launch on the legacy stream gave nothing measurable. Session 3:
 *   a prefill variant with one warp per chunk step q (each warp decoding a quarter of a slice for 32 tokens) was no
 *   faster than mma_w1 at M = 16..256: the x fragments, re-read from L2 by every tile, are the limit there. Session 4:
 *   one whole tile per warp through a 4-slot ring (no split tiles) won nowhere; silu(gate)·up made in the x
 *   preparation cost more than the swiglu launch it saved (one token: every block makes it again). Session 16: mma_ck
 *   in half an SM per block (the next launch's blocks resident beside, their rings copied before their wait) was
 *   slower on down (16.3 -> 16.9-18.1 us; clusters of 4: 41 us) and gate+up, won only gdn_out / attn_o (8.3 -> 8.0),
 *   and decode with those picks lost 3% (190.2 -> 184.3 tok/s); x asked into the L2 before the wait changed nothing
 *   (its slow round trip is not a DRAM miss). Session 17: the whole MLP in one launch (gate|up with swiglu, then down,
 *   in one grid of resident clusters; h awaited on a grid-wide counter, down's first slots copied during gate|up's
 *   tail) lost to the two launches, 43.0-46.7 us against 41.2-41.6 (docs/results/mlp-fused-session17.patch); mma_ck
 *   rings started from the L2 (the first units asked into the L2 before the wait in place of slot 0's copy, or beside
 *   it) were slower or equal on every shape (docs/results/ck-start-session17.patch); grids cut into equal tiles per
 *   cluster (64 x 5 on down) gained nothing; a block's units handed out at run time as warps refill (one shared
 *   counter) made down 15.8 -> 19.9 us (docs/results/ck-dyn-session17.patch). Session 18: mma_ck's ring copies as
 *   cp.async.bulk (one per 4608-byte unit, an mbarrier per slot) lost everywhere (down 15.8 -> 17.4 us with ck12x2's
 *   schedule), and so did only the first copy of slots 1.. as a bulk copy (down 17.5); slot 1 copied before the launch
 *   wait too lost on down (16.1-16.7) and tied on gate+up (docs/results/ck-*-session18.patch).
 *
 * Batch invariance. Every kernel of a format reduces a row in one fixed order, so a row's result does not depend
 * on T, on the token's place in the batch, or on the variant (the tests check this bit for bit); the autotuner's
 * choice never changes a result:
 * - dense: the row is cut into 16-byte chunks (8 BF16/F16, 4 F32 or 16 FP8 elements); chunk c belongs to lane
 *   c % 32, which sums its chunks in increasing c, each chunk's elements in order with fmaf; the 32 lane
 *   sums are added by the xor butterfly of warp_sum.
 * - NVFP4: see "the mma family" below.
 * The CPU backend uses another (also fixed) order, so CPU and GPU agree to rounding, not bit for bit.
 *
 * Device layouts (prepare_linear): dense and FP8 rows padded with zeros to 16 bytes. NVFP4 weights are rearranged into
 * slice blocks (qrt_cuda_nvfp4_to_blocks): for each 16-row tile and each 512-element slice of K, 4608 contiguous
 * bytes holding the tile's codes (each 32-bit word's 8 codes moved to where the decode masks them out: fp4_pack_word)
 * and e4m3 scales of that slice in the order the warp's lanes read them, so each
 * load instruction of a warp reads 512 contiguous bytes. (Read row-major, a lane's 16-byte chunks sat 64 bytes
 * apart: every 32-byte sector was fetched twice, half used each time.) Tiles are padded with zero rows, slices
 * with zero columns; x beyond K reads as 0.
 * Groups (prepare_group, end of file): the NVFP4 parts of a group in one allocation, one mma launch for all. */
#include <algorithm>
#include <string.h>
#include <sys/stat.h>

#include "backend/cuda/cuda_internal.cuh"

extern "C" {
#include "util/common.h"
}

/* ---- activations in lane order --------------------------------------------------------------------
 * A GEMV lane reads the x elements of its own weight chunk: with x row-major, the 32 lanes of a warp read
 * 32 addresses one chunk apart, 32 cache lines per load instruction (measured: NVFP4 at 12% of the read
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

/* ---- NVFP4 on the tensor cores: the mma family ---------------------------------------------------------
 * Why: a scalar kernel spends one f32 FMA per (element, token) on top of the E2M1 decode, so M=7 cost ~5.6x M=1
 * (and M=1 already issued ~4 instructions per element; the scalar family was removed once this one beat it). Here
 * the decoded weights are the A operand of mma.sync m16n8k16 (f16 in, f32 out): one warp computes a 16-row tile
 * against 8 tokens at once, so the FMA cost no longer grows with M (up to 8 per n8 tile, 16 per pass).
 *
 * Exactness. x is not rounded to f16: each 512-element slice of a token is scaled by a power of two (its max
 * magnitude lands in [2^14, 2^15)) and split into hi = f16(x') and lo = f16(x' − hi), ~22 significant bits;
 * each k-step runs the mma twice (hi, then lo). The weight operand is exact in f16: an E2M1 code's sign and
 * magnitude bits masked into f16 bit positions read as the value × 2^-14 (fp4_decode_word; the layout stores each
 * 32-bit word's codes where those masks find them), multiplied by its e4m3 block scale with __hmul2, which is exact
 * (an integer times 2^-24 with ≤ 6 significant bits, at most 6 · 448 · 2^-14). The 2^-14 is undone once at the end
 * (y = acc · 2^14 · scale2). NaN in x propagates; a slice holding ±Inf gives NaN (hi − hi in the lo split) where an
 * f32 dot product could give ±Inf.
 *
 * Order (shared by every variant, so a row's result is the same bits for any T and either of them):
 * - a row is cut into slices of 512 elements (16 chunks of 32); in slice s, lane c (0..3) of a quad owns chunks
 *   4c..4c+3; "chunk step" q (0..3) covers chunk 4c+q of each of the 4 lanes; its 8 k-steps i take elements
 *   4i..4i+3 of those chunks (in the mma's k slots 2c, 2c+1, 2c+8, 2c+9 as e0 e2 | e1 e3);
 * - x_hi and x_lo of a token are two B columns of the same mma (an n8 tile holds 4 tokens: column 2j = token j's hi,
 *   2j + 1 its lo), so one mma per k-step serves both (on one token that halved the mma count: lm_head 73% → 81% of
 *   the read bandwidth). Per chunk step q and token: hi_q = Σ_i mma(A_i, x_hi), lo_q = Σ_i mma(A_i, x_lo), from 0
 *   (the four chains interleaved k-step by k-step, which hides the mma latency and does not change any chain);
 *   e_q = hi_q + lo_q; p_s = ((e_0 + e_1) + (e_2 + e_3)) · 2^e(t,s); y = ((p_0 + p_1) + p_2 + ...) · 2^14 · scale2,
 *   slices in order. A split-K variant sums the same p_s in the same order (after a barrier, or in the warp that
 *   completes a split tile), so splitting never changes a bit.
 * A tensor-core dot product of one (row, B column) uses only that row and that column, so n8-tile position, M and
 * the variant do not change it (checked bit for bit by test_cuda_ops).
 *
 * x fragments, made per call by fp4_prep_x (layout at fp4_prep_x): per (token, slice, q, i, c) the pairs
 * hi(x e0, x e2), hi(x e1, x e3), lo(...), lo(...) of elements s·512 + (4c+q)·32 + 4i + 0..3; xscale [T][S] = 2^e,
 * the factor that undoes the slice's scaling. Elements past K are 0. */

#define FP4_SLICE 512 /* elements of a row per slice: 16 chunks of 32, 4 per lane of a quad */
#define FP4_CODE_BYTES (16 * FP4_SLICE / 2)           /* codes of one (16-row tile, slice): 4096 */
#define FP4_BLOCK_BYTES (FP4_CODE_BYTES + 16 * FP4_SLICE / 16) /* + its e4m3 scales: the slice block, 4608 */

/* One warp's share of the x preparation, token row xrow [K], slice s, in two steps so that a warp can put the loads
 * of several slices in flight before it waits on the first (one L2 round trip instead of one per slice).
 * Load: lane (i = lane / 4, c = lane % 4) reads v[q][e] = x[s·512 + (4c+q)·32 + 4i + e], 0 past K. Volatile, so the
 * compiler keeps these loads ahead of the weight copies a kernel issues next (asm volatile too). */
__device__ __forceinline__ float4 ld_x16(const float *p) {
    float4 r;
    asm volatile("ld.global.nc.v4.f32 {%0,%1,%2,%3}, [%4];\n" : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w) : "l"(p));
    return r;
}
__device__ __forceinline__ void fp4_prep_load(const float *xrow /* [K] */, int64_t K, int64_t s, int lane,
                                              float (&v)[4][4]) {
    const int c = lane & 3, i = lane >> 2;
    const bool vec = ((uintptr_t)xrow & 15) == 0; /* K % 16 == 0: a group of 4 is in bounds or all past K */
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const int64_t k0 = s * FP4_SLICE + (4 * c + q) * 32 + 4 * i;
        if (vec) {
            const float4 f = k0 < K ? ld_x16(xrow + k0) : make_float4(0, 0, 0, 0);
            v[q][0] = f.x, v[q][1] = f.y, v[q][2] = f.z, v[q][3] = f.w;
        } else {
#pragma unroll
            for (int e = 0; e < 4; e++) v[q][e] = k0 + e < K ? xrow[k0 + e] : 0.0f;
        }
    }
}
/* Convert: the fragment entry (q, i, c) for q = 0..3, u[q]; down = 2^e, the factor that undoes the slice's scaling.
 * Every lane of the warp must call it (a warp max). */
__device__ __forceinline__ void fp4_prep_convert(const float (&v)[4][4], uint4 (&u)[4], float &down) {
    float m = 0.0f;
#pragma unroll
    for (int q = 0; q < 4; q++)
#pragma unroll
        for (int e = 0; e < 4; e++) m = fmaxf(m, fabsf(v[q][e]));
    m = warp_max(m);
    /* scale so the slice's largest magnitude lands in [2^14, 2^15): hi stays normal, lo keeps ~11 more bits. The
     * exponent straight from the bits: frexpf's for a normal m (E - 126), and below 2^-100 the clamp decides anyway */
    float up = 1.0f;
    down = 1.0f;
    if (m > 0.0f && m <= 3.0e38f) {
        int ex = (int)(__float_as_uint(m) >> 23) - 126;
        ex = ex < -100 ? -100 : ex;
        up = __uint_as_float((uint32_t)(127 + 15 - ex) << 23);
        down = __uint_as_float((uint32_t)(127 + ex - 15) << 23);
    }
#pragma unroll
    for (int q = 0; q < 4; q++) {
        __half h[4], l[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float xs = v[q][e] * up;
            h[e] = __float2half_rn(xs);
            l[e] = __float2half_rn(xs - __half2float(h[e]));
        }
        __half2 p0 = __halves2half2(h[0], h[2]), p1 = __halves2half2(h[1], h[3]);
        __half2 p2 = __halves2half2(l[0], l[2]), p3 = __halves2half2(l[1], l[3]);
        u[q].x = *reinterpret_cast<uint32_t *>(&p0), u[q].y = *reinterpret_cast<uint32_t *>(&p1);
        u[q].z = *reinterpret_cast<uint32_t *>(&p2), u[q].w = *reinterpret_cast<uint32_t *>(&p3);
    }
}

/* One warp per (token, slice), into the layout the B fragments are read in: xf [T/8][S][4 q][8 i][32 lanes] uint4,
 * lane 4g + c holding part g & 1 (hi, lo) of tokens 8·tg + g/2 (x, y) and 8·tg + 4 + g/2 (z, w): one 16-byte load
 * feeds both token tiles of an 8-token pass. */
__global__ void fp4_prep_x(const float *x /* [T][K] */, int64_t K, int T, int64_t S,
                           uint4 *xf /* [ceil(T/8)][S][4][8][32] */, float *xscale /* [T][S] */) {
    pdl_start();
    const int lane = threadIdx.x & 31;
    const int64_t wid = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (wid >= (int64_t)T * S) return;
    const int t = (int)(wid / S);
    const int64_t s = wid % S;
    const int c = lane & 3, i = lane >> 2;
    float v[4][4];
    fp4_prep_load(x + (size_t)t * K, K, s, lane, v);
    uint4 u[4];
    float down;
    fp4_prep_convert(v, u, down);
    const int tg = t / 8, j = t % 4, half = t / 4 % 2;
    uint2 *xf2 = reinterpret_cast<uint2 *>(xf);
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const int64_t entry = ((((int64_t)tg * S + s) * 4 + q) * 8 + i) * 32 + c;
        xf2[(entry + 4 * (2 * j)) * 2 + half] = make_uint2(u[q].x, u[q].y);     /* hi: B column 2j */
        xf2[(entry + 4 * (2 * j + 1)) * 2 + half] = make_uint2(u[q].z, u[q].w); /* lo: B column 2j + 1 */
    }
    if (lane == 0) xscale[(size_t)t * S + s] = down;
}

/* The same for one token inside a GEMV block, into shared memory (no separate launch): the compact layout
 * xs [S][32 (q·8 + i)][4 c] uint4 (one token: every lane of a quad column reads the same entry) and xsc [S]. Warp w
 * takes slices w, w + W, ... (W warps), B of them per round with all their loads in flight at once (down_proj: 34
 * slices over 12 warps, one L2 round trip instead of three). after_loads() runs once per warp, after the first round's
 * loads are issued and before they are waited on: a kernel starts its weight copies there, behind x's loads rather
 * than ahead of them. Every thread of the block must call it (it ends with a barrier). */
#define FP4_PREP_BATCH 3   /* B of the 4-warp kernels */
#define FP4_PREP_SLICES 36 /* the ring kernels' B covers this many slices in one round (down_proj has 34) */
template <int B = FP4_PREP_BATCH, typename F>
__device__ __forceinline__ void fp4_prep_block(const float *x /* [K] */, int64_t K, int64_t S, uint4 *xs, float *xsc,
                                               F after_loads) {
    const int lane = threadIdx.x & 31, c = lane & 3, i = lane >> 2;
    const int64_t W = blockDim.x >> 5;
    bool first = true;
    for (int64_t s0 = threadIdx.x >> 5; first || s0 < S; s0 += B * W) {
        float v[B][4][4];
#pragma unroll
        for (int b = 0; b < B; b++)
            if (s0 + b * W < S) fp4_prep_load(x, K, s0 + b * W, lane, v[b]);
        if (first) after_loads();
        first = false;
#pragma unroll
        for (int b = 0; b < B; b++) {
            const int64_t s = s0 + b * W;
            if (s >= S) break;
            uint4 u[4];
            float down;
            fp4_prep_convert(v[b], u, down);
#pragma unroll
            for (int q = 0; q < 4; q++) xs[(s * 32 + q * 8 + i) * 4 + c] = u[q];
            if (lane == 0) xsc[s] = down;
        }
    }
    __syncthreads();
}

/* 8 E2M1 codes of one 32-bit word of the device layout → 4 f16x2 of value × 2^-14, the A-fragment pairs
 * o[0] = (e0, e2), o[1] = (e1, e3), o[2] = (e4, e6), o[3] = (e5, e7). A code's magnitude bits eem at f16 bits 11..9
 * (exponent ee, mantissa m: ee = 0 lands on the f16 subnormals exactly as on E2M1's) and its sign at bit 15 read as
 * value × 2^-14, so each pair is a mask FP4_F16_BITS of the word moved into place. Why this layout: the previous
 * one (nibbles as stored, moved into e4m3 bytes and widened by the hardware convert) spent ~10 ALU instructions per
 * word, and the ALU pipe was the busiest (ncu, gate+up at T=1: 56% of its peak). Here: 6 ALU + 3 IMAD. o[0] is the
 * mask alone, o[1] the word shifted by 3; no third shift fits beside them (the four source sets cannot tile the word),
 * so o[2] and o[3] take their magnitude and sign bits from two shifts at once, as a product with 2^a + 2^b of the
 * pre-masked word (the two shifted copies never overlap, so nothing carries). fp4_pack_word is the inverse. */
#define FP4_F16_BITS 0x8E008E00u /* sign 15, magnitude 11..9 of both halves */
#define FP4_SRC2 0x20382038u    /* o[2]: magnitude at 5..3 (× 2^6), sign at 13 (× 2^2), in both halves */
#define FP4_SRC3 0x40074007u    /* o[3]: magnitude at 2..0 (× 2^9), sign at 14 (× 2^1) */
#define FP4_DECODE_UNDO 16384.0f /* 2^14: what the decoded values are short of */
__device__ __forceinline__ void fp4_decode_word(uint32_t w, uint32_t (&o)[4]) {
    o[0] = w & FP4_F16_BITS;
    o[1] = (w << 3) & FP4_F16_BITS;
    o[2] = ((w & FP4_SRC2) * ((1u << 6) + (1u << 2))) & FP4_F16_BITS;
    o[3] = ((w & FP4_SRC3) * ((1u << 9) + (1u << 1))) & FP4_F16_BITS;
}
/* Stored nibbles (nibble j = element j: sign bit 3, magnitude 2..0) → the word fp4_decode_word reads: element of
 * pair p, half hh (0 low, 1 high) has its magnitude at mag_at[p] + 16·hh and its sign at sign_at[p] + 16·hh. */
__device__ __forceinline__ uint32_t fp4_pack_word(uint32_t nibbles) {
    const int elem[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}}, mag_at[4] = {9, 6, 3, 0}, sign_at[4] = {15, 12, 13, 14};
    uint32_t w = 0;
    for (int p = 0; p < 4; p++)
        for (int hh = 0; hh < 2; hh++) {
            const uint32_t code = (nibbles >> (4 * elem[p][hh])) & 15u;
            w |= (code & 7u) << (mag_at[p] + 16 * hh);
            w |= (code >> 3) << (sign_at[p] + 16 * hh);
        }
    return w;
}
/* Two e4m3 values → f16x2, from the high or the low 16 bits of a register: the convert reads the half directly
 * (no shift). The hardware convert needs sm_89; below it (sm_80/86/87) the same values by arithmetic (every e4m3
 * value is exact in f16, so both give the same bits; NaN stays NaN). */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 890
__device__ __forceinline__ uint32_t e4m3x2_hi_to_h2(uint32_t four) {
    uint32_t r;
    asm("{\n\t.reg .b16 lo16, hi16;\n\tmov.b32 {lo16, hi16}, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, hi16;\n\t}"
        : "=r"(r)
        : "r"(four));
    return r;
}
__device__ __forceinline__ uint32_t e4m3x2_lo_to_h2(uint32_t four) {
    uint32_t r;
    asm("{\n\t.reg .b16 lo16, hi16;\n\tmov.b32 {lo16, hi16}, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, lo16;\n\t}"
        : "=r"(r)
        : "r"(four));
    return r;
}
#else
__device__ __forceinline__ __half e4m3_to_half(uint32_t b /* low 8 bits */) {
    const uint32_t e = (b >> 3) & 15, m = b & 7;
    float v = e == 15 && m == 7 ? __int_as_float(0x7fc00000) /* e4m3's only NaN */
              : e ? ldexpf((float)(8 + m), (int)e - 10)   /* 2^(e-7) · (1 + m/8) */
                  : (float)m * 0x1p-9f;                     /* subnormal: m · 2^-9 */
    if (b & 0x80) v = -v;
    return __float2half_rn(v);
}
__device__ __forceinline__ uint32_t e4m3x2_to_h2(uint32_t two /* low 16 bits: element 0, then 1 */) {
    __half2 h = __halves2half2(e4m3_to_half(two & 0xff), e4m3_to_half((two >> 8) & 0xff));
    return *reinterpret_cast<uint32_t *>(&h);
}
__device__ __forceinline__ uint32_t e4m3x2_hi_to_h2(uint32_t four) { return e4m3x2_to_h2(four >> 16); }
__device__ __forceinline__ uint32_t e4m3x2_lo_to_h2(uint32_t four) { return e4m3x2_to_h2(four & 0xffff); }
#endif
__device__ __forceinline__ uint32_t hmul2_u(uint32_t a, uint32_t b) {
    __half2 r = __hmul2(*reinterpret_cast<__half2 *>(&a), *reinterpret_cast<__half2 *>(&b));
    return *reinterpret_cast<uint32_t *>(&r);
}
__device__ __forceinline__ void mma_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* The codes and scales of one slice for one lane: chunks 4c..4c+3 of rows g (ca, sa) and g+8 (cb, sb);
 * sa.x holds the scale pairs of chunks 0 (low 16 bits) and 1, sa.y those of chunks 2 and 3. */
struct fp4_slice_regs {
    uint4 ca[4], cb[4];
    uint2 sa, sb;
};
#define FP4_BLOCK_U4 (FP4_BLOCK_BYTES / 16) /* a slice block in 16-byte units: 256 of codes, 32 of scales */
/* Weight loads: read once, so not allocated in L1 (kept for x), and first to leave the L2 (l2_evict_first), so that
 * what later launches read again (x, the KV cache, the GDN states, kernel code) is less often pushed out by the
 * ~15 GB of weights a token streams (H200, decode 175.9 -> 177.6-178.8 tok/s plain, 419-420 -> 429-431 at K=6; which
 * of those reads gained was not measured). volatile, because the mma asm is volatile too: the compiler then keeps all
 * of a slice's loads ahead of its first mma. With plain loads it sank them between the chunk steps to save registers,
 * and a warp waited out the memory latency four times per slice (measured: down 50 µs against 37 µs). */
__device__ __forceinline__ uint64_t l2_evict_first(void) {
    uint64_t policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy)); /* pure: computed once per kernel */
    return policy;
}
__device__ __forceinline__ uint4 ld_stream16(const uint4 *p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p), "l"(l2_evict_first()));
    return r;
}
/* The slice block of one (tile, slice) in the slice-block layout ("Device layouts", top of file): lane l's codes of row
 * half h, chunk step q at uint4 (h·4 + q)·32 + l; its scales at uint4 256 + l (row g in the low 8 bytes, g+8 in the
 * high). Every load instruction of a warp reads 512 contiguous bytes, and a lane reads only its own 9 uint4 (so a
 * lane can copy them to shared memory and read them back without waiting for the others). From global memory
 * (streamed, GLOBAL) or from a warp's shared-memory copy. */
template <bool GLOBAL>
__device__ __forceinline__ void fp4_load_slice(fp4_slice_regs &r, const uint4 *block, int lane) {
#pragma unroll
    for (int q = 0; q < 4; q++) {
        r.ca[q] = GLOBAL ? ld_stream16(block + q * 32 + lane) : block[q * 32 + lane];
        r.cb[q] = GLOBAL ? ld_stream16(block + (4 + q) * 32 + lane) : block[(4 + q) * 32 + lane];
    }
    const uint4 sc = GLOBAL ? ld_stream16(block + 256 + lane) : block[256 + lane];
    r.sa = make_uint2(sc.x, sc.y), r.sb = make_uint2(sc.z, sc.w);
}

__device__ __forceinline__ uint32_t u4_word(const uint4 &u, int w) {
    return w == 0 ? u.x : w == 1 ? u.y : w == 2 ? u.z : u.w;
}

/* The e4m3 scale pair (blocks 0, 1) of chunk step q as f16x2, from a row's scale words (sa or sb of fp4_slice_regs). */
__device__ __forceinline__ uint32_t fp4_chunk_scales(const uint2 &s, int q) {
    const uint32_t two = q < 2 ? s.x : s.y;
    return q & 1 ? e4m3x2_hi_to_h2(two) : e4m3x2_lo_to_h2(two);
}
/* The A fragment of k-step (wi, h) of one chunk step from its decoded words (oa: row g, ob: row g+8) and the chunk's
 * scales: rows g, g+8, elements e0 e2 (a0, a1) and e1 e3 (a2, a3), each times its word's block scale (elements
 * 8 wi..8 wi+7, in both halves). */
__device__ __forceinline__ void fp4_kstep_a(const uint32_t (&oa)[4], const uint32_t (&ob)[4], uint32_t sha,
                                            uint32_t shb, int wi, int h, uint32_t (&a)[4]) {
    const uint32_t sca = __byte_perm(sha, 0, wi < 2 ? 0x1010 : 0x3232);
    const uint32_t scb = __byte_perm(shb, 0, wi < 2 ? 0x1010 : 0x3232);
    a[0] = hmul2_u(oa[2 * h], sca), a[1] = hmul2_u(ob[2 * h], scb);
    a[2] = hmul2_u(oa[2 * h + 1], sca), a[3] = hmul2_u(ob[2 * h + 1], scb);
}

/* One slice of one lane: p[nt][r] (rows g, g+8 of token 4·nt + c of the pass) = ((e0 + e1) + (e2 + e3)) · 2^e with
 * e_q = hi_q + lo_q, the two D columns of that token after chunk step q's mma chain. xf_s: this lane's B half-entry
 * (its token, its part, this slice, q 0, i 0) per token tile, in global memory (entries 64 uint2 apart), XSH, in a
 * shared-memory copy of that layout (mma_gemm), or, SX, in the block's one-token copy (8 apart); xsc: 2^e of its
 * token. The four chains are independent and interleaved k-step
 * by k-step, so the tensor pipe always has 4·NT chains to alternate between instead of waiting out one chain's
 * latency. */
template <int NT, bool SX, bool XSH = false>
__device__ __forceinline__ void fp4_slice_mma(const fp4_slice_regs &cur, const uint2 *const (&xf_s)[NT],
                                              const float (&xsc)[NT], float (&p)[NT][2]) {
    uint32_t sha[4], shb[4]; /* scales of chunk step q, rows g and g+8 */
#pragma unroll
    for (int q = 0; q < 4; q++) sha[q] = fp4_chunk_scales(cur.sa, q), shb[q] = fp4_chunk_scales(cur.sb, q);
    float d[4][NT][4];
#pragma unroll
    for (int q = 0; q < 4; q++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) d[q][nt][e] = 0.0f;
#pragma unroll
    for (int wi = 0; wi < 4; wi++) {
        uint32_t oa[4][4], ob[4][4]; /* [q][pair]: rows g, g+8 */
#pragma unroll
        for (int q = 0; q < 4; q++) {
            fp4_decode_word(u4_word(cur.ca[q], wi), oa[q]);
            fp4_decode_word(u4_word(cur.cb[q], wi), ob[q]);
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int i = 2 * wi + h;
#pragma unroll
            for (int q = 0; q < 4; q++) {
                uint32_t a[4];
                fp4_kstep_a(oa[q], ob[q], sha[q], shb[q], wi, h, a);
                uint2 bnext = make_uint2(0, 0);
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    uint2 b;
                    if (SX) b = xf_s[nt][(q * 8 + i) * 8];
                    else if (NT == 1) b = XSH ? xf_s[nt][(q * 8 + i) * 64] : __ldg(xf_s[nt] + (q * 8 + i) * 64);
                    else if (nt % 2 == 0) { /* tiles nt and nt + 1 share one 16-byte entry */
                        const uint4 *e = reinterpret_cast<const uint4 *>(xf_s[nt] + (q * 8 + i) * 64);
                        const uint4 b2 = XSH ? *e : __ldg(e);
                        b = make_uint2(b2.x, b2.y);
                        bnext = make_uint2(b2.z, b2.w);
                    } else b = bnext;
                    mma_16816(d[q][nt], a[0], a[1], a[2], a[3], b.x, b.y); /* hi and lo columns at once */
                }
            }
        }
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int e = 2 * r; /* D columns 2c (hi) and 2c + 1 (lo) of row g + 8r */
            p[nt][r] = (((d[0][nt][e] + d[0][nt][e + 1]) + (d[1][nt][e] + d[1][nt][e + 1])) +
                        ((d[2][nt][e] + d[2][nt][e + 1]) + (d[3][nt][e] + d[3][nt][e + 1]))) *
                       xsc[nt];
        }
}

/* Chunk step Q of fp4_slice_mma alone, one token (SX): this lane's e_Q for rows g, g + 8 (the hi + lo sum of chunk step
 * Q's mma chain), from the step's codes (ca, cb: cur.ca[Q], cur.cb[Q]) and the slice's scales. p = ((e_0 + e_1) +
 * (e_2 + e_3)) · xsc then has fp4_slice_mma's bits: the chain runs its k-steps in the same order. */
template <int Q>
__device__ __forceinline__ void fp4_chunk_e(const uint4 &ca, const uint4 &cb, const uint4 &sc, const uint2 *xf_s,
                                            float (&e)[2]) {
    const uint32_t sha = fp4_chunk_scales(make_uint2(sc.x, sc.y), Q), shb = fp4_chunk_scales(make_uint2(sc.z, sc.w), Q);
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int wi = 0; wi < 4; wi++) {
        uint32_t oa[4], ob[4];
        fp4_decode_word(u4_word(ca, wi), oa);
        fp4_decode_word(u4_word(cb, wi), ob);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint2 b = xf_s[(Q * 8 + 2 * wi + h) * 8];
            uint32_t a[4];
            fp4_kstep_a(oa, ob, sha, shb, wi, h, a);
            mma_16816(d, a[0], a[1], a[2], a[3], b.x, b.y);
        }
    }
    e[0] = d[0] + d[1], e[1] = d[2] + d[3];
}

/* The weights one launch covers: one linear, or the parts of a fused group (matmul_group) whose tiles lie one after
 * another in one allocation (a tile never spans two parts). Each row keeps its part's scale2 and is written to its
 * part's output; its reduction is unchanged, so a fused launch gives the same bits as one launch per part. */
/* A paired gate|up group (prepare_group, "paired layout" at the end of the file) is one segment of 8-row pairs:
 * tile i holds gate rows 8i..8i+7 in its rows 0..7 and up rows 8i..8i+7 in rows 8..15, so the lane that sums row g
 * also sums row g + 8, and can write both (FP4_PAIR) or silu(gate) · up (FP4_PAIR_SWIGLU). */
enum { FP4_PARTS = 0, FP4_PAIR = 1, FP4_PAIR_SWIGLU = 2 };
typedef struct {
    int count, pair;                       /* pair: FP4_PARTS, or a paired group (count 1, parts 0 and 1 below) */
    int64_t tile_begin[QRT_GROUP_MAX + 1]; /* first tile of each part; tile_begin[count] = tiles in all */
    int64_t rows[QRT_GROUP_MAX];           /* N of each part */
    float scale2[QRT_GROUP_MAX];
    float *y[QRT_GROUP_MAX];               /* [T][rows[i]] */
} fp4_segments;
/* Every kernel takes its segments as a __grid_constant__ parameter, read in place from the parameter bank. As a plain
 * by-value struct indexed at run time (tile_begin[count], a tile's part) it was copied by every thread into local
 * memory at the kernel's start (128 bytes; 20-46 local loads and stores per thread in each NVFP4 kernel's PTX). H200,
 * same call: decode 185.2-185.6 -> 189.6-190.5 tok/s, K=6 431.4-432.4 -> 443.8-446.3; tilebench M = 1 gate+up 28.5 ->
 * 26.4 us, down 17.1 -> 16.3 (docs/benchmarks.md, session 14). */

/* Where a tile's rows go: its part's output, rows and scale2 (paired: part 0's for rows g, part 1's for g + 8). */
typedef struct {
    int64_t N, row0; /* rows of the part; the tile's first row within it */
    float f;         /* FP4_DECODE_UNDO · scale2: undoes the decode's 2^-14 and applies the tensor scale */
    float *y;
    int pair;
    float f1; /* paired: up's */
    float *y1;
} fp4_tile_out;
__device__ __forceinline__ fp4_tile_out fp4_tile_target(const fp4_segments &seg, int64_t tile) {
    if (seg.pair != FP4_PARTS)
        return fp4_tile_out{seg.rows[0], tile * 8, FP4_DECODE_UNDO * seg.scale2[0], seg.y[0], seg.pair,
                            FP4_DECODE_UNDO * seg.scale2[1], seg.y[1]};
    int p = 0;
#pragma unroll
    for (int i = 1; i < QRT_GROUP_MAX; i++)
        if (i < seg.count && tile >= seg.tile_begin[i]) p = i;
    return fp4_tile_out{seg.rows[p], (tile - seg.tile_begin[p]) * 16, FP4_DECODE_UNDO * seg.scale2[p], seg.y[p],
                        FP4_PARTS, 0.0f, NULL};
}

/* Where a kernel reads x: the fragments fp4_prep_x made in global memory (any T), or, for one token, the block's
 * own shared copy (fp4_prep_block). */
struct fp4_xsrc {
    const uint4 *xf;     /* [ceil(T/8)][S][4][8][32], or shared [S][32][4] */
    const float *xscale; /* [T][S], or shared [S] */
};

/* This lane's B half-entry base (slice 0, q 0, i 0) for each token tile of the pass starting at t0: B column g of a
 * tile is part g & 1 (hi, lo) of token 4·nt + g / 2. SX (one token): that half of the token's entry c; tokens 1..3
 * of the tile (absent) read token 0's. Global: the tile's half of lane's entry (fp4_prep_x). Columns of tokens past
 * T read stale or zero entries: B column n only feeds D column n, and those columns are never stored. */
template <int NT, bool SX>
__device__ __forceinline__ void fp4_x_lanes(const fp4_xsrc &xs, int64_t S, int T, int t0, int lane,
                                            const uint2 *(&xf_lane)[NT]) {
    const int g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        int tile0 = t0 + 4 * nt; /* first token of the tile: a multiple of 4 */
        if (!SX && tile0 >= T) tile0 = (T - 1) / 8 * 8 + 4 * (nt & 1); /* past the last group: read one that exists */
        const uint4 *entry = SX ? xs.xf + c : xs.xf + (int64_t)(tile0 / 8) * S * 1024 + lane;
        xf_lane[nt] = reinterpret_cast<const uint2 *>(entry) + (SX ? g & 1 : tile0 / 4 % 2);
    }
}
/* The half-entries of slice s, and the 2^e of this lane's D token (0 past T). */
template <int NT, bool SX>
__device__ __forceinline__ void fp4_x_slice(const uint2 *const (&xf_lane)[NT], const fp4_xsrc &xs, int64_t S, int T,
                                            int t0, int64_t s, int lane, const uint2 *(&xf_s)[NT], float (&xsc)[NT]) {
    const int c = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        xf_s[nt] = xf_lane[nt] + s * (SX ? 256 : 2048);
        const int tok = t0 + 4 * nt + c;
        xsc[nt] = tok >= T ? 0.0f : SX ? xs.xscale[s] : __ldg(xs.xscale + (size_t)tok * S + s);
    }
}

/* Slice s of a tile (its slice blocks tile_blocks) for this lane: loaded into registers, then its p (fp4_slice_mma). */
template <int NT, bool SX>
__device__ __forceinline__ void fp4_slice_p(const uint8_t *tile_blocks, int64_t s, const uint2 *const (&xf_lane)[NT],
                                            const fp4_xsrc &xs, int64_t S, int T, int t0, int lane,
                                            float (&p)[NT][2]) {
    fp4_slice_regs cur;
    fp4_load_slice<true>(cur, reinterpret_cast<const uint4 *>(tile_blocks + (size_t)s * FP4_BLOCK_BYTES), lane);
    const uint2 *xf_s[NT];
    float xsc[NT];
    fp4_x_slice<NT, SX>(xf_lane, xs, S, T, t0, s, lane, xf_s, xsc);
    fp4_slice_mma<NT, SX>(cur, xf_s, xsc, p);
}

/* y for this lane's sums: rows row0 + g (+8) of token t0 + 4 nt + c. PAIR: a paired group's launch (a template
 * parameter, so the other launches keep their code and registers). */
template <int NT, bool PAIR>
__device__ __forceinline__ void fp4_store(const fp4_tile_out &o, int T, int t0, int lane, const float (&acc)[NT][2]) {
    const int g = lane >> 2, c = lane & 3;
    if (PAIR) { /* row g: gate row row0 + g; row g + 8: the same row of up */
        const int64_t row = o.row0 + g;
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const int tok = t0 + 4 * nt + c;
            if (row >= o.N || tok >= T) continue;
            const float gate = acc[nt][0] * o.f, up = acc[nt][1] * o.f1; /* what the unpaired stores hold */
            const size_t at = (size_t)tok * o.N + row;
            if (o.pair == FP4_PAIR_SWIGLU) o.y[at] = silu_f(gate) * up; /* qrt_cuda_swiglu's expression */
            else o.y[at] = gate, o.y1[at] = up;
        }
    } else {
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int64_t row = o.row0 + g + 8 * r;
                const int tok = t0 + 4 * nt + c;
                if (row < o.N && tok < T) o.y[(size_t)tok * o.N + row] = acc[nt][r] * o.f;
            }
    }
}

/* This lane's 9 uint4 of a slice block into L2 (no registers held): what mma_w1 and mma_k4_sx ask for while their
 * x loads are in flight, so their first weight loads hit L2. */
__device__ __forceinline__ void fp4_prefetch_slice(const uint8_t *block, int lane) {
    const uint4 *p = reinterpret_cast<const uint4 *>(block) + lane;
#pragma unroll
    for (int j = 0; j < 9; j++) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p + j * 32));
}

/* Variant mma_w1: one warp per 16-row tile, TPB tiles per block, each slice loaded into registers right before use
 * (a register prefetch of the next slice measured slower: fewer warps fit); the slices' p are summed in
 * order (y = ((p0 + p1) + p2) + ...). Tiles past the last one (grid rounding) store nothing. Serves any T, NT token
 * tiles (4 tokens each) per pass. Three blocks per SM (≤ 170 registers): what the interleaved chains need.
 * SX (T = 1): the block first makes its own shared copy of x's fragments from x (no fp4_prep_x launch). */
template <int NT, int TPB, bool SX, bool PAIR>
__global__ void __launch_bounds__(TPB * 32, 3) fp4_mma_w1(const uint8_t *blocks /* [tiles][S][FP4_BLOCK_BYTES] */,
                                                             const __grid_constant__ fp4_segments seg, fp4_xsrc xs,
                                                             const float *x /* SX: [K] */, int64_t K, int64_t S,
                                                             int T) {
    pdl_start();
    extern __shared__ uint4 fp4_xs[]; /* SX: [S][32][4], then [S] f32 scales */
    const int lane = threadIdx.x & 31;
    const int64_t tile = (int64_t)blockIdx.x * TPB + (threadIdx.x >> 5);
    const bool has_tile = tile < seg.tile_begin[seg.count];
    const uint8_t *tile_blocks = blocks + (size_t)tile * S * FP4_BLOCK_BYTES;
    if (SX) {
        fp4_prep_block(x, K, S, fp4_xs, reinterpret_cast<float *>(fp4_xs + S * 128), [&] {
            for (int64_t s = 0; has_tile && s < S && s < 2; s++) fp4_prefetch_slice(tile_blocks + s * FP4_BLOCK_BYTES, lane);
        });
        xs = fp4_xsrc{fp4_xs, reinterpret_cast<const float *>(fp4_xs + S * 128)};
    }
    if (!has_tile) return;
    const fp4_tile_out o = fp4_tile_target(seg, tile);
    for (int t0 = 0; t0 < T; t0 += 4 * NT) {
        const uint2 *xf_lane[NT];
        fp4_x_lanes<NT, SX>(xs, S, T, t0, lane, xf_lane);
        float acc[NT][2];
        for (int64_t s = 0; s < S; s++) {
            float p[NT][2];
            fp4_slice_p<NT, SX>(tile_blocks, s, xf_lane, xs, S, T, t0, lane, p);
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int r = 0; r < 2; r++) acc[nt][r] = s == 0 ? p[nt][r] : acc[nt][r] + p[nt][r];
        }
        fp4_store<NT, PAIR>(o, T, t0, lane, acc);
    }
}

/* Variant mma_k<WK>: one block of WK warps per 16-row tile, for long K (few tiles, many slices): warp w takes slices
 * w, w + WK, ... (registers, as mma_w1), writes each slice's p to shared memory, and warp 0 sums them in slice order
 * (the same bits as mma_w1). SX as for mma_w1: pays on short K (few slices to prepare per warp), not on down_proj. */
template <int NT, int WK, bool SX, bool PAIR>
__global__ void __launch_bounds__(WK * 32) fp4_mma_k(const uint8_t *blocks /* [tiles][S][FP4_BLOCK_BYTES] */,
                                                     const __grid_constant__ fp4_segments seg, fp4_xsrc xs,
                                                     const float *x /* SX: [K] */, int64_t K, int64_t S, int T) {
    pdl_start();
    extern __shared__ float fp4_part[]; /* [S][NT][2][32] p, then SX: [S][32][4] uint4 and [S] f32 */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t tile = blockIdx.x;
    const uint8_t *tile_blocks = blocks + (size_t)tile * S * FP4_BLOCK_BYTES;
    if (SX) {
        uint4 *xsh = reinterpret_cast<uint4 *>(fp4_part + S * NT * 64);
        fp4_prep_block(x, K, S, xsh, reinterpret_cast<float *>(xsh + S * 128), [&] {
            for (int64_t s = warp; s < S && s < warp + 2 * WK; s += WK)
                fp4_prefetch_slice(tile_blocks + s * FP4_BLOCK_BYTES, lane);
        });
        xs = fp4_xsrc{xsh, reinterpret_cast<const float *>(xsh + S * 128)};
    }
    const fp4_tile_out o = fp4_tile_target(seg, tile);
    for (int t0 = 0; t0 < T; t0 += 4 * NT) {
        const uint2 *xf_lane[NT];
        fp4_x_lanes<NT, SX>(xs, S, T, t0, lane, xf_lane);
        for (int64_t s = warp; s < S; s += WK) {
            float p[NT][2];
            fp4_slice_p<NT, SX>(tile_blocks, s, xf_lane, xs, S, T, t0, lane, p);
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int r = 0; r < 2; r++) fp4_part[((s * NT + nt) * 2 + r) * 32 + lane] = p[nt][r];
        }
        __syncthreads();
        if (warp == 0) {
            float acc[NT][2];
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    float a = fp4_part[(nt * 2 + r) * 32 + lane];
                    for (int64_t s = 1; s < S; s++) a += fp4_part[((s * NT + nt) * 2 + r) * 32 + lane];
                    acc[nt][r] = a;
                }
            fp4_store<NT, PAIR>(o, T, t0, lane, acc);
        }
        __syncthreads(); /* fp4_part is rewritten by the next pass */
    }
}

/* Variant mma_st<WPB, D> ("streamed"): a grid of as many blocks as fit on the GPU at once, each warp taking an equal
 * run of the weight's (tile, slice) units in storage order, so every warp reads the same number of bytes (mma_w1 and
 * mma_k4 hand out whole tiles: gate+up's 2176 tiles over 1584 warps left the second round of blocks 37% full, and
 * down_proj's 320 tiles kept a warp waiting on 9 slices one after another). Each warp streams its units through its
 * own ring of D slice blocks in shared memory with cp.async, D - 1 slices in flight while it computes one (a lane
 * copies and reads back only its own 9 uint4 of a block, so no barrier is needed), and the ring holds no registers.
 * A tile whose units are all one warp's is summed in registers; a tile split between warps has each slice's p
 * written to st.part, and the warp that completes its count (st.done, an atomic) sums them in slice order. Both
 * give mma_w1's bits. SX (T = 1): the block first prepares x's fragments in shared memory, then starts the copies.
 * One pass of ≤ 4·NT tokens (t0 ...) per launch. */
struct fp4_st_work {
    int64_t units;  /* tiles · S */
    int64_t warps;  /* in the grid */
    float *part;    /* [units][tp][16 rows], tp = the pass's tokens: p of the units of split tiles */
    unsigned *done; /* [tiles]: slices of a split tile finished; the finishing warp resets it to 0 */
};

__device__ __forceinline__ void cp_async16(uint4 *smem, const uint4 *gmem) {
    const unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem));
}
/* The same for weights, read once per launch: first to leave the L2 (see ld_stream16). */
__device__ __forceinline__ void cp_async16_stream(uint4 *smem, const uint4 *gmem, uint64_t policy) {
    const unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "l"(policy));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* This lane's 9 uint4 of a slice block into the same places of a ring slot (both pointers already at the lane). */
__device__ __forceinline__ void fp4_copy_slice(uint4 *slot_lane, const uint4 *block_lane) {
    const uint64_t policy = l2_evict_first();
#pragma unroll
    for (int j = 0; j < 9; j++) cp_async16_stream(slot_lane + j * 32, block_lane + j * 32, policy);
}
/* A split tile's slice: this lane's sums (token 4·nt + c, rows g and g+8) of tokens < tp into part [u][tp][16]. */
template <int NT>
__device__ __forceinline__ void fp4_part_store(float *part, int64_t u, int tp, int lane, const float (&p)[NT][2]) {
    const int g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int r = 0; r < 2; r++)
            if (4 * nt + c < tp) part[(u * tp + 4 * nt + c) * 16 + g + 8 * r] = p[nt][r];
}

#define FP4_FINISH_LOADS 32 /* per lane in flight when a warp finishes a split tile */
/* Split tile `tile` of a one-token pass, summed in slice order: its S · 16 sums lie contiguous in st.part, so the warp
 * loads them two slices per instruction (lane l: row l % 16 of slice 2j + l / 16, 48 slices per round trip) and each
 * lane gathers its rows g, g + 8 by shuffles. */
__device__ __forceinline__ void fp4_part_sum_t1(const float *part, int64_t tile, int64_t S, int lane, float (&acc)[2]) {
    constexpr int B = 24;
    const int g = lane >> 2;
    for (int64_t s0 = 0; s0 < S; s0 += 2 * B) {
        float v[B];
#pragma unroll
        for (int j = 0; j < B; j++) {
            const int64_t s = s0 + 2 * j + (lane >> 4);
            v[j] = s < S ? __ldcg(part + (tile * S + s) * 16 + (lane & 15)) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < B; j++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const float even = __shfl_sync(0xffffffffu, v[j], g + 8 * r);
                const float odd = __shfl_sync(0xffffffffu, v[j], g + 8 * r + 16);
                const int64_t s = s0 + 2 * j;
                if (s < S) acc[r] = s == 0 ? even : acc[r] + even;
                if (s + 1 < S) acc[r] = acc[r] + odd;
            }
    }
}
/* The same for a pass of tp > 1 tokens: each lane loads its own sums, B slices of them per round trip. */
template <int NT>
__device__ __forceinline__ void fp4_part_sum(const float *part, int64_t tile, int64_t S, int tp, int lane,
                                             float (&acc)[NT][2]) {
    const int g = lane >> 2, c = lane & 3;
    constexpr int B = FP4_FINISH_LOADS / (2 * NT);
    for (int64_t s0 = 0; s0 < S; s0 += B) {
        float v[NT][2][B];
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const float *col = part + (tile * S * tp + 4 * nt + c) * 16 + g + 8 * r;
#pragma unroll
                for (int j = 0; j < B; j++)
                    v[nt][r][j] = 4 * nt + c < tp && s0 + j < S ? __ldcg(col + (s0 + j) * tp * 16) : 0.0f;
            }
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int j = 0; j < B; j++)
                    if (s0 + j < S) acc[nt][r] = s0 + j == 0 ? v[nt][r][j] : acc[nt][r] + v[nt][r][j];
    }
}
/* One atomic add at GPU scope with release and acquire semantics: publishes the warp's p stores (ordered before it by
 * __syncwarp) and, for the warp that completes a tile, makes the other warps' visible, in one operation instead of
 * a fence on each side of a relaxed add. */
__device__ __forceinline__ unsigned atom_add_acq_rel_gpu(unsigned *p, unsigned v) {
    unsigned old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;\n" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}

/* The warp that completed split tile `tile`: all S slices' p summed in order (mma_w1's order), the rows stored. */
template <int NT, bool PAIR>
__device__ __forceinline__ void fp4_part_total(const float *part, const fp4_segments &seg, int64_t tile, int64_t S,
                                               int T, int t0, int lane) {
    const int tp = T - t0 < 4 * NT ? T - t0 : 4 * NT;
    float acc[NT][2];
    if (tp == 1) fp4_part_sum_t1(part, tile, S, lane, acc[0]);
    else fp4_part_sum<NT>(part, tile, S, tp, lane, acc);
    fp4_store<NT, PAIR>(fp4_tile_target(seg, tile), T, t0, lane, acc);
}
template <int NT, bool PAIR>
__device__ __forceinline__ void fp4_part_complete(const fp4_st_work &st, const fp4_segments &seg, int64_t tile,
                                                  int64_t S, int T, int t0, int lane) {
    fp4_part_total<NT, PAIR>(st.part, seg, tile, S, T, t0, lane);
    if (lane == 0) st.done[tile] = 0;
}
/* At the end of a warp's run: count in its slices of its split tiles, `mine[i]` slices of tile[i] (i = 0: the tile
 * its run began inside, if that one ended before the run did, else mine[0] = 0; i = 1: the tile it ended in), both
 * atomics in flight together; the warp that completes a tile sums it. The first tile's count used to be taken when
 * its last slice was done, mid-run: the warp then waited out an L2 round trip with its copies drained. */
template <int NT, bool PAIR>
__device__ __forceinline__ void fp4_part_finish(const fp4_st_work &st, const fp4_segments &seg,
                                                const int64_t (&tile)[2], const unsigned (&mine)[2], int64_t S, int T,
                                                int t0, int lane) {
    __syncwarp(); /* every lane's p stores before lane 0's release */
    unsigned before[2] = {0, 0};
    if (lane == 0) {
#pragma unroll
        for (int i = 0; i < 2; i++)
            if (mine[i]) before[i] = atom_add_acq_rel_gpu(st.done + tile[i], mine[i]);
    }
    __syncwarp(); /* lane 0's acquire before every lane's loads */
#pragma unroll
    for (int i = 0; i < 2; i++) {
        before[i] = __shfl_sync(0xffffffffu, before[i], 0);
        if (mine[i] && before[i] + mine[i] == (unsigned)S) fp4_part_complete<NT, PAIR>(st, seg, tile[i], S, T, t0, lane);
    }
}

/* One word of each of the slice's 9 loads, xor-ed: a refill whose address depends on it (fp4_slot_p, EARLY) is issued
 * only once those shared-memory loads have returned, since cp.async is not ordered after earlier reads of its
 * destination. The caller makes the dependence a zero the compiler cannot fold (a popc-and-shift zero was folded). */
__device__ __forceinline__ uint32_t fp4_slice_words(const fp4_slice_regs &r) {
    uint32_t v = r.sa.x;
#pragma unroll
    for (int q = 0; q < 4; q++) v ^= r.ca[q].x ^ r.cb[q].x;
    return v;
}
/* The unit in ring slot `slot` (slice s), once its copy group, the oldest in flight, has landed: this lane's p; then
 * refill(0) refills the slot (after the mma, which has consumed the slot's registers). EARLY: refill(words) as soon as
 * the slot's words are in registers (words: fp4_slice_words), so the ring keeps D copies in flight through the mma
 * instead of D - 1. */
template <int NT, int D, bool SX, bool EARLY, typename F>
__device__ __forceinline__ void fp4_slot_p(const uint4 *slot, int lane, const uint2 *const (&xf_lane)[NT],
                                           const fp4_xsrc &xs, int64_t S, int T, int t0, int64_t s, float (&p)[NT][2],
                                           F refill) {
    cp_async_wait<D - 1>();
    fp4_slice_regs cur;
    fp4_load_slice<false>(cur, slot, lane);
    if (EARLY) refill(fp4_slice_words(cur));
    const uint2 *xf_s[NT];
    float xsc[NT];
    fp4_x_slice<NT, SX>(xf_lane, xs, S, T, t0, s, lane, xf_s, xsc);
    fp4_slice_mma<NT, SX>(cur, xf_s, xsc, p);
    if (!EARLY) refill(0u);
}

/* Units u0 + J0 .. u0 + J1 - 1 of a run (u0.. ending at u1; next points at unit u0 + J0) into ring slots J0..J1-1 of
 * its warp, one commit group per slot (empty past the run); next moves on to unit u0 + J1. */
template <int J0, int J1>
__device__ __forceinline__ void fp4_run_copies(uint4 *ring, const uint4 *&next, int u0, int u1, int lane) {
#pragma unroll
    for (int j = J0; j < J1; j++, next += FP4_BLOCK_U4) {
        if (u0 + j < u1) fp4_copy_slice(ring + j * FP4_BLOCK_U4 + lane, next);
        cp_async_commit();
    }
}

/* The start of mma_st, mma_il and mma_cl: the rings' first copies (start_copies), on one token (SX) behind the loads
 * of the block's x copy (queued ahead of them, x waited out ~20 MB of copies, ~4 µs, measured), which then becomes
 * xs; and this lane's B half-entries. */
template <int NT, int WPB, int D, bool SX, typename F>
__device__ __forceinline__ void fp4_ring_start(uint4 *smem /* rings, then SX's x copy */, const float *x, int64_t K,
                                               int64_t S, int T, int t0, int lane, fp4_xsrc &xs,
                                               const uint2 *(&xf_lane)[NT], F start_copies) {
    if (SX) {
        uint4 *xsh = smem + (size_t)WPB * D * FP4_BLOCK_U4;
        fp4_prep_block<(FP4_PREP_SLICES + WPB - 1) / WPB>(x, K, S, xsh, reinterpret_cast<float *>(xsh + S * 128),
                                                          start_copies);
        xs = fp4_xsrc{xsh, reinterpret_cast<const float *>(xsh + S * 128)};
    } else {
        start_copies();
    }
    fp4_x_lanes<NT, SX>(xs, S, T, t0, lane, xf_lane);
}

template <int NT, int WPB, int D, bool SX, bool PAIR>
__global__ void __launch_bounds__(WPB * 32) fp4_mma_st(const uint8_t *blocks /* [tiles][S][FP4_BLOCK_BYTES] */,
                                                       const __grid_constant__ fp4_segments seg, fp4_xsrc xs,
                                                       const float *x /* SX: [K] */, int64_t K, int64_t S, int T,
                                                       int t0, const fp4_st_work st) {
    pdl_start();
    extern __shared__ uint4 fp4_st_smem[]; /* [WPB][D][FP4_BLOCK_U4] rings, then SX: [S][32][4] uint4, [S] f32 */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    /* unit bookkeeping in 32 bits (the launcher checks units < 2^31): in 64 bits it was ~14% of the loop's
     * instructions (ncu, down_proj) */
    const int64_t gw = (int64_t)blockIdx.x * WPB + warp;
    const int u0 = (int)(gw * st.units / st.warps), u1 = (int)((gw + 1) * st.units / st.warps), Si = (int)S;
    const uint4 *next = reinterpret_cast<const uint4 *>(blocks) + (int64_t)u0 * FP4_BLOCK_U4 + lane; /* unit u0 */
    uint4 *ring = fp4_st_smem + (size_t)warp * D * FP4_BLOCK_U4;
    auto start_copies = [&] { fp4_run_copies<0, D>(ring, next, u0, u1, lane); };
    const uint2 *xf_lane[NT];
    fp4_ring_start<NT, WPB, D, SX>(fp4_st_smem, x, K, S, T, t0, lane, xs, xf_lane, start_copies);
    const int tp = T - t0 < 4 * NT ? T - t0 : 4 * NT;
    float acc[NT][2];
    int tile = u0 / Si, s = u0 - tile * Si;                   /* of unit u, stepped along (no division per unit) */
    bool whole = tile * Si >= u0 && tile * Si + Si <= u1; /* the tile is all this warp's */
    int k = 0;                                                /* u's ring slot */
    int64_t split_tile[2] = {0, 0};                           /* fp4_part_finish's */
    unsigned split_mine[2] = {0, 0};
    for (int u = u0; u < u1; u++, k = k == D - 1 ? 0 : k + 1) {
        uint4 *slot = ring + k * FP4_BLOCK_U4;
        float p[NT][2];
        fp4_slot_p<NT, D, SX, false>(slot, lane, xf_lane, xs, S, T, t0, s, p, [&](uint32_t) {
            if (u + D < u1) fp4_copy_slice(slot + lane, next); /* next: unit u + D */
            next += FP4_BLOCK_U4;
            cp_async_commit();
        });
        if (whole) {
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int r = 0; r < 2; r++) acc[nt][r] = s == 0 ? p[nt][r] : acc[nt][r] + p[nt][r];
            if (s == Si - 1) fp4_store<NT, PAIR>(fp4_tile_target(seg, tile), T, t0, lane, acc);
        } else {
            fp4_part_store<NT>(st.part, u, tp, lane, p);
            const int first = tile * Si, end = first + Si;
            const unsigned mine = (unsigned)(min(u1, end) - max(u0, first));
            if (u == u1 - 1) split_tile[1] = tile, split_mine[1] = mine; /* both counted in at the end of the run */
            else if (s == Si - 1) split_tile[0] = tile, split_mine[0] = mine;
        }
        if (++s == Si) s = 0, tile++, whole = tile * Si >= u0 && tile * Si + Si <= u1;
    }
    if (split_mine[0] || split_mine[1]) fp4_part_finish<NT, PAIR>(st, seg, split_tile, split_mine, S, T, t0, lane);
    cp_async_wait<0>();
}

/* A block's one-token x copy in shared memory: [S][32][4] uint4 of fragments and [S] f32 scales. */
__host__ __device__ static inline size_t fp4_sx_bytes(int64_t S) {
    return (size_t)S * (128 * sizeof(uint4) + sizeof(float));
}
/* The shared memory of mma_st's, mma_il's and mma_cl's blocks: WPB rings of D slice blocks, then SX's x copy. */
__host__ __device__ static inline size_t fp4_ring_smem(int WPB, int D, bool SX, int64_t S) {
    return (size_t)WPB * D * FP4_BLOCK_BYTES + (SX ? fp4_sx_bytes(S) : 0);
}

/* Variant mma_cl<WPB, D, CL> ("clustered", one token, sm_90): mma_st's runs and rings inside thread-block clusters
 * of CL blocks. Each cluster owns an equal run of whole tiles, cut into equal runs of (tile, slice) units over its
 * warps in storage order, as mma_st cuts all units over the grid. A tile whose units are all one warp's is summed in
 * registers; a tile split between warps has each slice's p written straight into the shared memory of the warp that
 * holds its last unit (distributed shared memory), and after one cluster barrier that warp sums them in slice order
 * (mma_w1's bits). Why: mma_st's split-tile finish through global scratch and atomics, after the last unit, was
 * measured at 4.2 of gate+up's 34.6 us and 3.7 of down's 21.6 (mma_st with it removed, H200); here it is one barrier
 * and a few shared-memory reads. A warp completes at most one split tile: the one it entered its run inside, if that
 * one ends in its run (a tile that begins inside the run either ends in it, whole, or is completed by a later warp). */
__device__ __forceinline__ unsigned cluster_smem_addr(const void *local, unsigned rank) {
    unsigned remote = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned a = (unsigned)__cvta_generic_to_shared(local);
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(a), "r"(rank));
#endif
    return remote;
}
__device__ __forceinline__ void cluster_store_f32(unsigned addr, float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(addr), "f"(v) : "memory");
#endif
}
/* The cluster barrier in two halves (whole warps): arrive publishes this thread's shared-memory stores; wait returns
 * once every thread of the cluster that has not exited has arrived, their stores visible. */
__device__ __forceinline__ void cluster_arrive(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_arrive_relaxed(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}
/* An mbarrier in this block's shared memory that completes once `bytes` of st.async stores have landed in it (from
 * the other blocks of the cluster): initialised by one thread before the cluster barrier that every remote store
 * waits behind. */
__device__ __forceinline__ void mbar_init_expect(uint64_t *bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned a = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(a) : "memory");
    asm volatile("mbarrier.arrive.expect_tx.relaxed.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(a), "r"(bytes)
                 : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbar_wait_phase0(uint64_t *bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned a = (unsigned)__cvta_generic_to_shared(bar);
    unsigned done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}\n"
                     : "=r"(done)
                     : "r"(a)
                     : "memory");
#endif
}
/* A 4-byte store into another block's shared memory that counts 4 bytes down on that block's mbarrier (both
 * shared::cluster addresses): no fence, no cluster barrier behind it. */
__device__ __forceinline__ void cluster_store_async_f32(unsigned addr, float v, unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(addr),
                 "r"(__float_as_uint(v)), "r"(bar)
                 : "memory");
#endif
}
/* The split-tile sums of the warp that holds unit `last` of its cluster (units base.., Uc of them over Wc warps):
 * the shared::cluster address of its [S][16] floats. */
template <int WPB>
__device__ __forceinline__ unsigned fp4_cl_sums_of(const float *sums /* [WPB][S][16] of this block */, int last,
                                                   int base, int Uc, int Wc, int Si) {
    const int q = (int)(((int64_t)(last - base + 1) * Wc - 1) / Uc); /* the warp whose run holds `last` */
    return cluster_smem_addr(sums + (size_t)(q % WPB) * Si * 16, (unsigned)(q / WPB));
}

/* Rows g and g + 8 of one tile's sums in shared memory ([S][16] floats, at_g pointing at row g of slice 0), each
 * summed in slice order (mma_w1's bits), as two interleaved chains: a single chain, one row after the other, waited
 * on every add. */
__device__ __forceinline__ void fp4_tile_sums(const float *at_g, int S, float (&acc)[1][2]) {
    acc[0][0] = at_g[0], acc[0][1] = at_g[8];
    for (int i = 1; i < S; i++) acc[0][0] += at_g[i * 16], acc[0][1] += at_g[i * 16 + 8];
}

template <int WPB, int D, int CL, bool PAIR>
__global__ void __launch_bounds__(WPB * 32) fp4_mma_cl(const uint8_t *blocks /* [tiles][S][FP4_BLOCK_BYTES] */,
                                                       const __grid_constant__ fp4_segments seg,
                                                       const float *x /* [K] */, int64_t K, int64_t S, int clusters) {
    cluster_arrive_relaxed(); /* waited on before the first store into another block: every block of the cluster runs */
    /* [WPB][D][FP4_BLOCK_U4] rings, [S][32][4] uint4 and [S] f32 of x, then [WPB][S][16] f32 split-tile sums */
    extern __shared__ uint4 fp4_st_smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, Si = (int)S, g = lane >> 2;
    float *sums = reinterpret_cast<float *>(reinterpret_cast<uint8_t *>(fp4_st_smem) + fp4_ring_smem(WPB, D, true, S));
    const int cl = (int)(blockIdx.x / CL), tiles = (int)seg.tile_begin[seg.count];
    const int base = (int)((int64_t)cl * tiles / clusters) * Si;
    const int Uc = (int)((int64_t)(cl + 1) * tiles / clusters) * Si - base, Wc = CL * WPB;
    const int q = (int)(blockIdx.x % CL) * WPB + warp; /* this warp in its cluster */
    const int u0 = base + (int)((int64_t)q * Uc / Wc), u1 = base + (int)((int64_t)(q + 1) * Uc / Wc);
    const uint4 *next = reinterpret_cast<const uint4 *>(blocks) + (int64_t)u0 * FP4_BLOCK_U4 + lane; /* unit u0 */
    uint4 *ring = fp4_st_smem + (size_t)warp * D * FP4_BLOCK_U4;
    /* The weights are never written by a forward kernel (every upload ends in a device-wide synchronisation), so slot
     * 0's copy goes out before the wait, while the kernel before still runs; the other slots' copies go out behind
     * x's loads (x is that kernel's output), which would otherwise queue behind them. H200, decode at ctx 128, one
     * call: no copy before the wait 164.2 tok/s, every slot 167.4-168.6, slot 0 only 173.4 (tilebench down 52.9 /
     * 51.8 / 53.4 % of read). */
    fp4_run_copies<0, 1>(ring, next, u0, u1, lane);
    pdl_start();
    fp4_xsrc xs = {NULL, NULL};
    const uint2 *xf_lane[1];
    fp4_ring_start<1, WPB, D, true>(fp4_st_smem, x, K, S, 1, 0, lane, xs, xf_lane,
                                    [&] { fp4_run_copies<1, D>(ring, next, u0, u1, lane); });
    cluster_wait();
    float acc[1][2];
    int tile = u0 / Si, s = u0 - tile * Si;
    bool whole = tile * Si >= u0 && tile * Si + Si <= u1;
    unsigned dst = whole ? 0 : fp4_cl_sums_of<WPB>(sums, tile * Si + Si - 1, base, Uc, Wc, Si);
    for (int u = u0, k = 0; u < u1; u++, k = k == D - 1 ? 0 : k + 1) {
        uint4 *slot = ring + k * FP4_BLOCK_U4;
        float p[1][2];
        fp4_slot_p<1, D, true, false>(slot, lane, xf_lane, xs, S, 1, 0, s, p, [&](uint32_t) {
            if (u + D < u1) fp4_copy_slice(slot + lane, next); /* unit u + D */
            next += FP4_BLOCK_U4;
            cp_async_commit();
        });
        if (whole) {
#pragma unroll
            for (int r = 0; r < 2; r++) acc[0][r] = s == 0 ? p[0][r] : acc[0][r] + p[0][r];
            if (s == Si - 1) fp4_store<1, PAIR>(fp4_tile_target(seg, tile), 1, 0, lane, acc);
        } else if ((lane & 3) == 0) { /* lanes 4g hold token 0: rows g, g + 8 */
            cluster_store_f32(dst + (unsigned)(s * 16 + g) * 4, p[0][0]);
            cluster_store_f32(dst + (unsigned)(s * 16 + g + 8) * 4, p[0][1]);
        }
        if (++s == Si) {
            s = 0, tile++, whole = tile * Si >= u0 && tile * Si + Si <= u1;
            if (!whole && tile * Si < u1) dst = fp4_cl_sums_of<WPB>(sums, tile * Si + Si - 1, base, Uc, Wc, Si);
        }
    }
    cp_async_wait<0>();
    cluster_arrive();
    const int first = u0 / Si;
    /* A warp that completes no split tile leaves at once: nothing reads its shared memory, and a block then leaves
     * when its own warps are done (the next launch's block can start on its SM), not its cluster's slowest. */
    if (!(u0 < u1 && first * Si < u0 && first * Si + Si <= u1)) return;
    cluster_wait(); /* every split slice's p is in its completer's shared memory */
    fp4_tile_sums(sums + (size_t)warp * Si * 16 + g, Si, acc);
    fp4_store<1, PAIR>(fp4_tile_target(seg, first), 1, 0, lane, acc);
}

/* Variant mma_ck<WPB, D, EARLY, SLOTS, ASYNC, TAIL, CL> ("clustered, K split", one token, sm_90): as mma_cl, but
 * block r of each cluster takes slices [r·S/CL, (r+1)·S/CL) of every tile its cluster owns, and its warps cut the
 * block's (tile, slice) units into equal runs. So a block prepares only its own slices of x (down_proj: 17 of 34;
 * the x preparation was measured at 3.3 of mma_cl8x3's 20.5 us there, H200). Every unit's p goes into the last block's shared memory (distributed
 * shared memory), [cluster tiles][S·16 + FP4_CK_PAD]; after one cluster barrier that block's warps sum each tile in
 * slice order (mma_w1's bits). EARLY: each slot refilled as soon as it is read (fp4_slot_p). H200, tilebench M = 1,
 * down_proj: fewer copies in flight were faster, 8 x 4 slots 18.4-18.7 us, 8 x 3 early 17.7-17.9, 8 x 3 17.4-17.7,
 * 8 x 2 early 17.0-17.3 (docs/benchmarks.md, session 12); early refill made mma_cl slower everywhere (gate+up 8 x 3
 * 28.5 -> 29.2) and mma_ck8x4 too (18.4 -> 19.1). 17 warps (down's 85 units per block in equal runs of 5) lost
 * (session 15: down 16.7-17.9 us against mma_ck12x2's 16.1).
 * SLOTS: when ring slots 1.. are asked for (slot 0 always goes out before the launch wait).
 * - FP4_CK_WITH_X: by each warp right behind its own x loads.
 * - FP4_CK_AFTER_X: once x is prepared; behind x's loads their 4.6 KB per warp delayed x's return. mma_ck12x2 only:
 *   H200, tilebench M = 1 (session 16), down 16.3 -> 15.8 us, x ready (p50 after the wait) 2.2 -> 1.7 us; mtp_fc
 *   11.3 -> 10.4, gdn_out / attn_o 8.3 -> 7.9, attn_qkv 13.2 -> 12.7; but mma_ck8x2e slower (gate+up 25.8 -> 26.8).
 * - FP4_CK_HOLD: behind every warp's x loads (a block barrier puts them all ahead of the copies), and then unit v0 is
 *   taken from slot 0 into registers and slot 0 refilled with unit v0 + D at once, before x is converted: the ring
 *   has D units in flight through x's preparation instead of D - 1, and a warp's first unit needs no wait. H200,
 *   tilebench M = 1 (session 19, docs/benchmarks.md): down 15.6-15.7 -> 15.1 us (mma_ck12x2 -> mma_ck12x2eh), gdn_in
 *   14.2 -> 13.6-13.8, gdn_out 7.4 -> 7.1, attn_qkv 12.6 -> 12.4 (mma_ck8x2eh); gate+up slower (8x2e 25.0 -> 25.8).
 *   The barrier with ASYNC, no unit held: down 15.5 -> 15.4.
 * ASYNC: the other blocks write their p by st.async, each store counting 4 bytes down on an mbarrier of the last
 * block, which waits on it; so no block ends with a cluster barrier (its release compiled to MEMBAR.ALL.GPU ahead of
 * the arrive) and the other blocks leave as soon as their loops end.
 * TAIL (needs HOLD, WPB >= 4): the block's last unit is cut by chunk step over its last 4 warps, each e_q copied with
 * slot 1 and summed in fp4_slice_mma's order by the last warp after a named barrier: down's 5-tile blocks have 85
 * units over 12 warps, and the one warp with 8 ended ~0.8 us after the others (session 18 timeline). Session 19:
 * down 15.0 -> 14.8-14.9 us; slower on every other shape.
 * Measured and dropped (session 19): 13 warps (down 15.4 -> 16.4 us: one scheduler holds 4 warps, the others 3),
 * 16 warps (15.4-15.6 with HOLD), 3 slots with the barrier (slower), slot 1 by each warp after its own x conversion
 * (a tie). A static __shared__ variable in this kernel (8 bytes for the mbarrier) made every mma_ck variant ~15%
 * slower on the same machine (down 15.4 -> 17.7 us, gate+up 25.1 -> 29.8), so the mbarrier sits in dynamic shared
 * memory past the sums (why it mattered was not measured). Session 20: HOLD with 3 slots, 3 units ahead throughout or
 * through the start only, slower everywhere (down 15.0 -> 15.4-15.6 us); without its decode and mma (a diagnostic
 * build) 12x2eh runs down in 12.8 us, 86.6% of the read bandwidth: the rest is the arithmetic (docs/gemv.md). */
/* A tile's sums in the last block, [S][16] floats, padded by FP4_CK_PAD: the 4 tiles one warp's quad columns sum at
 * once (the end of fp4_mma_ck) then sit in distinct banks. */
#define FP4_CK_PAD 8
enum { FP4_CK_WITH_X, FP4_CK_AFTER_X, FP4_CK_HOLD }; /* mma_ck's SLOTS */
#define FP4_CK_TAIL_U4 96 /* TAIL, per warp: its chunk step's codes of rows g and g + 8 and the scales, 32 uint4 each */
#define FP4_CK_PREP_SLICES 18 /* one round of the x preparation covers this many slices per block (down_proj: 17) */
template <int WPB, int D, bool EARLY, int SLOTS, bool ASYNC, bool TAIL, int CL, bool PAIR>
__global__ void __launch_bounds__(WPB * 32) fp4_mma_ck(const uint8_t *blocks /* [tiles][S][FP4_BLOCK_BYTES] */,
                                                       const __grid_constant__ fp4_segments seg,
                                                       const float *x /* [K] */, int64_t K, int64_t S, int clusters) {
    /* [WPB][D][FP4_BLOCK_U4] rings, [ceil(S/CL)][32][4] uint4 and [ceil(S/CL)] f32 of x, then [tiles of the cluster]
     * [S·16 + FP4_CK_PAD] f32 sums (the last block's are the ones written and read) */
    extern __shared__ uint4 fp4_st_smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, Si = (int)S, g = lane >> 2;
    const int ts = Si * 16 + FP4_CK_PAD; /* floats per tile of sums */
    const int cl = (int)(blockIdx.x / CL), r = (int)(blockIdx.x % CL), tiles = (int)seg.tile_begin[seg.count];
    /* The tiles % clusters larger shares go to the first clusters: blocks start in index order as the launch before
     * frees their SMs, so the last clusters start last, the very last one often only once the launch wait returns
     * (without its ring's slot 0 ahead). With the larger shares spread evenly, that cluster ended its loop ~1.5 us
     * after the others and set the launch's end; given a smaller share, it ends with them. H200 (docs/benchmarks.md,
     * session 18): decode 195.0 -> 197.9 tok/s, tilebench M = 1 gdn_out 7.9 -> 7.5 us, gate+up 25.2 -> 24.9, down
     * 15.6 -> 15.4-15.5. */
    const int share = tiles / clusters, larger = tiles % clusters;
    const int t0 = cl * share + (cl < larger ? cl : larger), nt = share + (cl < larger ? 1 : 0);
    const int sa = r * Si / CL, Sb = (r + 1) * Si / CL - sa, Ub = nt * Sb; /* this block's slices and units */
    /* this warp's run of them; TAIL: the block's last unit is cut by chunk step over the last 4 warps */
    const int v0 = warp * Ub / WPB, v1 = (warp + 1) * Ub / WPB - (TAIL && warp == WPB - 1 ? 1 : 0);
    uint4 *ring = fp4_st_smem + (size_t)warp * D * FP4_BLOCK_U4;
    float *sums = reinterpret_cast<float *>(reinterpret_cast<uint8_t *>(fp4_st_smem) +
                                            fp4_ring_smem(WPB, D, true, (S + CL - 1) / CL));
    /* ASYNC: the mbarrier that counts the other blocks' p in, 8-aligned past the largest cluster's sums */
    uint64_t *sums_bar = reinterpret_cast<uint64_t *>(
        ((uintptr_t)(sums + (size_t)((tiles + clusters - 1) / clusters) * ts) + 7) & ~(uintptr_t)7);
    const unsigned sums_at = cluster_smem_addr(sums, CL - 1), bar_at = cluster_smem_addr(sums_bar, CL - 1);
    /* TAIL: [4 warps][FP4_CK_TAIL_U4] uint4 of the block's last unit, 16-aligned past sums_bar, then their e (an offset
     * from fp4_st_smem, not an aligned address: so the compiler still knows it for shared memory and uses LDS / STS) */
    uint4 *tail_buf = reinterpret_cast<uint4 *>(reinterpret_cast<uint8_t *>(fp4_st_smem) + 16 * ((uintptr_t)
        (reinterpret_cast<uint8_t *>(sums_bar + 1) - reinterpret_cast<uint8_t *>(fp4_st_smem) + 15) / 16));
    float2 *tail_e = reinterpret_cast<float2 *>(tail_buf + 4 * FP4_CK_TAIL_U4); /* [4][32] */
    const int tj = warp - (WPB - 4); /* TAIL: this warp's chunk step, if >= 0 */
    /* ASYNC: the other blocks store their p by st.async, 64 bytes per unit, counted on sums_bar */
    if (ASYNC && r == CL - 1 && threadIdx.x == 0) mbar_init_expect(sums_bar, (unsigned)(nt * sa * 64));
    cluster_arrive_relaxed(); /* waited on before the first store into another block: every block of the cluster runs */
    static_assert(!TAIL || (SLOTS == FP4_CK_HOLD && WPB >= 4), "TAIL's copies go out with HOLD's, over 4 warps");
    /* the copy head: unit cv of the run (tile t0 + ct, slice cs) at next, into slot ck */
    int cv = v0, ct = v0 / Sb, cs = sa + v0 % Sb, ck = 0;
    const uint4 *next = reinterpret_cast<const uint4 *>(blocks) + ((int64_t)(t0 + ct) * Si + cs) * FP4_BLOCK_U4 + lane;
    /* 0 at run time (clusters < 2^30) but not to the compiler: words & never ties a refill to the slot's loads */
    const uint32_t never = (uint32_t)clusters >> 30;
    auto copy_next = [&](uint32_t words) {
        if (cv < v1) fp4_copy_slice(ring + ck * FP4_BLOCK_U4 + lane + (words & never), next);
        cp_async_commit();
        cv++, ck = ck == D - 1 ? 0 : ck + 1, next += FP4_BLOCK_U4;
        if (++cs == sa + Sb) cs = sa, next += (int64_t)(Si - Sb) * FP4_BLOCK_U4;
    };
    copy_next(0); /* slot 0 before the wait, as mma_cl (the weights are written only at load) */
    pdl_start();
    auto copy_slots_after_0 = [&] {
#pragma unroll
        for (int j = 1; j < D; j++) copy_next(0);
    };
    fp4_slice_regs cur0; /* HOLD: unit v0, out of slot 0 while x is prepared */
    auto after_x_loads = [&] { /* each warp, once its x loads are in flight */
        if (SLOTS == FP4_CK_WITH_X) copy_slots_after_0();
        if (SLOTS != FP4_CK_HOLD) return;
        __syncthreads(); /* every warp's x loads ahead of any copy */
        if (TAIL && tj >= 0 && Ub > 0) { /* in slot 1's commit group: chunk step tj of the block's last unit */
            const uint4 *last =
                reinterpret_cast<const uint4 *>(blocks) + ((int64_t)(t0 + nt - 1) * Si + sa + Sb - 1) * FP4_BLOCK_U4;
            const uint64_t policy = l2_evict_first();
            uint4 *mine = tail_buf + tj * FP4_CK_TAIL_U4 + lane;
            cp_async16_stream(mine, last + tj * 32 + lane, policy);
            cp_async16_stream(mine + 32, last + (4 + tj) * 32 + lane, policy);
            cp_async16_stream(mine + 64, last + 256 + lane, policy);
        }
        copy_slots_after_0();
        if (v0 < v1) {
            cp_async_wait<D - 1>(); /* slot 0, asked for before the launch wait, has landed */
            fp4_load_slice<false>(cur0, ring, lane);
            copy_next(fp4_slice_words(cur0)); /* unit v0 + D into slot 0 */
        }
    };
    uint4 *xsh = fp4_st_smem + (size_t)WPB * D * FP4_BLOCK_U4;
    fp4_prep_block<(FP4_CK_PREP_SLICES + WPB - 1) / WPB>(x + (int64_t)sa * FP4_SLICE, K - (int64_t)sa * FP4_SLICE, Sb,
                                                          xsh, reinterpret_cast<float *>(xsh + Sb * 128),
                                                          after_x_loads);
    if (SLOTS == FP4_CK_AFTER_X) copy_slots_after_0();
    const fp4_xsrc xs = {xsh, reinterpret_cast<const float *>(xsh + Sb * 128)};
    const uint2 *xf_lane[1];
    fp4_x_lanes<1, true>(xs, Sb, 1, 0, lane, xf_lane);
    cluster_wait();
    int lt = v0 / Sb, s = v0 % Sb; /* the unit being consumed: tile t0 + lt, slice sa + s */
    auto put_p = [&](const float (&p)[1][2]) {
        if ((lane & 3) == 0) { /* lanes 4g hold token 0: rows g, g + 8 */
            const unsigned at = sums_at + (unsigned)((lt * ts + (sa + s) * 16 + g) * 4);
            if (ASYNC && r != CL - 1) {
                cluster_store_async_f32(at, p[0][0], bar_at);
                cluster_store_async_f32(at + 32, p[0][1], bar_at);
            } else if (ASYNC) { /* into this block's own sums, ordered for its warps by the barrier at the end */
                float *own = sums + lt * ts + (sa + s) * 16 + g;
                own[0] = p[0][0], own[8] = p[0][1];
            } else {
                cluster_store_f32(at, p[0][0]);
                cluster_store_f32(at + 32, p[0][1]);
            }
        }
        if (++s == Sb) s = 0, lt++;
    };
    int v = v0, k = 0;
    if (SLOTS == FP4_CK_HOLD && v < v1) { /* unit v0, in registers since x's preparation */
        const uint2 *xf_s[1];
        float xsc[1], p[1][2];
        fp4_x_slice<1, true>(xf_lane, xs, Sb, 1, 0, s, lane, xf_s, xsc);
        fp4_slice_mma<1, true>(cur0, xf_s, xsc, p);
        put_p(p);
        v++, k = 1 % D;
    }
    for (; v < v1; v++, k = k == D - 1 ? 0 : k + 1) {
        float p[1][2];
        fp4_slot_p<1, D, true, EARLY>(ring + k * FP4_BLOCK_U4, lane, xf_lane, xs, Sb, 1, 0, s, p,
                                      copy_next); /* unit v + D */
        put_p(p);
    }
    cp_async_wait<0>();
    if (TAIL && tj >= 0 && Ub > 0) { /* the block's last unit (tile t0 + nt - 1, slice sa + Sb - 1), chunk step tj */
        const uint2 *xf_s[1];
        float xsc[1], e[2];
        fp4_x_slice<1, true>(xf_lane, xs, Sb, 1, 0, Sb - 1, lane, xf_s, xsc);
        const uint4 *mine = tail_buf + tj * FP4_CK_TAIL_U4 + lane;
        switch (tj) {
        case 0: fp4_chunk_e<0>(mine[0], mine[32], mine[64], xf_s[0], e); break;
        case 1: fp4_chunk_e<1>(mine[0], mine[32], mine[64], xf_s[0], e); break;
        case 2: fp4_chunk_e<2>(mine[0], mine[32], mine[64], xf_s[0], e); break;
        default: fp4_chunk_e<3>(mine[0], mine[32], mine[64], xf_s[0], e); break;
        }
        tail_e[tj * 32 + lane] = make_float2(e[0], e[1]);
        asm volatile("bar.sync 1, 128;\n" ::: "memory"); /* the 4 warps' e */
        if (tj == 3) { /* the last warp: its run ended just before this unit, so lt, s point at it */
            const float2 *te = tail_e + lane;
            float p[1][2];
            p[0][0] = ((te[0].x + te[32].x) + (te[64].x + te[96].x)) * xsc[0];
            p[0][1] = ((te[0].y + te[32].y) + (te[64].y + te[96].y)) * xsc[0];
            put_p(p);
        }
    }
    if (ASYNC) {
        if (r != CL - 1) return; /* its stores are counted on sums_bar; nothing reads this block's shared memory */
        __syncthreads();         /* this block's own p */
        mbar_wait_phase0(sums_bar); /* the other blocks' */
    } else {
        cluster_arrive();
        if (r != CL - 1) return; /* nothing reads this block's shared memory */
        cluster_wait();          /* every unit's p is in this block's shared memory */
    }
    /* Quad column c of warp w sums tile 4w + c (then 4(w + WPB) + c, ...): four tiles per warp at once. One tile per
     * warp (before session 15) left 3 of every 4 lanes idle: H200, tilebench M = 1, gate+up with mma_ck8x2e (33
     * tiles per cluster) 26.3 -> 25.2 us, 83.0 -> 86.6% of the read bandwidth (docs/benchmarks.md, session 15). */
    for (int j = 4 * warp + (lane & 3); j - (lane & 3) < nt; j += 4 * WPB) {
        if (j >= nt) continue;
        float acc[1][2];
        fp4_tile_sums(sums + (size_t)j * ts + g, Si, acc);
        fp4_store<1, PAIR>(fp4_tile_target(seg, t0 + j), 1, 0, lane & ~3, acc); /* lane & ~3: as token 0's lane */
    }
}

/* Variant mma_il<WPB, D> ("interleaved"): each block owns an equal run of whole tiles, and its warps take the block's
 * (slice, tile) units in turn, slice after slice (warp w: units w, w + WPB, ...), streamed through mma_st's rings. So
 * at any moment a block's warps work on one or two slices, and at T > 1 those slices' x fragments (16 KB per slice
 * for 8 tokens, read from global memory) are reused from L1 by all of them; mma_st's warps each stream their own
 * run and touch every slice at once. Every unit's p goes to the split-tile scratch; after a block barrier each warp
 * sums its share of the block's tiles in slice order (mma_w1's bits), with no atomics. */
template <int NT, int WPB, int D, bool SX, bool PAIR>
__global__ void __launch_bounds__(WPB * 32) fp4_mma_il(const uint8_t *blocks /* [tiles][S][FP4_BLOCK_BYTES] */,
                                                       const __grid_constant__ fp4_segments seg, fp4_xsrc xs,
                                                       const float *x /* SX: [K] */, int64_t K, int64_t S, int T,
                                                       int t0, float *part /* [tiles · S][tp][16] */) {
    pdl_start();
    extern __shared__ uint4 fp4_st_smem[]; /* [WPB][D][FP4_BLOCK_U4] rings, then SX: [S][32][4] uint4, [S] f32 */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, Si = (int)S;
    const int tiles = (int)seg.tile_begin[seg.count];
    const int tb0 = (int)((int64_t)blockIdx.x * tiles / gridDim.x);
    const int nt = (int)((int64_t)(blockIdx.x + 1) * tiles / gridDim.x) - tb0, units = nt * Si;
    const uint4 *blocks_lane = reinterpret_cast<const uint4 *>(blocks) + lane;
    uint4 *ring = fp4_st_smem + (size_t)warp * D * FP4_BLOCK_U4;
    /* the block's unit j is (slice j / nt, tile tb0 + j % nt); the warp's fill and compute positions step by WPB */
    auto step = [&](int &s, int &t) {
        for (t += WPB; t >= nt; t -= nt) s++;
    };
    int fill_s = warp / nt, fill_t = warp - fill_s * nt;
    auto copy_next = [&](uint4 *slot) {
        fp4_copy_slice(slot + lane, blocks_lane + ((int64_t)(tb0 + fill_t) * Si + fill_s) * FP4_BLOCK_U4);
        step(fill_s, fill_t);
    };
    auto start_copies = [&] {
#pragma unroll
        for (int j = 0; j < D; j++) { /* one commit group per slot, empty past the block's units */
            if (warp + j * WPB < units) copy_next(ring + j * FP4_BLOCK_U4);
            cp_async_commit();
        }
    };
    const uint2 *xf_lane[NT];
    fp4_ring_start<NT, WPB, D, SX>(fp4_st_smem, x, K, S, T, t0, lane, xs, xf_lane, start_copies);
    const int tp = T - t0 < 4 * NT ? T - t0 : 4 * NT;
    int s = warp / nt, t = warp - s * nt, k = 0;
    for (int j = warp; j < units; j += WPB, k = k == D - 1 ? 0 : k + 1) {
        uint4 *slot = ring + k * FP4_BLOCK_U4;
        float p[NT][2];
        fp4_slot_p<NT, D, SX, false>(slot, lane, xf_lane, xs, S, T, t0, s, p, [&](uint32_t) {
            if (j + D * WPB < units) copy_next(slot);
            cp_async_commit();
        });
        fp4_part_store<NT>(part, (int64_t)(tb0 + t) * Si + s, tp, lane, p);
        step(s, t);
    }
    cp_async_wait<0>();
    __syncthreads(); /* every warp's p stored: the block's global writes are visible to all its threads */
    for (int tile = tb0 + warp; tile < tb0 + nt; tile += WPB) fp4_part_total<NT, PAIR>(part, seg, tile, S, T, t0, lane);
}

/* Variant mma_gemm (T ≥ 16; below it mma_w1 runs): a block of GEMM_WARPS tile warps and GEMM_TOKENS tokens, the
 * tokens fastest in the grid (the blocks of one row block run together and share its weights in L2). Why: the other
 * variants read x's fragments from L2 in every tile warp, so at M = 256 the fragments (5 MB for K = 5120) were read
 * once per tile, ~11 GB for gate+up (1.27 ms measured, session 3), and they re-read the weights once per pass of 16
 * tokens. Here each slice's fragments of the block's tokens are copied to shared memory once (cp.async, double
 * buffered) for all its warps, and each weight slice, loaded into registers once, serves GEMM_TOKENS / 16 passes
 * (16 tokens: 183 registers, no spills; 32 tokens compiled to 255 registers with spills, sm_90a, nvcc 13.0); the
 * weights' re-reads per token block come from L2 while that row block's token blocks run together.
 * Every (row, token) is summed in mma_w1's order (fp4_slice_mma per pass and slice, slices added in order), so the
 * bits are mma_w1's (test_cuda_ops checks it like every variant). H200: TTFT at ctx 128 119 -> 85 ms. */
#define GEMM_WARPS 8
#define GEMM_TOKENS 16
#define GEMM_PASSES (GEMM_TOKENS / 16)    /* passes of 16 tokens (4 token tiles) */
#define GEMM_GROUPS (GEMM_TOKENS / 8)     /* fp4_prep_x's token groups */
#define GEMM_SLICE_U4 (GEMM_GROUPS * 1024) /* one slice of the block's fragments: [group][4 q][8 i][32 lanes] */
template <bool PAIR>
__global__ void __launch_bounds__(GEMM_WARPS * 32, 1) fp4_mma_gemm(const uint8_t *blocks /* [tiles][S][FP4_BLOCK_BYTES] */,
                                                                    const __grid_constant__ fp4_segments seg,
                                                                    fp4_xsrc xs, int64_t S, int T) {
    pdl_start();
    extern __shared__ uint4 gemm_xs[]; /* [2][GEMM_SLICE_U4]: slices s and s + 1 */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, c = lane & 3;
    const int TB = (T + GEMM_TOKENS - 1) / GEMM_TOKENS;
    const int t_base = (int)(blockIdx.x % TB) * GEMM_TOKENS;
    const int64_t tile = (int64_t)(blockIdx.x / TB) * GEMM_WARPS + warp;
    const bool has_tile = tile < seg.tile_begin[seg.count];
    const uint8_t *tile_blocks = blocks + (size_t)(has_tile ? tile : 0) * S * FP4_BLOCK_BYTES;
    /* slice s's fragments of this block's groups into buffer b; a group past T copies the last one (fp4_x_lanes' rule:
     * those columns are never stored) */
    auto stage = [&](int64_t s, int b) {
        for (int j = threadIdx.x; j < GEMM_SLICE_U4; j += GEMM_WARPS * 32) {
            int grp = t_base / 8 + j / 1024;
            if (grp * 8 >= T) grp = (T - 1) / 8;
            cp_async16(gemm_xs + b * GEMM_SLICE_U4 + j, xs.xf + ((int64_t)grp * S + s) * 1024 + j % 1024);
        }
        cp_async_commit();
    };
    stage(0, 0);
    float acc[GEMM_PASSES][4][2];
    for (int64_t s = 0; s < S; s++) {
        const int b = (int)(s & 1);
        fp4_slice_regs cur; /* the weights first: they do not wait for the barrier */
        if (has_tile)
            fp4_load_slice<true>(cur, reinterpret_cast<const uint4 *>(tile_blocks + (size_t)s * FP4_BLOCK_BYTES), lane);
        if (s + 1 < S) {
            stage(s + 1, b ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); /* slice s's fragments are in buffer b for every warp */
        if (has_tile) {
#pragma unroll
            for (int pp = 0; pp < GEMM_PASSES; pp++) {
                const uint2 *xf_s[4];
                float xsc[4], p[4][2];
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    const int grp = (16 * pp + 4 * nt) / 8, tok = t_base + 16 * pp + 4 * nt + c;
                    xf_s[nt] = reinterpret_cast<const uint2 *>(gemm_xs + b * GEMM_SLICE_U4 + grp * 1024 + lane) + (nt & 1);
                    xsc[nt] = tok >= T ? 0.0f : __ldg(xs.xscale + (size_t)tok * S + s);
                }
                fp4_slice_mma<4, false, true>(cur, xf_s, xsc, p);
#pragma unroll
                for (int nt = 0; nt < 4; nt++)
#pragma unroll
                    for (int r = 0; r < 2; r++) acc[pp][nt][r] = s == 0 ? p[nt][r] : acc[pp][nt][r] + p[nt][r];
            }
        }
        __syncthreads(); /* buffer b is read by every warp before slice s + 2 is staged into it */
    }
    if (!has_tile) return;
    const fp4_tile_out o = fp4_tile_target(seg, tile);
#pragma unroll
    for (int pp = 0; pp < GEMM_PASSES; pp++) fp4_store<4, PAIR>(o, T, t_base + 16 * pp, lane, acc[pp]);
}

/* x fragments, grown on demand like xp_buf. */
static uint4 *xf_buf = NULL;
static size_t xf_cap = 0; /* bytes, fragments then scales */

/* One linear as a single segment. */
static fp4_segments fp4_one_segment(const qrt_linear *W, float *y) {
    fp4_segments seg;
    memset(&seg, 0, sizeof seg);
    seg.count = 1;
    seg.tile_begin[1] = (W->n + 15) / 16;
    seg.rows[0] = W->n;
    seg.scale2[0] = W->scale2;
    seg.y[0] = y;
    return seg;
}

/* x [T][K] → xf_buf fragments and slice scales (fp4_prep_x); returns the scales. */
static float *fp4_prepare_x(const float *x, int64_t K, int T, int64_t S) {
    const int64_t TG = (T + 7) / 8;
    const size_t frag_bytes = (size_t)TG * S * 4 * 8 * 32 * sizeof(uint4), bytes = frag_bytes + sizeof(float) * T * S;
    if (bytes > xf_cap) {
        if (xf_buf) QRT_CUDA_CHECK(cudaFree(xf_buf));
        xf_cap = bytes < ((size_t)1 << 22) ? ((size_t)1 << 22) : bytes;
        QRT_CUDA_CHECK(cudaMalloc(&xf_buf, xf_cap));
        /* entries of tokens past T are read (into D columns never stored): keep them finite and initialized */
        QRT_CUDA_CHECK(cudaMemset(xf_buf, 0, xf_cap));
        qrt_cuda_scratch_moved();
    }
    float *xscale = reinterpret_cast<float *>(reinterpret_cast<char *>(xf_buf) + frag_bytes);
    QRT_LAUNCH(fp4_prep_x, qrt_grid((size_t)T * S * 32, 256), 256, 0, x, K, T, S, xf_buf, xscale);
    return xscale;
}

/* Dynamic shared memory above 48 KB needs the kernel's opt-in, once per size. False (nothing set) when smem is more
 * than a block may opt in to. */
/* The most dynamic shared memory one block may opt in to on device 0 (asked once). */
static size_t smem_optin(void) {
    static int n = 0;
    if (!n) QRT_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    return (size_t)n;
}
template <typename K> static bool fp4_smem_opt_in(K kernel, size_t smem, size_t &granted) {
    if (smem <= granted || smem <= 48 * 1024) return true;
    if (smem > smem_optin()) return false;
    QRT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    granted = smem;
    return true;
}

template <int NT, int TPB, bool SX, bool PAIR>
static void launch_w1(const uint8_t *blocks, const fp4_segments &seg, const fp4_xsrc &xs, const float *x, int64_t K,
                      int64_t S, int T) {
    const size_t smem = SX ? fp4_sx_bytes(S) : 0;
    static size_t granted = 0;
    const bool fits = fp4_smem_opt_in(fp4_mma_w1<NT, TPB, SX, PAIR>, smem, granted);
    QRT_ASSERT(fits); /* x's shared copy: ~2 KB per 512 of K */
    QRT_LAUNCH(fp4_mma_w1<NT, TPB, SX, PAIR>, qrt_grid((size_t)seg.tile_begin[seg.count], TPB), TPB * 32, smem, blocks,
               seg, xs, x, K, S, T);
}

template <int NT, int WK, bool SX, bool PAIR>
static void launch_k(const uint8_t *blocks, const fp4_segments &seg, const fp4_xsrc &xs, const float *x, int64_t K,
                     int64_t S, int T) {
    const size_t smem = (size_t)S * NT * 2 * 32 * sizeof(float) + (SX ? fp4_sx_bytes(S) : 0);
    static size_t granted = 0;
    const bool fits = fp4_smem_opt_in(fp4_mma_k<NT, WK, SX, PAIR>, smem, granted);
    QRT_ASSERT(fits);
    QRT_LAUNCH(fp4_mma_k<NT, WK, SX, PAIR>, (unsigned)seg.tile_begin[seg.count], WK * 32, smem, blocks, seg, xs, x, K,
               S, T);
}

/* mma_st's split-tile scratch (fp4_st_work), grown on demand like xf_buf: part floats, done counters (zeroed). */
static float *st_part = NULL;
static unsigned *st_done = NULL;
static size_t st_part_cap = 0, st_done_cap = 0;

static void fp4_st_scratch(int64_t units, int tp, int64_t tiles) {
    const size_t part = (size_t)units * tp * 16, done = (size_t)tiles;
    if (part > st_part_cap) {
        if (st_part) QRT_CUDA_CHECK(cudaFree(st_part));
        st_part_cap = part;
        QRT_CUDA_CHECK(cudaMalloc(&st_part, sizeof(float) * part));
        qrt_cuda_scratch_moved();
    }
    if (done > st_done_cap) {
        if (st_done) QRT_CUDA_CHECK(cudaFree(st_done));
        st_done_cap = done;
        QRT_CUDA_CHECK(cudaMalloc(&st_done, sizeof(unsigned) * done));
        /* zero once: every launch leaves them at zero (a split tile's finishing warp resets its counter), which graph
         * replays rely on */
        QRT_CUDA_CHECK(cudaMemset(st_done, 0, sizeof(unsigned) * done));
        qrt_cuda_scratch_moved();
    }
}

/* The grid of a ring kernel: how many blocks (cl = 1) or clusters of cl blocks of `kernel` (threads each, smem bytes
 * of dynamic shared memory) fit on the GPU at once, at most `most`; 0 when not one fits. The calculator's answer is
 * kept per kernel (in the caller's static) for the last smem it was asked about. */
typedef struct {
    size_t granted, smem;
    int resident; /* blocks or clusters on the GPU at once */
} fp4_occupancy;
template <typename F>
static int64_t fp4_resident(F kernel, int threads, size_t smem, int cl, fp4_occupancy &o, int64_t most) {
    if (!fp4_smem_opt_in(kernel, smem, o.granted)) return 0;
    if (smem != o.smem) {
        if (cl == 1) {
            int per_sm = 0;
            QRT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
            o.resident = per_sm * sm_count();
        } else {
            cudaLaunchAttribute cluster = qrt_cluster_attr(cl);
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3((unsigned)(cl * sm_count())), cfg.blockDim = dim3((unsigned)threads);
            cfg.dynamicSmemBytes = smem, cfg.attrs = &cluster, cfg.numAttrs = 1;
            QRT_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&o.resident, kernel, &cfg));
        }
        o.smem = smem;
    }
    return QRT_MIN((int64_t)o.resident, most);
}

/* mma_st: as many blocks as fit at once (measured by the occupancy calculator for this shared-memory size), never
 * more warps than units; one launch per pass of 4·NT tokens. Returns false when not even one block fits (a K so long
 * that the ring and the x copy exceed shared memory): the caller runs mma_w1, which gives the same bits. */
template <int NT, int WPB, int D, bool SX, bool PAIR>
static bool launch_st(const uint8_t *blocks, const fp4_segments &seg, const fp4_xsrc &xs, const float *x, int64_t K,
                      int64_t S, int T) {
    const size_t smem = fp4_ring_smem(WPB, D, SX, S);
    const int64_t tiles = seg.tile_begin[seg.count], units = tiles * S;
    static fp4_occupancy occ;
    const int64_t grid =
        fp4_resident(fp4_mma_st<NT, WPB, D, SX, PAIR>, WPB * 32, smem, 1, occ, (units + WPB - 1) / WPB);
    if (grid < 1) return false;
    fp4_st_scratch(units, QRT_MIN(T, 4 * NT), tiles);
    QRT_ASSERT(units < INT32_MAX); /* the kernel's unit bookkeeping is 32-bit */
    const fp4_st_work st = {units, grid * WPB, st_part, st_done};
    for (int t0 = 0; t0 < T; t0 += 4 * NT)
        QRT_LAUNCH(fp4_mma_st<NT, WPB, D, SX, PAIR>, (unsigned)grid, WPB * 32, smem, blocks, seg, xs, x, K, S, T, t0,
                   st);
    return true;
}

/* mma_il: as many blocks as fit at once, never more than tiles (a block owns whole tiles); one launch per pass. */
template <int NT, int WPB, int D, bool SX, bool PAIR>
static bool launch_il(const uint8_t *blocks, const fp4_segments &seg, const fp4_xsrc &xs, const float *x, int64_t K,
                      int64_t S, int T) {
    const size_t smem = fp4_ring_smem(WPB, D, SX, S);
    const int64_t tiles = seg.tile_begin[seg.count], units = tiles * S;
    static fp4_occupancy occ;
    const int64_t grid = fp4_resident(fp4_mma_il<NT, WPB, D, SX, PAIR>, WPB * 32, smem, 1, occ, tiles);
    if (grid < 1) return false;
    fp4_st_scratch(units, QRT_MIN(T, 4 * NT), tiles);
    QRT_ASSERT(units < INT32_MAX); /* the kernel's unit bookkeeping is 32-bit */
    for (int t0 = 0; t0 < T; t0 += 4 * NT)
        QRT_LAUNCH(fp4_mma_il<NT, WPB, D, SX, PAIR>, (unsigned)grid, WPB * 32, smem, blocks, seg, xs, x, K, S, T, t0,
                   st_part);
    return true;
}

/* mma_cl: as many clusters as fit on the GPU at once (the occupancy calculator's answer for clusters of CL), never
 * more than tiles; one token only. Returns false below sm_90, above one token, or when a block does not fit: the
 * caller runs mma_w1, which gives the same bits. */
template <int WPB, int D, int CL, bool PAIR>
static bool launch_cl(const uint8_t *blocks, const fp4_segments &seg, const float *x, int64_t K, int64_t S, int T) {
    if (T != 1 || compute_major() < 9) return false;
    const size_t smem = fp4_ring_smem(WPB, D, true, S) + (size_t)WPB * S * 16 * sizeof(float);
    const int64_t tiles = seg.tile_begin[seg.count];
    static fp4_occupancy occ;
    const int clusters = (int)fp4_resident(fp4_mma_cl<WPB, D, CL, PAIR>, WPB * 32, smem, CL, occ, tiles);
    if (clusters < 1) return false;
    QRT_ASSERT(tiles * S < INT32_MAX); /* the kernel's unit bookkeeping is 32-bit */
    QRT_LAUNCH_CLUSTER(CL, fp4_mma_cl<WPB, D, CL, PAIR>, (unsigned)(clusters * CL), WPB * 32, smem, blocks, seg, x, K,
                       S, clusters);
    return true;
}

/* mma_ck's shared memory at up to `tiles_per_cluster` tiles per cluster. */
static size_t fp4_ck_smem(int WPB, int D, int CL, int64_t S, int64_t tiles_per_cluster, size_t extra) {
    return fp4_ring_smem(WPB, D, true, (S + CL - 1) / CL) +
           (size_t)tiles_per_cluster * (S * 16 + FP4_CK_PAD) * sizeof(float) + extra;
}
/* What ASYNC's mbarrier and TAIL's last unit (its 4 chunk steps' codes and scales, their e) add. */
static size_t fp4_ck_extra(bool async, bool tail) {
    return (async || tail ? 16 : 0) + (tail ? 16 + 4 * FP4_CK_TAIL_U4 * sizeof(uint4) + 4 * 32 * sizeof(float2) : 0);
}
/* The same when the clusters fill the GPU, one block per SM (the fewest tiles per cluster): the least it can need. */
static size_t fp4_ck_smem_full(int WPB, int D, int CL, int64_t S, int64_t tiles, size_t extra) {
    const int64_t fit = QRT_MIN(tiles, (int64_t)(sm_count() / CL));
    return fp4_ck_smem(WPB, D, CL, S, (tiles + fit - 1) / fit, extra);
}
/* The mma_ck variants' shapes (nvfp4 9.., in order): warps per block, ring slots, early refill (EARLY), when slots 1..
 * are asked for (SLOTS), p by st.async (ASYNC) and the last unit cut (TAIL), read by their launches and their fit
 * check alike; blocks per cluster. */
static constexpr int fp4_ck_shape[6][6] = {
    {8, 3, 0, FP4_CK_WITH_X, 0, 0}, {8, 2, 1, FP4_CK_WITH_X, 0, 0}, {12, 2, 0, FP4_CK_AFTER_X, 0, 0},
    {8, 2, 1, FP4_CK_HOLD, 1, 0},   {12, 2, 1, FP4_CK_HOLD, 1, 0},  {12, 2, 1, FP4_CK_HOLD, 1, 1}};
#define FP4_CK_CL 2
/* mma_ck: as many clusters as fit at once, never more than tiles; one token only. Returns false as launch_cl does, and
 * when the cluster's sums do not fit beside the ring (lm_head): the caller runs mma_w1. */
template <int WPB, int D, bool EARLY, int SLOTS, bool ASYNC, bool TAIL, int CL, bool PAIR>
static bool launch_ck(const uint8_t *blocks, const fp4_segments &seg, const float *x, int64_t K, int64_t S, int T) {
    if (T != 1 || compute_major() < 9) return false;
    const int64_t tiles = seg.tile_begin[seg.count];
    const auto kernel = fp4_mma_ck<WPB, D, EARLY, SLOTS, ASYNC, TAIL, CL, PAIR>;
    static fp4_occupancy occ;
    const size_t extra = fp4_ck_extra(ASYNC, TAIL);
    size_t smem = fp4_ck_smem_full(WPB, D, CL, S, tiles, extra);
    int clusters = (int)fp4_resident(kernel, WPB * 32, smem, CL, occ, tiles);
    if (clusters >= 1 && fp4_ck_smem(WPB, D, CL, S, (tiles + clusters - 1) / clusters, extra) > smem) {
        smem = fp4_ck_smem(WPB, D, CL, S, (tiles + clusters - 1) / clusters, extra); /* fewer fit: more tiles each */
        const int again = (int)fp4_resident(kernel, WPB * 32, smem, CL, occ, tiles);
        clusters = again >= clusters ? clusters : 0;
    }
    if (clusters < 1) return false;
    QRT_ASSERT(tiles * S < INT32_MAX); /* the kernel's unit bookkeeping is 32-bit */
    QRT_LAUNCH_CLUSTER(CL, kernel, (unsigned)(clusters * CL), WPB * 32, smem, blocks, seg, x, K, S, clusters);
    return true;
}

template <bool PAIR>
static void launch_gemm(const uint8_t *blocks, const fp4_segments &seg, const fp4_xsrc &xs, int64_t S, int T) {
    const size_t smem = 2 * GEMM_SLICE_U4 * sizeof(uint4);
    static size_t granted = 0;
    const bool fits = fp4_smem_opt_in(fp4_mma_gemm<PAIR>, smem, granted);
    QRT_ASSERT(fits); /* 64 KB: every GPU this builds for has it */
    const int64_t row_blocks = (seg.tile_begin[seg.count] + GEMM_WARPS - 1) / GEMM_WARPS;
    const int64_t grid = row_blocks * ((T + GEMM_TOKENS - 1) / GEMM_TOKENS);
    QRT_LAUNCH(fp4_mma_gemm<PAIR>, (unsigned)grid, GEMM_WARPS * 32, smem, blocks, seg, xs, S, T);
}

/* The variants by index (the tune cache and QRT_NVFP4_VARIANT use the indices; new ones go at the end; the cache
 * file's name carries the count, so replacing one (9 was mma_ck8x4 until 2026-12-02, a 10-variant set) changes it). */
enum {
    FP4_W1, FP4_K4, FP4_K4_SX, FP4_ST12X2, FP4_ST16X2, FP4_GEMM, FP4_IL12X2, FP4_CL12X2, FP4_CL8X3, FP4_CK8X3,
    FP4_CK8X2E, FP4_CK12X2, FP4_CK8X2EH, FP4_CK12X2EH, FP4_CK12X2EHT, FP4_VARIANTS
};
static const char *const fp4_variant_names[FP4_VARIANTS] = {
    "mma_w1",     "mma_k4",    "mma_k4_sx", "mma_st12x2", "mma_st16x2", "mma_gemm",
    "mma_il12x2", "mma_cl12x2", "mma_cl8x3", "mma_ck8x3",  "mma_ck8x2e", "mma_ck12x2",
    "mma_ck8x2eh", "mma_ck12x2eh", "mma_ck12x2eht"};

template <int I, bool PAIR> /* mma_ck variant 9 + I */
static bool launch_ck_v(const uint8_t *blocks, const fp4_segments &seg, const float *x, int64_t K, int64_t S, int T) {
    return launch_ck<fp4_ck_shape[I][0], fp4_ck_shape[I][1], fp4_ck_shape[I][2] != 0, fp4_ck_shape[I][3],
                     fp4_ck_shape[I][4] != 0, fp4_ck_shape[I][5] != 0, FP4_CK_CL, PAIR>(blocks, seg, x, K, S, T);
}
template <int WPB, int D, bool PAIR>
static bool launch_il_t(const uint8_t *blocks, const fp4_segments &seg, const fp4_xsrc &xs, const float *x, int64_t K,
                        int64_t S, int T, bool sx) {
    if (sx) return launch_il<1, WPB, D, true, PAIR>(blocks, seg, xs, x, K, S, T);
    if (T <= 4) return launch_il<1, WPB, D, false, PAIR>(blocks, seg, xs, x, K, S, T);
    return launch_il<2, WPB, D, false, PAIR>(blocks, seg, xs, x, K, S, T);
}
template <int WPB, int D, bool PAIR>
static bool launch_st_t(const uint8_t *blocks, const fp4_segments &seg, const fp4_xsrc &xs, const float *x, int64_t K,
                        int64_t S, int T, bool sx) {
    if (sx) return launch_st<1, WPB, D, true, PAIR>(blocks, seg, xs, x, K, S, T);
    if (T <= 4) return launch_st<1, WPB, D, false, PAIR>(blocks, seg, xs, x, K, S, T);
    return launch_st<2, WPB, D, false, PAIR>(blocks, seg, xs, x, K, S, T);
}

/* Variant v (< FP4_VARIANTS) over the segments. Token tiles per pass: 1 (4 tokens) up to T = 4, else 2, and 4 for
 * mma_k4 above 8 tokens (its 255-register budget holds the 64 accumulators; mma_w1's would spill). On one token, every
 * variant but mma_k4 runs one launch that prepares its own x (SX; the x-preparation launch costs 4-8 µs per call);
 * otherwise x is prepared by fp4_prep_x, then the launch (preparing all of x in each of mma_k4's few blocks measured
 * slower on down_proj, 22.7% against 32.4%). Both read the same fragment values, so the bits are the same. */
template <bool PAIR>
static void launch_fp4_variant_t(int v, const uint8_t *blocks, const fp4_segments &seg, int64_t K, const float *x,
                                 int T) {
    const int64_t S = qrt_nvfp4_row_elems(K) / FP4_SLICE;
    const bool sx = T == 1 && v != FP4_K4;
    fp4_xsrc xs = {NULL, NULL};
    if (!sx) {
        const float *xscale = fp4_prepare_x(x, K, T, S); /* may grow xf_buf: read it after */
        xs = fp4_xsrc{xf_buf, xscale};
    }
    bool ran = true;
    switch (v) {
    case FP4_W1: ran = false; break; /* below */
    case FP4_K4:
    case FP4_K4_SX:
        if (sx) launch_k<1, 4, true, PAIR>(blocks, seg, xs, x, K, S, T);
        else if (T > 8) launch_k<4, 4, false, PAIR>(blocks, seg, xs, x, K, S, T);
        else if (T > 4) launch_k<2, 4, false, PAIR>(blocks, seg, xs, x, K, S, T);
        else launch_k<1, 4, false, PAIR>(blocks, seg, xs, x, K, S, T);
        break;
    case FP4_ST12X2: ran = launch_st_t<12, 2, PAIR>(blocks, seg, xs, x, K, S, T, sx); break;
    case FP4_ST16X2: ran = launch_st_t<16, 2, PAIR>(blocks, seg, xs, x, K, S, T, sx); break;
    case FP4_GEMM:
        if (T >= 16) launch_gemm<PAIR>(blocks, seg, xs, S, T);
        else ran = false; /* mma_w1 below */
        break;
    case FP4_IL12X2: ran = launch_il_t<12, 2, PAIR>(blocks, seg, xs, x, K, S, T, sx); break;
    case FP4_CL12X2: ran = launch_cl<12, 2, 2, PAIR>(blocks, seg, x, K, S, T); break;
    case FP4_CL8X3: ran = launch_cl<8, 3, 2, PAIR>(blocks, seg, x, K, S, T); break;
    case FP4_CK8X3: ran = launch_ck_v<0, PAIR>(blocks, seg, x, K, S, T); break;
    case FP4_CK8X2E: ran = launch_ck_v<1, PAIR>(blocks, seg, x, K, S, T); break;
    case FP4_CK12X2: ran = launch_ck_v<2, PAIR>(blocks, seg, x, K, S, T); break;
    case FP4_CK8X2EH: ran = launch_ck_v<3, PAIR>(blocks, seg, x, K, S, T); break;
    case FP4_CK12X2EH: ran = launch_ck_v<4, PAIR>(blocks, seg, x, K, S, T); break;
    default: ran = launch_ck_v<5, PAIR>(blocks, seg, x, K, S, T); break;
    }
    if (!ran) { /* mma_w1; also where mma_st, mma_cl or mma_ck cannot fit one block, mma_cl and mma_ck above one token
                 * or below sm_90, mma_gemm below 16 tokens (same bits; the autotuner does not time them there:
                 * fp4_variant_own) */
        if (sx) launch_w1<1, 4, true, PAIR>(blocks, seg, xs, x, K, S, T);
        else if (T > 4) launch_w1<2, 4, false, PAIR>(blocks, seg, xs, x, K, S, T);
        else launch_w1<1, 4, false, PAIR>(blocks, seg, xs, x, K, S, T);
    }
}
static void launch_fp4_variant(int v, const uint8_t *blocks, const fp4_segments &seg, int64_t K, const float *x,
                               int T) {
    if (seg.pair != FP4_PARTS) launch_fp4_variant_t<true>(v, blocks, seg, K, x, T);
    else launch_fp4_variant_t<false>(v, blocks, seg, K, x, T);
}

/* Whether variant v runs its own kernel at T tokens on an N x K weight (not mma_w1 in its place; a K too long for one
 * block of mma_st or mma_cl is not caught here: it too runs mma_w1). mma_ck: its cluster's sums must fit beside the
 * ring when every SM holds one block (lm_head's do not). */
static bool fp4_variant_own(int v, int T, int64_t N, int64_t K) {
    if (v == FP4_GEMM) return T >= 16;
    if (v < FP4_CL12X2) return true;
    if (T != 1 || compute_major() < 9) return false; /* the clustered variants */
    if (v < FP4_CK8X3) return true;
    const int *shape = fp4_ck_shape[v - FP4_CK8X3];
    return fp4_ck_smem_full(shape[0], shape[1], FP4_CK_CL, qrt_nvfp4_row_elems(K) / FP4_SLICE, (N + 15) / 16,
                            fp4_ck_extra(shape[4] != 0, shape[5] != 0)) <=
           smem_optin();
}

extern "C" int qrt_nvfp4_variant_count(void) { return FP4_VARIANTS; }
extern "C" int qrt_nvfp4_variant_runs(int v, int T, int64_t n, int64_t k) {
    return v >= 0 && v < FP4_VARIANTS && fp4_variant_own(v, T, n, k);
}
extern "C" const char *qrt_nvfp4_variant_name(int v) { return v >= 0 && v < FP4_VARIANTS ? fp4_variant_names[v] : "?"; }
extern "C" int qrt_nvfp4_variant_order(int v) { return v >= 0 && v < FP4_VARIANTS ? 0 : -1; }

extern "C" void qrt_nvfp4_matmul_variant(int v, const qrt_linear *W, const float *x, int T, float *y) {
    QRT_ASSERT(W->fmt == QRT_WF_NVFP4 && v >= 0 && v < FP4_VARIANTS && T >= 1);
    launch_fp4_variant(v, (const uint8_t *)W->data, fp4_one_segment(W, y), W->k, x, T);
}

/* ---- NVFP4 device layout: row-major rows → slice blocks (prepare_linear, tilebench) ------------------ */

/* One thread per 16-byte code chunk or 8-byte scale group of a slice block. rows: [N][K/2] codes and [N][K/16]
 * scales as stored; chunks past K and rows past N (the last tile's padding) become zero. */
__global__ void fp4_to_blocks(const uint8_t *codes /* [N][K/2] */, const uint8_t *scales /* [N][K/16] */, int64_t N,
                              int64_t K, int64_t S, uint8_t *blocks /* [tiles][S][FP4_BLOCK_BYTES] */) {
    const int64_t per_block = 8 * 32 + 2 * 32; /* code chunks, then scale groups */
    const int64_t total = (N + 15) / 16 * S * per_block;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = i % per_block, bs = i / per_block, s = bs % S, tile = bs / S;
        uint8_t *dst = blocks + bs * FP4_BLOCK_BYTES;
        if (j < 8 * 32) { /* code chunk: row half h, chunk step q, lane l */
            const int l = (int)(j % 32), q = (int)(j / 32 % 4), h = (int)(j / 128), g = l >> 2, c = l & 3;
            const int64_t row = tile * 16 + g + 8 * h, k0 = s * FP4_SLICE + (4 * c + q) * 32; /* 32 elements */
            uint4 v = make_uint4(0, 0, 0, 0);
            if (row < N && k0 + 32 <= K && K % 32 == 0) { /* the common case: one aligned 16-byte load */
                v = *reinterpret_cast<const uint4 *>(codes + row * (K / 2) + k0 / 2);
            } else if (row < N) {
                uint8_t *vb = reinterpret_cast<uint8_t *>(&v);
                for (int b = 0; b < 16 && k0 + 2 * b < K; b++) vb[b] = codes[row * (K / 2) + k0 / 2 + b];
            }
            v = make_uint4(fp4_pack_word(v.x), fp4_pack_word(v.y), fp4_pack_word(v.z), fp4_pack_word(v.w));
            *reinterpret_cast<uint4 *>(dst + j * 16) = v;
        } else { /* scale group: row half h, lane l: the 8 scales of chunks 4c..4c+3, at lane l's 16 bytes */
            const int64_t e = j - 8 * 32;
            const int l = (int)(e % 32), h = (int)(e / 32), g = l >> 2, c = l & 3;
            const int64_t row = tile * 16 + g + 8 * h, b0 = (s * FP4_SLICE + 4 * c * 32) / 16; /* first block */
            uint2 v = make_uint2(0, 0);
            if (row < N && (b0 + 8) * 16 <= K && K % 128 == 0) { /* one aligned 8-byte load */
                v = *reinterpret_cast<const uint2 *>(scales + row * (K / 16) + b0);
            } else if (row < N) {
                uint8_t *vb = reinterpret_cast<uint8_t *>(&v);
                for (int b = 0; b < 8 && (b0 + b) * 16 < K; b++) vb[b] = scales[row * (K / 16) + b0 + b];
            }
            *reinterpret_cast<uint2 *>(dst + FP4_CODE_BYTES + l * 16 + h * 8) = v;
        }
    }
}

extern "C" size_t qrt_nvfp4_device_bytes(int64_t n, int64_t k) {
    return (size_t)((n + 15) / 16) * (size_t)(qrt_nvfp4_row_elems(k) / FP4_SLICE) * FP4_BLOCK_BYTES;
}

/* Device memory for a weight's layout (slice blocks, a fused group, a gate|up pair): on failure QRT_ERR_MEMORY naming
 * the weight and what the bytes were for, with the CUDA error cleared. */
static qrt_status fp4_layout_alloc(uint8_t **p, size_t bytes, const char *name, const char *what) {
    const cudaError_t e = cudaMalloc(p, bytes);
    if (e == cudaSuccess) return QRT_OK;
    cudaGetLastError();
    return qrt_fail(QRT_ERR_MEMORY, "%s: cudaMalloc of %.1f MB for %s failed: %s", name ? name : "?", bytes / 1e6, what,
                    cudaGetErrorString(e));
}

extern "C" qrt_status qrt_cuda_nvfp4_to_blocks(qrt_linear *w) {
    const int64_t S = qrt_nvfp4_row_elems(w->k) / FP4_SLICE;
    const size_t bytes = qrt_nvfp4_device_bytes(w->n, w->k);
    uint8_t *blocks = NULL;
    QRT_TRY(fp4_layout_alloc(&blocks, bytes, w->name, "the NVFP4 weight"));
    const size_t threads = bytes / FP4_BLOCK_BYTES * (8 * 32 + 2 * 32);
    fp4_to_blocks<<<(unsigned)QRT_MIN(qrt_grid(threads, 256), 65536u), 256>>>(
        (const uint8_t *)w->data, (const uint8_t *)w->scales, w->n, w->k, S, blocks);
    QRT_CUDA_LAUNCHED();
    QRT_CUDA_CHECK(cudaFree(const_cast<void *>(w->data)));
    QRT_CUDA_CHECK(cudaFree(const_cast<void *>(w->scales)));
    w->data = blocks;
    w->scales = NULL;
    return QRT_OK;
}

/* ---- NVFP4 autotune: measured choice per (N, K, T), cached in memory and in a file per device ------- */

typedef struct {
    int64_t n, k;
    int t, variant;
} tune_entry;

static tune_entry *tune_table = NULL; /* grown as shapes come: a full table would re-time every call */
static int tune_count = 0, tune_cap = 0, tune_loaded = 0;

static void tune_add(tune_entry e) {
    if (tune_count == tune_cap) {
        const int cap = tune_cap ? 2 * tune_cap : 64;
        tune_entry *t = (tune_entry *)realloc(tune_table, sizeof *t * (size_t)cap);
        if (!t) return; /* out of host memory: this shape is timed again next time */
        tune_table = t, tune_cap = cap;
    }
    tune_table[tune_count++] = e;
}
static char tune_path[1536];

/* The cache file's name carries the variant count and this revision, raised whenever the kernels change so that their
 * order of speed may change (picks cached for the old kernels would stay otherwise). 2: the segments read in place
 * (session 14; gate+up's fastest went from mma_cl8x3 to mma_ck8x2e). 3: mma_ck12x2 copies its ring late
 * (session 16). 4: mma_ck's larger shares go to the first clusters (session 18; gdn_out / attn_o's fastest went from
 * mma_ck12x2 to mma_ck8x3). 5: mma_ck8x2eh, mma_ck12x2eh and mma_ck12x2eht added (session 19; the count changed
 * too). */
#define FP4_TUNE_REVISION 5

/* $QRT_CACHE_DIR, else $XDG_CACHE_HOME/qwenrt, else $HOME/.cache/qwenrt; file named after the device. */
static void tune_file_init(void) {
    tune_loaded = 1;
    char dir[768];
    const char *e;
    if ((e = getenv("QRT_CACHE_DIR")) && *e) snprintf(dir, sizeof dir, "%s", e);
    else if ((e = getenv("XDG_CACHE_HOME")) && *e) snprintf(dir, sizeof dir, "%s/qwenrt", e);
    else if ((e = getenv("HOME")) && *e) {
        char parent[700];
        snprintf(parent, sizeof parent, "%s/.cache", e);
        mkdir(parent, 0755);
        snprintf(dir, sizeof dir, "%s/qwenrt", parent);
    } else return;
    mkdir(dir, 0755);
    cudaDeviceProp p;
    QRT_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    char name[sizeof p.name];
    snprintf(name, sizeof name, "%s", p.name);
    for (char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9'))) *c = '_';
    snprintf(tune_path, sizeof tune_path, "%s/nvfp4-tune-%s-sm%d%d-v%d-r%d-graph.txt", dir, name, p.major, p.minor,
             FP4_VARIANTS, FP4_TUNE_REVISION);
    FILE *f = fopen(tune_path, "r");
    if (!f) return;
    long long n, k;
    int t, v;
    while (fscanf(f, "%lld %lld %d %d", &n, &k, &t, &v) == 4)
        if (v >= 0 && v < FP4_VARIANTS) tune_add((tune_entry){n, k, t, v});
    fclose(f);
}

/* The weights the autotuner times on: W itself and copies of its device data, as many as cover 4x the L2 (at least
 * one: W), so back-to-back launches read their weights from memory, as decode does, not from an L2 that holds them
 * (tilebench rotates copies the same way). Out of device memory: fewer copies. */
#define TUNE_GRAPH_LAUNCHES 8
typedef struct {
    qrt_linear w[TUNE_GRAPH_LAUNCHES];
    int copies;
} tune_weights;
static void tune_copies(const qrt_linear *W, tune_weights *tw) {
    const size_t bytes = qrt_nvfp4_device_bytes(W->n, W->k);
    int l2 = 0;
    QRT_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    const size_t cover = 4 * (size_t)(l2 > 0 ? l2 : 64 << 20);
    const int want = (int)QRT_MIN((int64_t)TUNE_GRAPH_LAUNCHES, (int64_t)((cover + bytes - 1) / bytes));
    tw->w[0] = *W, tw->copies = 1;
    while (tw->copies < want) {
        void *d = NULL;
        if (cudaMalloc(&d, bytes) != cudaSuccess) {
            (void)cudaGetLastError(); /* clear it: fewer copies is fine */
            break;
        }
        QRT_CUDA_CHECK(cudaMemcpyAsync(d, W->data, bytes, cudaMemcpyDeviceToDevice, cudaStreamPerThread));
        tw->w[tw->copies] = *W, tw->w[tw->copies].data = d, tw->copies++;
    }
}
static void tune_copies_free(tune_weights *tw) {
    for (int i = 1; i < tw->copies; i++) QRT_CUDA_CHECK(cudaFree((void *)tw->w[i].data));
}

/* Median ms per launch of variant v over 5 replays of a CUDA graph of TUNE_GRAPH_LAUNCHES launches back to back (with
 * programmatic dependent launch, as decode records them), rotating over the weight copies. Why not cold single
 * launches after an L2 flush (the method before): they ranked the variants differently from decode's graphs: gate+up
 * at T = 7 flipped between mma_w1 and mma_st12x2 across fresh tunes (tilebench's graph timing: 46 against 51 us),
 * and the K = 6 verify ran ~1.5% slower with the wrong one (docs/benchmarks.md, session 7). */
static float time_variant(int v, const tune_weights *tw, const float *x, int T, float *y) {
    qrt_nvfp4_matmul_variant(v, &tw->w[0], x, T, y); /* warmup, outside the capture: grows the scratch buffers */
    cudaGraph_t g;
    cudaGraphExec_t ge;
    QRT_CUDA_CHECK(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < TUNE_GRAPH_LAUNCHES; i++) qrt_nvfp4_matmul_variant(v, &tw->w[i % tw->copies], x, T, y);
    QRT_CUDA_CHECK(cudaStreamEndCapture(cudaStreamPerThread, &g));
    QRT_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t a, b;
    QRT_CUDA_CHECK(cudaEventCreate(&a));
    QRT_CUDA_CHECK(cudaEventCreate(&b));
    QRT_CUDA_CHECK(cudaGraphLaunch(ge, cudaStreamPerThread)); /* the first replay uploads the graph */
    float ms[5];
    for (int r = 0; r < 5; r++) {
        QRT_CUDA_CHECK(cudaEventRecord(a, cudaStreamPerThread));
        QRT_CUDA_CHECK(cudaGraphLaunch(ge, cudaStreamPerThread));
        QRT_CUDA_CHECK(cudaEventRecord(b, cudaStreamPerThread));
        QRT_CUDA_CHECK(cudaEventSynchronize(b));
        QRT_CUDA_CHECK(cudaEventElapsedTime(&ms[r], a, b));
    }
    QRT_CUDA_CHECK(cudaEventDestroy(a));
    QRT_CUDA_CHECK(cudaEventDestroy(b));
    QRT_CUDA_CHECK(cudaGraphExecDestroy(ge));
    QRT_CUDA_CHECK(cudaGraphDestroy(g));
    std::sort(ms, ms + 5);
    return ms[2] / TUNE_GRAPH_LAUNCHES; /* the median */
}

/* Variants whose first timings are within this factor of the best's are timed again, in turns (tune_final). */
#define TUNE_CLOSE 1.10f
#define TUNE_FINAL_ROUNDS 4
/* The fastest of the n variants v[], timed in turns (v[0], v[1], ..., v[0], ...) and compared by the mean of their
 * middle two timings: one timing of each after the other favoured one of two near variants (H200, lm_head in a whole
 * tilebench run: mma_cl8x3 picked in 9 of 11 tunes, while tilebench measured mma_cl12x2 4-11% faster in each run that
 * listed both; the two best, timed in turns, mma_cl12x2 in 5 of 5, 2026-12-02). All near ones, not only the first two:
 * lm_head has four variants within 10% (mma_st12x2, mma_cl12x2, mma_st16x2, mma_cl8x3), and with only the first two
 * timed again a whole tilebench run still picked mma_cl8x3 (190 us against mma_cl12x2's 176) in 1 of 2 runs; with all
 * of them, three lm_head + gate+up runs picked mma_cl12x2 twice (167-168 us) and mma_st12x2 once (175, mma_cl12x2
 * 171 in that run) (session 13). */
static int tune_final(const int *v, int n, const tune_weights *tw, const float *x, int T, float *y) {
    float t[FP4_VARIANTS][TUNE_FINAL_ROUNDS];
    for (int r = 0; r < TUNE_FINAL_ROUNDS; r++)
        for (int i = 0; i < n; i++) t[i][r] = time_variant(v[i], tw, x, T, y);
    const int m = TUNE_FINAL_ROUNDS / 2;
    int best = 0;
    float best_mid = 0.0f;
    for (int i = 0; i < n; i++) {
        std::sort(t[i], t[i] + TUNE_FINAL_ROUNDS);
        const float mid = t[i][m - 1] + t[i][m];
        if (i == 0 || mid < best_mid) best = i, best_mid = mid;
    }
    return v[best];
}

static int forced_variant(void) {
    static int forced = -2;
    if (forced == -2) {
        const char *e = getenv("QRT_NVFP4_VARIANT");
        forced = -1;
        if (e && *e) {
            for (int v = 0; v < FP4_VARIANTS; v++)
                if (!strcmp(e, fp4_variant_names[v])) forced = v;
            if (forced < 0) {
                char *end;
                long v = strtol(e, &end, 10);
                if (!*end && v >= 0 && v < FP4_VARIANTS) forced = (int)v;
            }
            if (forced < 0) fprintf(stderr, "qwenrt: QRT_NVFP4_VARIANT=%s is not a variant; autotuning\n", e);
        }
    }
    return forced;
}

extern "C" int qrt_nvfp4_pick(const qrt_linear *W, int T) {
    int forced = forced_variant();
    if (forced >= 0) return forced;
    if (!tune_loaded) tune_file_init();
    for (int i = 0; i < tune_count; i++)
        if (tune_table[i].n == W->n && tune_table[i].k == W->k && tune_table[i].t == T) return tune_table[i].variant;
    /* No timing (allocation, synchronization) while a graph is being recorded: mma_w1, which gives the same bits. The
     * model records only keys that ran before, so this is a fallback, not the normal path. */
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    QRT_CUDA_CHECK(cudaStreamIsCapturing(cudaStreamPerThread, &cap));
    if (cap != cudaStreamCaptureStatusNone) return 0;
    /* Time on scratch activations (random, never zeros), so the caller's buffers are untouched. */
    float *x = NULL, *y = NULL;
    QRT_CUDA_CHECK(cudaMalloc(&x, sizeof(float) * (size_t)T * W->k));
    QRT_CUDA_CHECK(cudaMalloc(&y, sizeof(float) * (size_t)T * W->n));
    qrt_cuda_fill_random_f32(x, (size_t)T * W->k, 12345, -1.0f, 1.0f);
    tune_weights tw;
    tune_copies(W, &tw);
    float ms[FP4_VARIANTS];
    int best = -1;
    for (int v = 0; v < FP4_VARIANTS; v++) {
        /* a variant that would run mma_w1 in its place is not timed: it could win the pick by noise */
        ms[v] = fp4_variant_own(v, T, W->n, W->k) ? time_variant(v, &tw, x, T, y) : -1.0f;
        if (ms[v] >= 0.0f && (best < 0 || ms[v] < ms[best])) best = v;
    }
    int near[FP4_VARIANTS], n = 0;
    for (int v = 0; v < FP4_VARIANTS; v++)
        if (ms[v] >= 0.0f && ms[v] < ms[best] * TUNE_CLOSE) near[n++] = v;
    if (n > 1) best = tune_final(near, n, &tw, x, T, y);
    tune_copies_free(&tw);
    QRT_CUDA_CHECK(cudaFree(x));
    QRT_CUDA_CHECK(cudaFree(y));
    tune_add((tune_entry){W->n, W->k, T, best});
    if (tune_path[0]) {
        FILE *f = fopen(tune_path, "a");
        if (f) {
            fprintf(f, "%lld %lld %d %d\n", (long long)W->n, (long long)W->k, T, best);
            fclose(f);
        }
    }
    return best;
}

/* ---- the op ------------------------------------------------------------------------------------------ */

void qrt_cuda_matmul(const qrt_linear *W, const float *x, int T, float *y) {
    switch (W->fmt) {
    case QRT_WF_BF16: launch_dense<QRT_WF_BF16>(W, x, T, y); break;
    case QRT_WF_F16: launch_dense<QRT_WF_F16>(W, x, T, y); break;
    case QRT_WF_F32: launch_dense<QRT_WF_F32>(W, x, T, y); break;
    case QRT_WF_FP8B: launch_dense<QRT_WF_FP8B>(W, x, T, y); break;
    case QRT_WF_NVFP4:
        /* a part of a paired gate|up group (scales set to the pair layout) runs only through its group */
        QRT_ASSERT(W->scales == NULL);
        qrt_nvfp4_matmul_variant(qrt_nvfp4_pick(W, T), W, x, T, y);
        break;
    default: QRT_ASSERT(!"weight format without a CUDA matmul (prepare_linear refuses it)");
    }
}

/* ---- fused groups ------------------------------------------------------------------------------------
 * The NVFP4 parts of a group (in part order) are laid out in one allocation: the slice blocks of each part's tiles,
 * one part after another (a part's last tile is zero-padded, so a tile never spans two parts). Each part's data
 * points into it, so it still runs alone with the layout prepare_linear gives. */

/* Which parts are fused (NVFP4 with the first such part's K) and their first tiles; returns the fused count and
 * writes the total tiles to tile_begin[count]. */
static int fp4_group_layout(const qrt_linear_group *g, int in_fused[QRT_GROUP_MAX],
                            int64_t tile_begin[QRT_GROUP_MAX + 1], int64_t *K_out) {
    int count = 0;
    int64_t K = -1, tiles = 0;
    for (int i = 0; i < g->n; i++) {
        const qrt_linear *w = g->part[i];
        in_fused[i] = w->fmt == QRT_WF_NVFP4 && (K < 0 || w->k == K);
        if (!in_fused[i]) continue;
        K = w->k;
        tile_begin[count++] = tiles;
        tiles += (w->n + 15) / 16;
    }
    tile_begin[count] = tiles;
    *K_out = K;
    return count;
}

/* ---- paired layout of a gate|up group --------------------------------------------------------------
 * Pair tile i, slice s, from the two parts' slice blocks: its row half 0 is half i % 2 of gate tile i / 2, its row
 * half 1 the same half of up tile i / 2; each lane's scale uint4 takes that half's 8 bytes from each (a slice block's
 * layout: "The slice block of one (tile, slice)" above). One thread per uint4 of the result. */
__global__ void fp4_pair_blocks(const uint4 *gate /* [tiles][S][288] */, const uint4 *up, int64_t pair_tiles,
                                int64_t S, uint4 *out /* [pair_tiles][S][288] */) {
    const int64_t n = pair_tiles * S * FP4_BLOCK_U4;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = idx % FP4_BLOCK_U4, ts = idx / FP4_BLOCK_U4, s = ts % S, i = ts / S;
        const int half = (int)(i & 1);
        const int64_t src = ((i / 2) * S + s) * FP4_BLOCK_U4; /* the (tile i / 2, s) block of either part */
        uint4 v;
        if (j < 128) v = gate[src + half * 128 + j];
        else if (j < 256) v = up[src + half * 128 + (j - 128)];
        else {
            const uint4 a = gate[src + j], b = up[src + j];
            v = half ? make_uint4(a.z, a.w, b.z, b.w) : make_uint4(a.x, a.y, b.x, b.y);
        }
        out[idx] = v;
    }
}

/* A swiglu group of two NVFP4 parts of one shape, laid out in pairs: true when done (g->fused holds it, both parts
 * point into it with scales set to it, the mark that they no longer run alone). */
static qrt_status fp4_prepare_pair(qrt_linear_group *g, bool *done) {
    *done = false;
    qrt_linear *gate = g->part[0], *up = g->n == 2 ? g->part[1] : NULL;
    if (!g->swiglu || !up || gate->fmt != QRT_WF_NVFP4 || up->fmt != QRT_WF_NVFP4 || gate->n != up->n ||
        gate->k != up->k)
        return QRT_OK;
    const int64_t S = qrt_nvfp4_row_elems(gate->k) / FP4_SLICE, pair_tiles = 2 * ((gate->n + 15) / 16);
    uint8_t *paired = NULL;
    QRT_TRY(fp4_layout_alloc(&paired, 2 * qrt_nvfp4_device_bytes(gate->n, gate->k), gate->name,
                             "the paired gate|up projections"));
    fp4_pair_blocks<<<qrt_grid((size_t)pair_tiles * S * FP4_BLOCK_U4, 256), 256>>>(
        (const uint4 *)gate->data, (const uint4 *)up->data, pair_tiles, S, (uint4 *)paired);
    QRT_CUDA_LAUNCHED();
    QRT_CUDA_CHECK(cudaDeviceSynchronize());
    QRT_CUDA_CHECK(cudaFree(const_cast<void *>(gate->data)));
    QRT_CUDA_CHECK(cudaFree(const_cast<void *>(up->data)));
    gate->data = up->data = gate->scales = up->scales = paired;
    g->fused = paired;
    g->paired = 1;
    *done = true;
    return QRT_OK;
}

qrt_status qrt_cuda_prepare_group(qrt_linear_group *g) {
    g->fused = NULL;
    g->paired = 0;
    bool paired = false;
    QRT_TRY(fp4_prepare_pair(g, &paired));
    if (paired) return QRT_OK;
    int in_fused[QRT_GROUP_MAX];
    int64_t tile_begin[QRT_GROUP_MAX + 1], K;
    const int count = fp4_group_layout(g, in_fused, tile_begin, &K);
    if (count < 2) return QRT_OK; /* nothing to fuse: the parts run one by one */
    const size_t tile_bytes = (size_t)(qrt_nvfp4_row_elems(K) / FP4_SLICE) * FP4_BLOCK_BYTES;
    const size_t bytes = (size_t)tile_begin[count] * tile_bytes;
    uint8_t *fused = NULL;
    QRT_TRY(fp4_layout_alloc(&fused, bytes, g->part[0]->name, "the fused projections"));
    for (int i = 0, j = 0; i < g->n; i++) {
        if (!in_fused[i]) continue;
        qrt_linear *w = g->part[i];
        uint8_t *dst = fused + (size_t)tile_begin[j++] * tile_bytes;
        QRT_CUDA_CHECK(cudaMemcpy(dst, w->data, qrt_nvfp4_device_bytes(w->n, w->k), cudaMemcpyDeviceToDevice));
        /* prepare_linear's copy is no longer needed: the part now reads its tiles in the fused allocation */
        QRT_CUDA_CHECK(cudaFree(const_cast<void *>(w->data)));
        w->data = dst;
    }
    g->fused = fused;
    return QRT_OK;
}

/* A paired group's launch: gate and up into y0 and y1 (FP4_PAIR), or silu(gate) · up into y0 (FP4_PAIR_SWIGLU). The
 * variant is picked for the shape of both parts' rows, as for any fused group. */
static void fp4_pair_launch(int v /* -1: the autotuner's */, const qrt_linear_group *g, const float *x, int T,
                            int pair, float *y0, float *y1) {
    const qrt_linear *gate = g->part[0], *up = g->part[1];
    qrt_linear all;
    memset(&all, 0, sizeof all);
    all.fmt = QRT_WF_NVFP4, all.n = 2 * ((gate->n + 15) / 16) * 16, all.k = gate->k, all.data = g->fused;
    all.scale2 = 1.0f, all.name = "fused group";
    fp4_segments seg;
    memset(&seg, 0, sizeof seg);
    seg.count = 1, seg.pair = pair;
    seg.tile_begin[1] = all.n / 16;
    seg.rows[0] = seg.rows[1] = gate->n;
    seg.scale2[0] = gate->scale2, seg.scale2[1] = up->scale2;
    seg.y[0] = y0, seg.y[1] = y1;
    launch_fp4_variant(v >= 0 ? v : qrt_nvfp4_pick(&all, T), (const uint8_t *)g->fused, seg, gate->k, x, T);
}

extern "C" void qrt_nvfp4_matmul_swiglu_variant(int v, const qrt_linear_group *g, const float *x, int T, float *y) {
    QRT_ASSERT(g->paired && v >= 0 && v < FP4_VARIANTS && T >= 1);
    fp4_pair_launch(v, g, x, T, FP4_PAIR_SWIGLU, y, NULL);
}

void qrt_cuda_matmul_swiglu(const qrt_linear_group *g, const float *x, int T, float *y, float *up) {
    if (g->paired) {
        fp4_pair_launch(-1, g, x, T, FP4_PAIR_SWIGLU, y, NULL);
        return;
    }
    float *const outs[2] = {y, up};
    qrt_cuda_matmul_group(g, x, T, outs);
    qrt_cuda_swiglu(y, up, (size_t)T * g->part[0]->n, y);
}

void qrt_cuda_matmul_group(const qrt_linear_group *g, const float *x, int T, float *const *y) {
    if (g->paired) {
        fp4_pair_launch(-1, g, x, T, FP4_PAIR, y[0], y[1]);
        return;
    }
    if (!g->fused) { /* not laid out together (mixed formats, fewer than two NVFP4 parts) */
        for (int i = 0; i < g->n; i++) qrt_cuda_matmul(g->part[i], x, T, y[i]);
        return;
    }
    int in_fused[QRT_GROUP_MAX];
    int64_t tile_begin[QRT_GROUP_MAX + 1], K;
    const int count = fp4_group_layout(g, in_fused, tile_begin, &K);
    /* The variant is picked for the fused shape (all rows); the autotuner and the forcing work on it as on a
     * linear. */
    qrt_linear all;
    memset(&all, 0, sizeof all);
    all.fmt = QRT_WF_NVFP4, all.n = tile_begin[count] * 16, all.k = K, all.data = g->fused, all.scale2 = 1.0f;
    all.name = "fused group";
    const int variant = qrt_nvfp4_pick(&all, T);
    fp4_segments seg;
    memset(&seg, 0, sizeof seg);
    for (int i = 0; i < g->n; i++) {
        if (!in_fused[i]) {
            qrt_cuda_matmul(g->part[i], x, T, y[i]);
            continue;
        }
        const int j = seg.count++;
        seg.tile_begin[j] = tile_begin[j];
        seg.rows[j] = g->part[i]->n;
        seg.scale2[j] = g->part[i]->scale2;
        seg.y[j] = y[i];
    }
    seg.tile_begin[seg.count] = tile_begin[count];
    launch_fp4_variant(variant, (const uint8_t *)g->fused, seg, K, x, T);
}
