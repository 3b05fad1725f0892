/* NVFP4 matmul, mma_il ("interleaved", a ring kernel): a block owns an equal run of whole tiles and its IL_WARPS warps
 * take the block's units slice after slice, so they share each slice's x fragments from L1. Any T; wins on the
 * shapes whose M = 2..16 time is set by x's reads (gate+up at a few tokens). */
#include "backend/cuda/matmul_fp4_ring.cuh"

#define IL_WARPS 12 /* warps per block */
#define IL_SLOTS 2  /* ring slots per warp */


/* Variant mma_il<WPB, D> ("interleaved"): each block owns an equal run of whole tiles, and its warps take the block's
 * (slice, tile) units in turn, slice after slice (warp w: units w, w + WPB, ...), streamed through the rings. So
 * at any moment a block's warps work on one or two slices, and at T > 1 those slices' x fragments (16 KB per slice
 * for 8 tokens, read from global memory) are reused from L1 by all of them, where warps that each streamed their
 * own run would touch every slice at once. Every unit's p goes to the split-tile scratch; after a block barrier each warp
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

/* The split-tile scratch (every unit's p), grown on demand (qrt_cuda_grow). */
static void *il_part = NULL;
static size_t il_part_cap = 0; /* bytes */

/* mma_il: as many blocks as fit at once, never more than tiles (a block owns whole tiles); one launch per pass. */
template <int NT, int WPB, int D, bool SX, bool PAIR>
static bool launch_il(const uint8_t *blocks, const fp4_segments &seg, const fp4_xsrc &xs, const float *x, int64_t K,
                      int64_t S, int T) {
    const size_t smem = fp4_ring_smem(WPB, D, SX, S);
    const int64_t tiles = seg.tile_begin[seg.count], units = tiles * S;
    static fp4_occupancy occ;
    const int64_t grid = fp4_resident(fp4_mma_il<NT, WPB, D, SX, PAIR>, WPB * 32, smem, 1, occ, tiles);
    if (grid < 1) return false;
    float *part = static_cast<float *>(
        qrt_cuda_grow(&il_part, &il_part_cap, sizeof(float) * (size_t)units * QRT_MIN(T, 4 * NT) * 16));
    QRT_ASSERT(units < INT32_MAX); /* the kernel's unit bookkeeping is 32-bit */
    for (int t0 = 0; t0 < T; t0 += 4 * NT)
        QRT_LAUNCH(fp4_mma_il<NT, WPB, D, SX, PAIR>, (unsigned)grid, WPB * 32, smem, blocks, seg, xs, x, K, S, T, t0,
                   part);
    return true;
}

template <bool PAIR> static bool run_il(const fp4_launch &a) {
    if (fp4_sx(a)) return launch_il<1, IL_WARPS, IL_SLOTS, true, PAIR>(a.blocks, *a.seg, a.xs, a.x, a.K, a.S, a.T);
    if (a.T <= 4) return launch_il<1, IL_WARPS, IL_SLOTS, false, PAIR>(a.blocks, *a.seg, a.xs, a.x, a.K, a.S, a.T);
    return launch_il<2, IL_WARPS, IL_SLOTS, false, PAIR>(a.blocks, *a.seg, a.xs, a.x, a.K, a.S, a.T);
}
bool fp4_run_il(const fp4_launch &a) { return fp4_paired(a) ? run_il<true>(a) : run_il<false>(a); }
