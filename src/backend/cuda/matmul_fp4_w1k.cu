/* NVFP4 matmul, the register kernels: each warp loads its slice blocks straight into registers, no ring.
 *   mma_w1   one warp per 16-row tile, W1_TILES tiles per block: any T, and what runs wherever another variant
 *            does not (same bits). Wins at M = 2..16 on most shapes.
 *   mma_k4   a block of K4_WARPS warps per tile, splitting its slices: long K with few tiles (down_proj), M > 1.
 *   (mma_k4_sx is mma_k4 preparing one token's x in the block, the dispatch's choice: short K with few tiles.) */
#include "backend/cuda/matmul_fp4.cuh"

#define W1_TILES 4  /* tiles (warps) per mma_w1 block */
#define K4_WARPS 4  /* warps per mma_k4 tile */


/* Variant mma_w1: one warp per 16-row tile, TPB tiles per block, each slice loaded into registers right before use
 * (a register prefetch of the next slice costs occupancy); the slices' p are summed in
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

/* Token tiles (4 tokens each) per pass: 1 up to T = 4, else 2 (mma_w1's registers hold no more); mma_k4 takes 4 above
 * 8 tokens (its 255-register budget holds the 64 accumulators). SX: one token, x prepared in the block. */
template <bool PAIR> static void run_w1(const fp4_launch &a) {
    if (fp4_sx(a)) launch_w1<1, W1_TILES, true, PAIR>(a.blocks, *a.seg, a.xs, a.x, a.K, a.S, a.T);
    else if (a.T > 4) launch_w1<2, W1_TILES, false, PAIR>(a.blocks, *a.seg, a.xs, a.x, a.K, a.S, a.T);
    else launch_w1<1, W1_TILES, false, PAIR>(a.blocks, *a.seg, a.xs, a.x, a.K, a.S, a.T);
}
template <bool PAIR> static void run_k4(const fp4_launch &a) {
    if (fp4_sx(a)) launch_k<1, K4_WARPS, true, PAIR>(a.blocks, *a.seg, a.xs, a.x, a.K, a.S, a.T);
    else if (a.T > 8) launch_k<4, K4_WARPS, false, PAIR>(a.blocks, *a.seg, a.xs, a.x, a.K, a.S, a.T);
    else if (a.T > 4) launch_k<2, K4_WARPS, false, PAIR>(a.blocks, *a.seg, a.xs, a.x, a.K, a.S, a.T);
    else launch_k<1, K4_WARPS, false, PAIR>(a.blocks, *a.seg, a.xs, a.x, a.K, a.S, a.T);
}
void fp4_run_w1(const fp4_launch &a) { fp4_paired(a) ? run_w1<true>(a) : run_w1<false>(a); }
void fp4_run_k4(const fp4_launch &a) { fp4_paired(a) ? run_k4<true>(a) : run_k4<false>(a); }
