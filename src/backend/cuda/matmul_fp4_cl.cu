/* NVFP4 matmul, mma_cl ("clustered", a ring kernel, one token, sm_90): a cluster of CL_BLOCKS blocks owns whole
 * tiles, and its split tiles are summed through distributed shared memory after one cluster barrier. Wins at M = 1 on
 * the longest N (lm_head). */
#include "backend/cuda/matmul_fp4_ring.cuh"

#define CL_WARPS 12 /* warps per block */
#define CL_SLOTS 2  /* ring slots per warp */
#define CL_BLOCKS 2 /* blocks per cluster */

/* Variant mma_cl<WPB, D, CL> ("clustered", one token, sm_90): runs and rings inside thread-block clusters of CL
 * blocks. Each cluster owns an equal run of whole tiles, cut into equal runs of (tile, slice) units over its warps in
 * storage order. A tile whose units are all one warp's is summed in
 * registers; a tile split between warps has each slice's p written straight into the shared memory of the warp that
 * holds its last unit (distributed shared memory), and after one cluster barrier that warp sums them in slice order
 * (mma_w1's bits). Why: a split-tile finish through global scratch and atomics, after the last unit, cost a tenth
 * to a sixth of the launch; here it is one barrier and a few shared-memory reads. A warp completes at most one split
 * tile: the one it entered its run inside, if that one ends in its run (a tile that begins inside the run either ends
 * in it, whole, or is completed by a later warp). */
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
     * x's loads (x is that kernel's output), which would otherwise queue behind them (all slots before the wait,
     * or none, decoded slower). */
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

bool fp4_run_cl(const fp4_launch &a) {
    if (fp4_paired(a)) return launch_cl<CL_WARPS, CL_SLOTS, CL_BLOCKS, true>(a.blocks, *a.seg, a.x, a.K, a.S, a.T);
    return launch_cl<CL_WARPS, CL_SLOTS, CL_BLOCKS, false>(a.blocks, *a.seg, a.x, a.K, a.S, a.T);
}
