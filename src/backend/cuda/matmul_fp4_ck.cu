/* NVFP4 matmul, mma_ck ("clustered, K split", a ring kernel, one token, sm_90): as mma_cl, but block r of each
 * cluster of CK_BLOCKS takes slices [r·S/CL, (r+1)·S/CL) of every tile its cluster owns, and its warps cut the block's
 * (tile, slice) units into equal runs; so a block prepares only its own slices of x. Wins at M = 1 on every shape but
 * lm_head (whose cluster sums do not fit beside the rings).
 *
 * Every unit's p goes into the last block's shared memory (distributed shared memory), [cluster tiles][S·16 +
 * FP4_CK_PAD]; after one cluster barrier that block's warps sum each tile in slice order (mma_w1's bits). The
 * configurations (the structs below) differ in:
 * - warps per block and ring slots per warp (on down_proj fewer copies in flight were faster: 2 slots beat 3 and 4);
 * - early: each slot refilled as soon as its words are in registers (fp4_slot_p), so the ring keeps D copies in flight
 *   through the mma instead of D - 1;
 * - slots_asked: when ring slots 1.. are asked for (slot 0 always goes out before the launch wait).
 *   FP4_CK_WITH_X: by each warp right behind its own x loads. FP4_CK_AFTER_X: once x is prepared (behind x's loads,
 *   their 4.6 KB per warp delay x's return). FP4_CK_HOLD: behind every warp's x loads (a block barrier puts them all
 *   ahead of the copies), then unit v0 is taken from slot 0 into registers and slot 0 refilled with unit v0 + D at
 *   once, before x is converted: D units in flight through x's preparation, and a warp's first unit needs no wait;
 * - async_p: the other blocks write their p by st.async, each store counting 4 bytes down on an mbarrier of the last
 *   block, which waits on it; so no block ends with a cluster barrier (its release compiles to a GPU-wide membar ahead
 *   of the arrive) and the other blocks leave as soon as their loops end;
 * - tail_cut (needs FP4_CK_HOLD, >= 4 warps): the block's last unit is cut by chunk step over its last 4 warps, each
 *   e_q copied with slot 1 and summed in fp4_slice_mma's order by the last warp after a named barrier: down_proj's
 *   blocks have 85 units over 12 warps, and the one warp with 8 otherwise ends last.
 * The mbarrier sits in dynamic shared memory past the sums: a static __shared__ variable made every configuration
 * slower. What each choice measured, and what was tried and dropped: docs/gemv.md, docs/benchmarks.md. */
#include "backend/cuda/matmul_fp4_ring.cuh"

#define CK_BLOCKS 2 /* blocks per cluster */
/* A tile's sums in the last block, [S][16] floats, padded by FP4_CK_PAD: the 4 tiles one warp's quad columns sum at
 * once (the end of fp4_mma_ck) then sit in distinct banks. */
#define FP4_CK_PAD 8
enum { FP4_CK_WITH_X, FP4_CK_AFTER_X, FP4_CK_HOLD }; /* slots_asked */
#define FP4_CK_TAIL_U4 96 /* tail_cut, per warp: its chunk step's codes of rows g and g + 8 and the scales, 32 uint4 each */
#define FP4_CK_PREP_SLICES 18 /* one round of the x preparation covers this many slices per block (down_proj: 17) */
/* The configurations, each the kernel's template argument C (the names are the variants' names). */
struct ck8x2e    { enum { warps = 8,  slots = 2, early = 1, slots_asked = FP4_CK_WITH_X,  async_p = 0, tail_cut = 0 }; };
struct ck12x2    { enum { warps = 12, slots = 2, early = 0, slots_asked = FP4_CK_AFTER_X, async_p = 0, tail_cut = 0 }; };
struct ck8x2eh   { enum { warps = 8,  slots = 2, early = 1, slots_asked = FP4_CK_HOLD,    async_p = 1, tail_cut = 0 }; };
struct ck12x2eh  { enum { warps = 12, slots = 2, early = 1, slots_asked = FP4_CK_HOLD,    async_p = 1, tail_cut = 0 }; };
struct ck12x2eht { enum { warps = 12, slots = 2, early = 1, slots_asked = FP4_CK_HOLD,    async_p = 1, tail_cut = 1 }; };

template <class C, bool PAIR>
__global__ void __launch_bounds__(C::warps * 32) fp4_mma_ck(const uint8_t *blocks /* [tiles][S][FP4_BLOCK_BYTES] */,
                                                            const __grid_constant__ fp4_segments seg,
                                                            const float *x /* [K] */, int64_t K, int64_t S,
                                                            int clusters) {
    constexpr int WPB = C::warps, D = C::slots, SLOTS = C::slots_asked, CL = CK_BLOCKS;
    constexpr bool EARLY = C::early, ASYNC = C::async_p, TAIL = C::tail_cut;
    /* [WPB][D][FP4_BLOCK_U4] rings, [ceil(S/CL)][32][4] uint4 and [ceil(S/CL)] f32 of x, then [tiles of the cluster]
     * [S·16 + FP4_CK_PAD] f32 sums (the last block's are the ones written and read) */
    extern __shared__ uint4 fp4_st_smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, Si = (int)S, g = lane >> 2;
    const int ts = Si * 16 + FP4_CK_PAD; /* floats per tile of sums */
    const int cl = (int)(blockIdx.x / CL), r = (int)(blockIdx.x % CL), tiles = (int)seg.tile_begin[seg.count];
    /* The tiles % clusters larger shares go to the first clusters: blocks start in index order as the launch before
     * frees their SMs, so the last clusters start last, the very last one often only once the launch wait returns
     * (without its ring's slot 0 ahead). With the larger shares spread evenly, that cluster ended its loop last,
     * after the others and set the launch's end; given a smaller share, it ends with them. */
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
    /* Quad column c of warp w sums tile 4w + c (then 4(w + WPB) + c, ...): four tiles per warp at once (one tile per
     * warp left 3 of every 4 lanes idle). */
    for (int j = 4 * warp + (lane & 3); j - (lane & 3) < nt; j += 4 * WPB) {
        if (j >= nt) continue;
        float acc[1][2];
        fp4_tile_sums(sums + (size_t)j * ts + g, Si, acc);
        fp4_store<1, PAIR>(fp4_tile_target(seg, t0 + j), 1, 0, lane & ~3, acc); /* lane & ~3: as token 0's lane */
    }
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
/* mma_ck: as many clusters as fit at once, never more than tiles; one token only. Returns false as launch_cl does, and
 * when the cluster's sums do not fit beside the ring (lm_head): the caller runs mma_w1. */
template <class C, bool PAIR>
static bool launch_ck(const uint8_t *blocks, const fp4_segments &seg, const float *x, int64_t K, int64_t S, int T) {
    if (T != 1 || compute_major() < 9) return false;
    constexpr int WPB = C::warps, D = C::slots, CL = CK_BLOCKS;
    const int64_t tiles = seg.tile_begin[seg.count];
    const auto kernel = fp4_mma_ck<C, PAIR>;
    static fp4_occupancy occ;
    const size_t extra = fp4_ck_extra(C::async_p, C::tail_cut);
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

template <class C> static bool ck_fits(int64_t N, int64_t K) {
    return fp4_ck_smem_full(C::warps, C::slots, CK_BLOCKS, qrt_nvfp4_row_elems(K) / FP4_SLICE, (N + 15) / 16,
                            fp4_ck_extra(C::async_p, C::tail_cut)) <= (size_t)smem_per_block_optin();
}
bool fp4_ck_fits(int config, int64_t N, int64_t K) {
    switch (config) {
    case FP4_CK_8X2E: return ck_fits<ck8x2e>(N, K);
    case FP4_CK_12X2: return ck_fits<ck12x2>(N, K);
    case FP4_CK_8X2EH: return ck_fits<ck8x2eh>(N, K);
    case FP4_CK_12X2EH: return ck_fits<ck12x2eh>(N, K);
    default: return ck_fits<ck12x2eht>(N, K);
    }
}

template <class C> static bool run_ck(const fp4_launch &a) {
    if (fp4_paired(a)) return launch_ck<C, true>(a.blocks, *a.seg, a.x, a.K, a.S, a.T);
    return launch_ck<C, false>(a.blocks, *a.seg, a.x, a.K, a.S, a.T);
}
bool fp4_run_ck(const fp4_launch &a, int config) {
    switch (config) {
    case FP4_CK_8X2E: return run_ck<ck8x2e>(a);
    case FP4_CK_12X2: return run_ck<ck12x2>(a);
    case FP4_CK_8X2EH: return run_ck<ck8x2eh>(a);
    case FP4_CK_12X2EH: return run_ck<ck12x2eh>(a);
    default: return run_ck<ck12x2eht>(a);
    }
}
