/* The slice ring of the ring kernels (mma_il, mma_cl, mma_ck) and the cluster primitives they use.
 *
 * A ring kernel's warp streams a run of (tile, slice) units through its own ring of D slice blocks in shared memory
 * with cp.async: D - 1 slices in flight while it computes one (a lane copies and reads back only its own 9 uint4 of a
 * block, so no barrier is needed), and the ring holds no registers. Runs are cut so that every warp reads the same
 * number of bytes (whole tiles per warp left whole waves of blocks part-empty on gate+up and kept a warp of down_proj
 * waiting on its slices one after another). A tile whose units are all one warp's is summed in registers; a tile split
 * between warps has each slice's p written to scratch (global, or another block's shared memory) and is summed there
 * in slice order, so every ring kernel gives mma_w1's bits. */
#ifndef QRT_MATMUL_FP4_RING_CUH
#define QRT_MATMUL_FP4_RING_CUH
#include "backend/cuda/matmul_fp4.cuh"
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
/* Split tile `tile` of a one-token pass, summed in slice order: its S · 16 sums lie contiguous in part, so the warp
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
/* Split tile `tile` once all its units are in part: all S slices' p summed in order (mma_w1's order), the rows stored. */
template <int NT, bool PAIR>
__device__ __forceinline__ void fp4_part_total(const float *part, const fp4_segments &seg, int64_t tile, int64_t S,
                                               int T, int t0, int lane) {
    const int tp = T - t0 < 4 * NT ? T - t0 : 4 * NT;
    float acc[NT][2];
    if (tp == 1) fp4_part_sum_t1(part, tile, S, lane, acc[0]);
    else fp4_part_sum<NT>(part, tile, S, tp, lane, acc);
    fp4_store<NT, PAIR>(fp4_tile_target(seg, tile), T, t0, lane, acc);
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

/* The start of mma_il and mma_cl: the rings' first copies (start_copies), on one token (SX) behind the loads
 * of the block's x copy (queued ahead of them, x waited behind the whole grid's copies), which then becomes
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

/* ---- clusters (sm_90): another block's shared memory, the cluster barrier, mbarriers ---- */
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


#endif
