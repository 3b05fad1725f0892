/* NVFP4 matmul, mma_gemm (prefill, T >= 16): a block of GEMM_WARPS tile warps shares each slice's x fragments of
 * GEMM_TOKENS tokens in shared memory. Wins at M >= 16. */
#include "backend/cuda/matmul_fp4_ring.cuh"


/* Variant mma_gemm (T ≥ 16; below it mma_w1 runs): a block of GEMM_WARPS tile warps and GEMM_TOKENS tokens, the
 * tokens fastest in the grid (the blocks of one row block run together and share its weights in L2). Why: the other
 * variants read x's fragments from L2 in every tile warp, so at M = 256 the fragments (5 MB for K = 5120) were read
 * once per tile, ~11 GB for gate+up, and they re-read the weights once per pass of 16
 * tokens. Here each slice's fragments of the block's tokens are copied to shared memory once (cp.async, double
 * buffered) for all its warps, and each weight slice, loaded into registers once, serves GEMM_TOKENS / 16 passes
 * (16 tokens: 183 registers, no spills; 32 tokens compiled to 255 registers with spills, sm_90a, nvcc 13.0); the
 * weights' re-reads per token block come from L2 while that row block's token blocks run together.
 * Every (row, token) is summed in mma_w1's order (fp4_slice_mma per pass and slice, slices added in order), so the
 * bits are mma_w1's (test_cuda_ops checks it like every variant). */
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

bool fp4_run_gemm(const fp4_launch &a) {
    if (a.T < 16) return false;
    if (fp4_paired(a)) launch_gemm<true>(a.blocks, *a.seg, a.xs, a.S, a.T);
    else launch_gemm<false>(a.blocks, *a.seg, a.xs, a.S, a.T);
    return true;
}
