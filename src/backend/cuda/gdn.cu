/* Gated DeltaNet core: T tokens through the delta-rule recurrence, state S [Hv][Dk][Dv] in device memory, and the
 * output's gated RMSNorm, in one kernel.
 * Variants:
 *   0  gdn_head<DKMAX, EXACT>  (EXACT: Dk = DKMAX = 128 and Dv = 128 compiled in, the models' shape)
 *                       one block of 512 threads per v-head j: thread (p, c) = (tid / 128, tid % 128) keeps rows
 *                       p·R .. p·R + R-1 (R = DKMAX / 4) of state column c in registers for the whole call and walks
 *                       the tokens in order. Each token's two column sums over Dk (Sᵀk and Sᵀq) are 4 partial sums
 *                       (one per p) added in the order p = 0, 1, 2, 3 through shared memory; warps 0 and 1 compute
 *                       the l2 norms of q and k exactly as the old one-warp kernel did. Owning the whole head, the
 *                       block then norms its Dv outputs: the sum of squares is the old rmsnorm_gated_rows' at 128
 *                       threads (one element per thread of warps 0..3, warp sums combined as block_sum does), so
 *                       the output is that kernel's function of the recurrence output. Dv ≤ 128.
 *                       Each token's inputs are loaded while the token before is computed (gdn_load_token): a
 *                       call of T tokens waits out one L2 round trip, not T. The head's state is asked into the
 *                       L2 before the launch wait (l2_prefetch), with the conv state in conv1d.
 * Layouts that measured slower (a cluster of blocks per head, Dk split inside each warp) are listed in
 * docs/benchmarks.md "Tried and did not help".
 * The per-token arithmetic does not depend on T: T tokens in one call give the bits of T calls of one token,
 * which is what makes rollback (re-running the kept tokens) bit-exact.
 *   1  gdn_chunked<DK, VS> + gdn_norm_gated  (`chunked` under QRT_GDN_VARIANT=1, and where variant 2 cannot run;
 *                       Dk ≤ 128, 155 KiB of shared memory per block at Dk = 128: sm_80 and sm_90, not sm_86 / sm_89,
 *                       which run variant 0)
 *                       the chunked form on the tensor cores (3xTF32 mma.sync): one block of 256 threads per v-head
 *                       and VS columns of its state, which stay in shared memory while the block walks chunks of 64
 *                       tokens in order; the products inside a chunk, the triangular solve and the state's update
 *                       are described at the kernel. Its output is normed by a second small kernel (a block holds
 *                       only VS of a token's Dv outputs). It computes the recurrence's function in another order:
 *                       its state and outputs match the CPU's chunked form within f32 rounding (tests/test_cuda_ops.c),
 *                       not bit for bit, which is why decode and verify never take it.
 *   2  gdn_chunk_prep<DK, BF> + gdn_chunk_state<DK, VS, BF> + gdn_norm_gated  (`chunked`, prefill pieces; Dk ≤ 128;
 *                       falls back to variant 1 where its shared memory or scratch cannot be had)
 *                       variant 1's arithmetic in two kernels: the first, one block per (v-head, chunk) for all chunks
 *                       at once, computes what does not depend on the state (the normalised, decayed q and k, the
 *                       intra-chunk products, the triangular solve) into a device scratch; the second, one block per
 *                       (v-head, VS columns), walks the chunks in order doing only the products that need the state,
 *                       in two steps per chunk, copying each step's factors in while the step before computes. Its
 *                       state and outputs match the CPU's chunked form within f32 rounding, as variant 1's.
 *                       `2b` (QRT_GDN_VARIANT): the same kernels with every product in 3xBF16 on m16n8k16 (about
 *                       16 significant bits instead of 3xTF32's near-f32 precision, at half the tensor-core time
 *                       per product).
 * Per token: q, k l2-normalised in f32 (eps inside the sum), q scaled by 1/sqrt(Dk),
 * g = -exp(A_log)·softplus(a + dt_bias), β = sigmoid(b); S ← S·e^g; δ = β(v − Sᵀk); S += k δᵀ; o = Sᵀq;
 * out = w · (o · rsqrt(mean(o²) + eps)) · silu(z). */
#include "backend/cuda/cuda_internal.cuh"

extern "C" {
#include "util/common.h"
}

#define GDN_THREADS 512
#define GDN_COLS 128 /* columns per block: Dv ≤ 128 */
#define GDN_PARTS (GDN_THREADS / GDN_COLS)

__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* dst[i] = x[i] / ‖x‖ · scale for i < Dk ≤ 32·N, by one warp from its lane-strided registers v[e] = x[lane + 32e]
 * (0 past Dk; the old kernel's arithmetic: lane-strided fmaf, warp_sum). */
template <int N>
__device__ static void l2norm_warp(const float (&v)[N], int Dk, float scale, float *dst /* [Dk] shared */) {
    const int lane = threadIdx.x & 31;
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < N; e++)
        if (lane + 32 * e < Dk) ss = fmaf(v[e], v[e], ss);
    ss = warp_sum(ss);
    const float inv = 1.0f / sqrtf(ss + 1e-6f) * scale;
#pragma unroll
    for (int e = 0; e < N; e++)
        if (lane + 32 * e < Dk) dst[lane + 32 * e] = v[e] * inv;
}

/* One token's inputs as this thread reads them: warp 0 q and warp 1 k (lane-strided, N per lane), the column's v
 * and (p = 0) z, the head's a and b. Loaded one token ahead, so that a call of T tokens waits out the L2 round trip
 * once rather than per token (verify, rollback, prefill). */
template <int N> struct gdn_token_in {
    float qk[N], v, z, a, b;
};
template <int N>
__device__ __forceinline__ void gdn_load_token(gdn_token_in<N> &in, const float *qkv, const float *a, const float *b,
                                               const float *z, int t, int j, int kh, int c, int p, int warp, int Hk,
                                               int Hv, int Dk, int Dv) {
    const size_t row = 2 * (size_t)Hk * Dk + (size_t)Hv * Dv;
    const float *q = qkv + (size_t)t * row + (size_t)kh * Dk, *k = q + (size_t)Hk * Dk;
    const int lane = threadIdx.x & 31;
    if (warp < 2) {
#pragma unroll
        for (int e = 0; e < N; e++) in.qk[e] = lane + 32 * e < Dk ? (warp ? k : q)[lane + 32 * e] : 0.0f;
    }
    const bool col = c < Dv;
    in.v = col ? qkv[(size_t)t * row + 2 * (size_t)Hk * Dk + (size_t)j * Dv + c] : 0.0f;
    in.z = p == 0 && col ? z[((size_t)t * Hv + j) * Dv + c] : 0.0f;
    in.a = a[(size_t)t * Hv + j];
    in.b = b[(size_t)t * Hv + j];
}

/* Column c's sum of the 4 partials, in the order p = 0..3. */
__device__ __forceinline__ float sum_parts(const float (*part)[GDN_COLS], int c) {
    return ((part[0][c] + part[1][c]) + part[2][c]) + part[3][c];
}

/* EXACT: Dk = DKMAX and Dv = GDN_COLS (Qwen3.5/3.6: 128 and 128), known when compiling: every bound check folds away
 * and the state's row stride becomes an immediate (without it a third of the instructions are the state load's and
 * store's addressing and predicates); the arithmetic, so the bits, are the same. */
template <int DKMAX, bool EXACT>
__global__ void __launch_bounds__(GDN_THREADS) gdn_head(const float *qkv /* [T][2·Hk·Dk + Hv·Dv] */,
                                                        const float *a /* [T][Hv] */, const float *b /* [T][Hv] */,
                                                        const float *A_log /* [Hv] */, const float *dt_bias /* [Hv] */,
                                                        const float *S_in /* [Hv][Dk][Dv] */,
                                                        float *S /* [Hv][Dk][Dv] */, const float *z /* [T][Hv][Dv] */,
                                                        const float *norm_w /* [Dv] */, float eps, int T, int Hk,
                                                        int Hv, int Dk_arg, int Dv_arg, float *o /* [T][Hv][Dv] */) {
    const int Dk = EXACT ? DKMAX : Dk_arg, Dv = EXACT ? GDN_COLS : Dv_arg;
    const float *Sj_in = S_in + (size_t)blockIdx.x * Dk * Dv;
    if (threadIdx.x == 0) l2_prefetch(Sj_in, sizeof(float) * Dk * Dv);
    pdl_start();
    constexpr int R = DKMAX / GDN_PARTS;
    __shared__ float qs[DKMAX], ks[DKMAX];
    __shared__ float part_m[GDN_PARTS][GDN_COLS], part_o[GDN_PARTS][GDN_COLS];
    __shared__ float warp_ss[GDN_COLS / 32];
    const int j = blockIdx.x, c = threadIdx.x % GDN_COLS, p = threadIdx.x / GDN_COLS, warp = threadIdx.x >> 5;
    const int kh = j / (Hv / Hk); /* v-head j reads k-head j // (Hv/Hk) */
    const bool col = c < Dv;
    float *Sj = S + (size_t)j * Dk * Dv;
    float s[R]; /* rows p·R + r of column c of S_j */
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int i = p * R + r;
        s[r] = (col && i < Dk) ? Sj_in[(size_t)i * Dv + c] : 0.0f;
    }
    const float A = -expf(A_log[j]), dtb = dt_bias[j], qscale = 1.0f / sqrtf((float)Dk);
    const float wc = p == 0 && col ? norm_w[c] : 0.0f;
    gdn_token_in<DKMAX / 32> in, next;
    if (T > 0) gdn_load_token(next, qkv, a, b, z, 0, j, kh, c, p, warp, Hk, Hv, Dk, Dv);
    for (int t = 0; t < T; t++) {
        in = next;
        if (t + 1 < T) gdn_load_token(next, qkv, a, b, z, t + 1, j, kh, c, p, warp, Hk, Hv, Dk, Dv);
        const size_t at = ((size_t)t * Hv + j) * Dv + c;
        if (warp == 0) l2norm_warp(in.qk, Dk, qscale, qs);
        else if (warp == 1) l2norm_warp(in.qk, Dk, 1.0f, ks);
        const float g = A * softplus_f(in.a + dtb);
        const float beta = sigmoid_f(in.b);
        const float decay = expf(g);
        const float v = in.v, zc = in.z;
        __syncthreads(); /* qs, ks written */
        float m = 0.0f;
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int i = p * R + r;
            if (i < Dk) {
                s[r] *= decay;
                m = fmaf(s[r], ks[i], m);
            }
        }
        part_m[p][c] = m;
        __syncthreads();
        const float delta = beta * (v - sum_parts(part_m, c));
        float out = 0.0f;
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int i = p * R + r;
            if (i < Dk) {
                s[r] = fmaf(ks[i], delta, s[r]);
                out = fmaf(s[r], qs[i], out);
            }
        }
        part_o[p][c] = out;
        __syncthreads(); /* also: every read of qs, ks and part_m for this token is done */
        /* gated RMSNorm over the head's Dv outputs, by warps 0..3 (p = 0), one column each */
        const float y = sum_parts(part_o, c), yy = col ? y * y : 0.0f;
        if (p == 0) {
            const float w_ss = warp_sum(yy);
            if ((threadIdx.x & 31) == 0) warp_ss[warp] = w_ss;
        }
        __syncthreads();
        if (p == 0 && col) {
            const float ss = (warp_ss[0] + warp_ss[2]) + (warp_ss[1] + warp_ss[3]); /* block_sum's order at 4 warps */
            const float inv = 1.0f / sqrtf(ss / (float)Dv + eps);
            o[at] = wc * (y * inv) * silu_f(zc);
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int i = p * R + r;
        if (col && i < Dk) Sj[(size_t)i * Dv + c] = s[r];
    }
}

/* ---- the chunked form (prefill) ------------------------------------------------------------------------------ */

#define GDN_CHUNK 64           /* tokens per chunk, as the CPU backend's chunked form */
#define GDN_CHUNK_THREADS 256  /* 8 warps; the warp tilings below assume it */

__device__ __forceinline__ uint32_t to_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
/* x = big + small, both tf32: the three products big·big + big·small + small·big keep about f32's precision
 * (3xTF32), where one tf32 product keeps 11 bits */
__device__ __forceinline__ void split_tf32(float x, uint32_t &big, uint32_t &small) {
    big = to_tf32(x);
    small = to_tf32(x - __uint_as_float(big));
}

/* acc += A·B over k < K for one warp's tile of 16 rows × 8·NT columns, in 3xTF32 on m16n8k8: A(m, k) = A[m·AR + k·AC]
 * and B(k, n) = B[k·BR + n·BC] in shared memory, the pointers at the tile's corner (the strides make a transposed
 * operand free). acc[n][e] holds row g + 8·(e / 2), column 8n + 2t + e % 2 (g = lane / 4, t = lane % 4).
 * TWO: also acc2 += A2·B (A2 laid out as A), each fragment of B loaded and split once for both. */
template <int NT, int K, int AR, int AC, int BR, int BC, bool TWO>
__device__ __forceinline__ void warp_mma_3xtf32_two(float (&acc)[NT][4], const float *A, float (&acc2)[NT][4],
                                                    const float *A2, const float *B) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll 2
    for (int k0 = 0; k0 < K; k0 += 8) {
        uint32_t ab[4], as[4], cb[4], cs[4];
        split_tf32(A[g * AR + (k0 + t) * AC], ab[0], as[0]);
        split_tf32(A[(g + 8) * AR + (k0 + t) * AC], ab[1], as[1]);
        split_tf32(A[g * AR + (k0 + t + 4) * AC], ab[2], as[2]);
        split_tf32(A[(g + 8) * AR + (k0 + t + 4) * AC], ab[3], as[3]);
        if (TWO) {
            split_tf32(A2[g * AR + (k0 + t) * AC], cb[0], cs[0]);
            split_tf32(A2[(g + 8) * AR + (k0 + t) * AC], cb[1], cs[1]);
            split_tf32(A2[g * AR + (k0 + t + 4) * AC], cb[2], cs[2]);
            split_tf32(A2[(g + 8) * AR + (k0 + t + 4) * AC], cb[3], cs[3]);
        }
#pragma unroll
        for (int n = 0; n < NT; n++) {
            uint32_t bb[2], bs[2];
            split_tf32(B[(k0 + t) * BR + (8 * n + g) * BC], bb[0], bs[0]);
            split_tf32(B[(k0 + t + 4) * BR + (8 * n + g) * BC], bb[1], bs[1]);
            mma_tf32_1688(acc[n], as, bb[0], bb[1]);
            mma_tf32_1688(acc[n], ab, bs[0], bs[1]);
            mma_tf32_1688(acc[n], ab, bb[0], bb[1]);
            if (TWO) {
                mma_tf32_1688(acc2[n], cs, bb[0], bb[1]);
                mma_tf32_1688(acc2[n], cb, bs[0], bs[1]);
                mma_tf32_1688(acc2[n], cb, bb[0], bb[1]);
            }
        }
    }
}
template <int NT, int K, int AR, int AC, int BR, int BC>
__device__ __forceinline__ void warp_mma_3xtf32(float (&acc)[NT][4], const float *A, const float *B) {
    warp_mma_3xtf32_two<NT, K, AR, AC, BR, BC, false>(acc, A, acc, A, B);
}

/* warp_mma_3xtf32_two's products (same operands, strides and accumulator layout) in 3xBF16 on m16n8k16: x = hi + lo,
 * bf16 each, and hi·hi + hi·lo + lo·hi keep about 16 significant bits (3xTF32: about f32's precision) at twice tf32's
 * tensor-core rate per mma. Register r of A holds row g + 8·(r % 2), elements k0 + 2t + 8·(r / 2) and the next; B's
 * two hold column g, elements k0 + 2t (and + 1) and k0 + 2t + 8 (and + 9). K a multiple of 16. */
template <int NT, int K, int AR, int AC, int BR, int BC, bool TWO>
__device__ __forceinline__ void warp_mma_3xbf16_two(float (&acc)[NT][4], const float *A, float (&acc2)[NT][4],
                                                    const float *A2, const float *B) {
    static_assert(K % 16 == 0, "k steps of 16");
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll 2
    for (int k0 = 0; k0 < K; k0 += 16) {
        uint32_t ab[4], as[4], cb[4], cs[4];
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int m = g + 8 * (r & 1), k = k0 + 2 * t + 8 * (r >> 1);
            split_bf16x2(A[m * AR + k * AC], A[m * AR + (k + 1) * AC], ab[r], as[r]);
            if (TWO) split_bf16x2(A2[m * AR + k * AC], A2[m * AR + (k + 1) * AC], cb[r], cs[r]);
        }
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const float *Bn = B + (8 * n + g) * BC;
            uint32_t bb[2], bs[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int k = k0 + 2 * t + 8 * r;
                split_bf16x2(Bn[k * BR], Bn[(k + 1) * BR], bb[r], bs[r]);
            }
            mma_bf16_16816(acc[n], as, bb[0], bb[1]);
            mma_bf16_16816(acc[n], ab, bs[0], bs[1]);
            mma_bf16_16816(acc[n], ab, bb[0], bb[1]);
            if (TWO) {
                mma_bf16_16816(acc2[n], cs, bb[0], bb[1]);
                mma_bf16_16816(acc2[n], cb, bs[0], bs[1]);
                mma_bf16_16816(acc2[n], cb, bb[0], bb[1]);
            }
        }
    }
}

/* The products of variant 2 in 3xTF32 (BF false) or 3xBF16 (BF true) */
template <bool BF, int NT, int K, int AR, int AC, int BR, int BC, bool TWO>
__device__ __forceinline__ void warp_mma_split_two(float (&acc)[NT][4], const float *A, float (&acc2)[NT][4],
                                                   const float *A2, const float *B) {
    if constexpr (BF) warp_mma_3xbf16_two<NT, K, AR, AC, BR, BC, TWO>(acc, A, acc2, A2, B);
    else warp_mma_3xtf32_two<NT, K, AR, AC, BR, BC, TWO>(acc, A, acc2, A2, B);
}
template <bool BF, int NT, int K, int AR, int AC, int BR, int BC>
__device__ __forceinline__ void warp_mma_split(float (&acc)[NT][4], const float *A, const float *B) {
    warp_mma_split_two<BF, NT, K, AR, AC, BR, BC, false>(acc, A, acc, A, B);
}

/* f(v, row, column) for each element v of a warp's accumulator tile acc (warp_mma_3xtf32's layout) */
template <int NT, typename F> __device__ __forceinline__ void for_each_acc(float (&acc)[NT][4], F f) {
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) f(acc[n][e], g + 8 * (e >> 1), 8 * n + 2 * t + (e & 1));
}

/* ---- one chunk's state-independent steps, shared by variants 1 and 2 ---------------------------------------- */

/* Row strides in shared memory, in floats: 4 (rows read as an mma's A) or 8 (read as its B) more than a multiple of
 * 32, so that a fragment's 32 loads fall in 32 banks. LQ: rows of q, k, W (Dk ≤ DK); LA: rows of A and P. */
template <int DK> struct gdn_strides {
    static constexpr int LQ = DK + 4;
};
#define GDN_LA (GDN_CHUNK + 4)
#define GDN_TPW (GDN_CHUNK / (GDN_CHUNK_THREADS / 32)) /* tokens per warp in a chunk's loads */

/* Tokens warp + NW·u (u < GDN_TPW) of the chunk at c0 (n of them real, the rest zeros): q and k of k-head kh into
 * registers, every load issued before the first use (one round trip to the L2 per chunk, not one per token). */
template <int DK>
__device__ __forceinline__ void gdn_chunk_load_qk(float (&qv)[GDN_TPW][DK / 32],
                                                  float (&kv)[GDN_TPW][DK / 32], const float *qkv, size_t row,
                                                  int c0, int n, int kh, int Hk, int Dk) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int u = 0; u < GDN_TPW; u++) {
        const int i = warp + (GDN_CHUNK_THREADS / 32) * u;
        const float *q = qkv + (size_t)(c0 + i) * row + (size_t)kh * Dk, *k = q + (size_t)Hk * Dk;
#pragma unroll
        for (int e = 0; e < DK / 32; e++) {
            const bool in = i < n && lane + 32 * e < Dk;
            qv[u][e] = in ? q[lane + 32 * e] : 0.0f;
            kv[u][e] = in ? k[lane + 32 * e] : 0.0f;
        }
    }
}

/* The registers of gdn_chunk_load_qk l2-normalised (q also · qscale = 1/√Dk) into Qs and Ks [C][LQ] (zeros past
 * Dk) */
template <int DK>
__device__ __forceinline__ void gdn_chunk_store_qk(const float (&qv)[GDN_TPW][DK / 32],
                                                   const float (&kv)[GDN_TPW][DK / 32], float qscale, float *Qs,
                                                   float *Ks) {
    constexpr int LQ = gdn_strides<DK>::LQ;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int u = 0; u < GDN_TPW; u++) {
        const int i = warp + (GDN_CHUNK_THREADS / 32) * u;
        float qss = 0.0f, kss = 0.0f;
#pragma unroll
        for (int e = 0; e < DK / 32; e++) {
            qss = fmaf(qv[u][e], qv[u][e], qss);
            kss = fmaf(kv[u][e], kv[u][e], kss);
        }
        const float qinv = 1.0f / sqrtf(warp_sum(qss) + 1e-6f) * qscale, kinv = 1.0f / sqrtf(warp_sum(kss) + 1e-6f);
#pragma unroll
        for (int e = 0; e < DK / 32; e++) {
            Qs[i * LQ + lane + 32 * e] = qv[u][e] * qinv;
            Ks[i * LQ + lane + 32 * e] = kv[u][e] * kinv;
        }
    }
}

/* By warp 0: g and β of the chunk's tokens (lane and lane + 32; 0 past n) of v-head j, and γ, the running sum of g,
 * into gam and beta [C]. Returns γlast (every lane). */
__device__ __forceinline__ float gdn_chunk_gates(const float *a, const float *b, float Aj, float dtb, int c0, int n,
                                                 int Hv, int j, float *gam, float *beta) {
    const int lane = threadIdx.x & 31;
    float gl[2], run = 0.0f;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int i = lane + 32 * h;
        const size_t at = (size_t)(c0 + i) * Hv + j;
        gl[h] = i < n ? Aj * softplus_f(a[at] + dtb) : 0.0f;
        beta[i] = i < n ? sigmoid_f(b[at]) : 0.0f;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const float up = __shfl_up_sync(0xffffffffu, gl[h], off);
            if (lane >= off) gl[h] += up;
        }
        gam[i] = run + gl[h];
        run += __shfl_sync(0xffffffffu, gl[h], 31);
    }
    return run;
}

/* A = strict_lower(β K Kᵀ ⊙ e^{γi−γj}) into Am [C][LA] and P = lower(Q Kᵀ ⊙ e^{γi−γj}) into P [C][ldp], from Qs, Ks
 * [C][LQ]; warp w computes rows 16·(w % 4).., columns 32·(w / 4).. */
template <int DK, bool BF>
__device__ __forceinline__ void gdn_chunk_gram(const float *Qs, const float *Ks, const float *gam, const float *beta,
                                               float *Am, float *P, int ldp) {
    constexpr int LQ = gdn_strides<DK>::LQ, LA = GDN_LA;
    const int warp = threadIdx.x >> 5, om = 16 * (warp & 3), gn = 32 * (warp >> 2);
    float accG[4][4] = {}, accP[4][4] = {};
    warp_mma_split<BF, 4, DK, LQ, 1, 1, LQ>(accG, Ks + om * LQ, Ks + gn * LQ);
    warp_mma_split<BF, 4, DK, LQ, 1, 1, LQ>(accP, Qs + om * LQ, Ks + gn * LQ);
    for_each_acc(accG, [&](float v, int r, int c) {
        r += om, c += gn;
        Am[r * LA + c] = c < r ? beta[r] * v * expf(gam[r] - gam[c]) : 0.0f;
    });
    for_each_acc(accP, [&](float v, int r, int c) {
        r += om, c += gn;
        P[r * ldp + c] = c <= r ? v * expf(gam[r] - gam[c]) : 0.0f;
    });
}

/* x ← (I+A)⁻¹ x for one column x [C] in registers (forward substitution in f32; A strictly lower, Am [C][LA]) */
__device__ __forceinline__ void gdn_solve_column(float (&x)[GDN_CHUNK], const float *Am) {
    constexpr int LA = GDN_LA;
#pragma unroll
    for (int i = 1; i < GDN_CHUNK; i++) {
        const float4 *ar = reinterpret_cast<const float4 *>(Am + i * LA);
        float s4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int q = 0; q < i; q += 4) {
            const float4 a4 = ar[q / 4];
            const float av[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
            for (int u = 0; u < 4; u++)
                if (q + u < i) s4[u] = fmaf(av[u], x[q + u], s4[u]);
        }
        x[i] -= (s4[0] + s4[1]) + (s4[2] + s4[3]);
    }
}

/* Shared memory of gdn_chunked<DK, VS>, in floats (strides as gdn_strides') */
template <int DK, int VS> struct gdn_chunk_layout {
    static constexpr int C = GDN_CHUNK, LQ = gdn_strides<DK>::LQ, LU = VS + 8, LA = GDN_LA;
    static constexpr int QW = 0, K = QW + C * LQ, U = K + C * LQ, S = U + C * LU, A = S + DK * LU, P = A + C * LA,
                         GAM = P + C * LA, BETA = GAM + C, FLOATS = BETA + C;
};

/* Variant 1, gdn_chunked<DK, VS>: the chunked form (HF's torch_chunk_gated_delta_rule, the CPU backend's
 * gdn_chunk_head) for Dk ≤ DK, on the columns v0 .. v0 + VS - 1 of v-head j's state (block (j, v0 / VS)), which stay
 * in shared memory while the block walks the chunks of 64 tokens in order. Per chunk, with γ the running sum of g
 * inside the chunk:
 *   load:   q, k l2-normalised (q · 1/√Dk), v, and (warp 0) g, β, γ
 *   mma:    G = K Kᵀ, P = Q Kᵀ, O = Q S;  A = strict_lower(β G ⊙ e^{γi−γj}), P = lower(P ⊙ e^{γi−γj})
 *   solve:  W = (I+A)⁻¹(β e^γ K), U = (I+A)⁻¹(β V), one thread per column (forward substitution in f32)
 *   mma:    V' = U − W S;  K ← e^{γlast−γ} K
 *   mma:    O = e^γ O + P V' (to o, before the norm);  S ← e^{γlast} S + Kᵀ V'
 * The products run on the tensor cores in 3xTF32 (about f32's precision: the state is carried through every chunk of a
 * long prompt, and decode continues from it). Tokens past T in the last chunk are zeros with g = β = 0, as on the
 * CPU. The output's gated norm is gdn_norm_gated's, after. */
template <int DK, int VS>
__global__ void __launch_bounds__(GDN_CHUNK_THREADS, 1)
    gdn_chunked(const float *qkv /* [T][2·Hk·Dk + Hv·Dv] */, const float *a /* [T][Hv] */, const float *b /* [T][Hv] */,
                const float *A_log /* [Hv] */, const float *dt_bias /* [Hv] */, const float *S_in /* [Hv][Dk][Dv] */,
                float *S /* [Hv][Dk][Dv] */, int T, int Hk, int Hv, int Dk, int Dv, float *o /* [T][Hv][Dv] */) {
    using L = gdn_chunk_layout<DK, VS>;
    constexpr int C = L::C, LQ = L::LQ, LU = L::LU, LA = L::LA, NW = GDN_CHUNK_THREADS / 32;
    extern __shared__ float4 smem4[];
    float *sm = reinterpret_cast<float *>(smem4);
    float *QW = sm + L::QW; /* [C][LQ] normalised q, then W */
    float *Ks = sm + L::K;  /* [C][LQ] normalised k, then e^{γlast−γ} k */
    float *Us = sm + L::U;  /* [C][LU] v, then U, then V' */
    float *Ss = sm + L::S;  /* [DK][LU] the state's columns v0.. */
    float *Am = sm + L::A, *Pm = sm + L::P;       /* [C][LA] */
    float *gam = sm + L::GAM, *beta = sm + L::BETA; /* [C] */
    const int j = blockIdx.x, v0 = blockIdx.y * VS, kh = j / (Hv / Hk);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const size_t row = 2 * (size_t)Hk * Dk + (size_t)Hv * Dv;
    pdl_start();
    for (int e = tid; e < DK * VS; e += GDN_CHUNK_THREADS) {
        const int d = e / VS, c = e % VS;
        Ss[d * LU + c] = d < Dk && v0 + c < Dv ? S_in[((size_t)j * Dk + d) * Dv + v0 + c] : 0.0f;
    }
    const float Aj = -expf(A_log[j]), dtb = dt_bias[j], qscale = 1.0f / sqrtf((float)Dk);
    /* warp tiles: O and V' (C × VS) rows om.., columns on..; the state (DK × VS) rows sm0.., columns sn0.. (G and P:
     * gdn_chunk_gram's) */
    constexpr int NTO = VS / 16, WPM = NW / (DK / 16), NTS = VS / 8 / WPM;
    static_assert(NTS >= 1 && DK % 32 == 0 && VS % 16 == 0 && DK + VS <= GDN_CHUNK_THREADS, "tiling");
    const int om = 16 * (warp & 3), on = (warp >> 2) * (VS / 2);
    const int sm0 = 16 * (warp / WPM), sn0 = (warp % WPM) * NTS * 8;
    for (int c0 = 0; c0 < T; c0 += C) {
        const int n = min(C, T - c0);
        /* load: q, k, and v's columns v0.., every load issued before the first use */
        constexpr int TPW = GDN_TPW, VE = (VS + 31) / 32;
        float qv[TPW][DK / 32], kv[TPW][DK / 32], vv[TPW][VE];
        gdn_chunk_load_qk<DK>(qv, kv, qkv, row, c0, n, kh, Hk, Dk);
#pragma unroll
        for (int u = 0; u < TPW; u++) {
            const int i = warp + NW * u;
            const float *v = qkv + (size_t)(c0 + i) * row + 2 * (size_t)Hk * Dk + (size_t)j * Dv + v0;
#pragma unroll
            for (int e = 0; e < VE; e++) {
                const int c = lane + 32 * e;
                vv[u][e] = i < n && c < VS && v0 + c < Dv ? v[c] : 0.0f;
            }
        }
        if (warp == 0) gdn_chunk_gates(a, b, Aj, dtb, c0, n, Hv, j, gam, beta);
        gdn_chunk_store_qk<DK>(qv, kv, qscale, QW, Ks);
#pragma unroll
        for (int u = 0; u < TPW; u++) {
            const int i = warp + NW * u;
#pragma unroll
            for (int e = 0; e < VE; e++)
                if (lane + 32 * e < VS) Us[i * LU + lane + 32 * e] = vv[u][e];
        }
        __syncthreads();
        /* G, P and O = Q S */
        float accO[NTO][4] = {};
        gdn_chunk_gram<DK, false>(QW, Ks, gam, beta, Am, Pm, LA);
        warp_mma_3xtf32<NTO, DK, LQ, 1, LU, 1>(accO, QW + om * LQ, Ss + on);
        __syncthreads();
        /* solve: W into QW (q is read), U in place */
        if (tid < DK + VS) {
            const bool wcol = tid < DK;
            const int c = wcol ? tid : tid - DK;
            float *col = wcol ? QW + c : Us + c;
            const int ld = wcol ? LQ : LU;
            float x[C];
#pragma unroll
            for (int i = 0; i < C; i++) x[i] = wcol ? beta[i] * expf(gam[i]) * Ks[i * LQ + c] : beta[i] * Us[i * LU + c];
            gdn_solve_column(x, Am);
#pragma unroll
            for (int i = 0; i < C; i++) col[i * ld] = x[i];
        }
        __syncthreads();
        /* V' = U − W S; K ← e^{γlast−γ} K */
        {
            float acc[NTO][4] = {};
            warp_mma_3xtf32<NTO, DK, LQ, 1, LU, 1>(acc, QW + om * LQ, Ss + on);
            for_each_acc(acc, [&](float v, int r, int c) { Us[(om + r) * LU + on + c] -= v; });
            const float glast = gam[C - 1];
            for (int e = tid; e < C * DK; e += GDN_CHUNK_THREADS) {
                const int i = e / DK, d = e % DK;
                Ks[i * LQ + d] *= expf(glast - gam[i]);
            }
        }
        __syncthreads();
        /* O = e^γ O + P V'; S ← e^{γlast} S + Kᵀ V' (each warp reads and writes only its own tile of S) */
        {
            for_each_acc(accO, [&](float &v, int r, int) { v *= expf(gam[om + r]); });
            warp_mma_3xtf32<NTO, C, LA, 1, LU, 1>(accO, Pm + om * LA, Us + on);
            for_each_acc(accO, [&](float v, int r, int c) {
                r += om, c += on;
                if (r < n && v0 + c < Dv) o[((size_t)(c0 + r) * Hv + j) * Dv + v0 + c] = v;
            });
            const float elast = expf(gam[C - 1]);
            float accS[NTS][4];
            for_each_acc(accS, [&](float &v, int r, int c) { v = elast * Ss[(sm0 + r) * LU + sn0 + c]; });
            warp_mma_3xtf32<NTS, C, 1, LQ, LU, 1>(accS, Ks + sm0, Us + sn0);
            for_each_acc(accS, [&](float v, int r, int c) { Ss[(sm0 + r) * LU + sn0 + c] = v; });
        }
        __syncthreads(); /* the next chunk's load overwrites q, k, v */
    }
    for (int e = tid; e < DK * VS; e += GDN_CHUNK_THREADS) {
        const int d = e / VS, c = e % VS;
        if (d < Dk && v0 + c < Dv) S[((size_t)j * Dk + d) * Dv + v0 + c] = Ss[d * LU + c];
    }
}

/* The output's gated RMSNorm after gdn_chunked, in place: one warp per row of Dv, o = w · (o · rsqrt(mean(o²) + eps))
 * · silu(z) (the CPU's rmsnorm_gated; gdn_head applies the same inside its token loop). */
__global__ void gdn_norm_gated(float *o /* [rows][Dv] */, const float *z /* [rows][Dv] */, const float *w /* [Dv] */,
                               int rows, int Dv, float eps) {
    pdl_start();
    const int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (r >= rows) return;
    float *orow = o + (size_t)r * Dv;
    const float *zrow = z + (size_t)r * Dv;
    float ss = 0.0f;
    for (int c = lane; c < Dv; c += 32) ss = fmaf(orow[c], orow[c], ss);
    const float inv = 1.0f / sqrtf(warp_sum(ss) / (float)Dv + eps);
    for (int c = lane; c < Dv; c += 32) orow[c] = w[c] * (orow[c] * inv) * silu_f(zrow[c]);
}

/* ---- the chunked form in two phases (variant 2) -------------------------------------------------------------- */

/* What gdn_chunk_prep leaves for gdn_chunk_state, per (v-head, chunk), in floats: the S-independent factors of the
 * chunk's products, rows of DK (zero past Dk) or of GDN_COLS (U, zero past Dv), so that every row starts 16-byte
 * aligned for cp.async and every column slice of U exists. */
template <int DK> struct gdn_prep_layout {
    static constexpr int C = GDN_CHUNK, W = 0, Q = W + C * DK, K = Q + C * DK, P = K + C * DK, U = P + C * C,
                         FLOATS = U + C * GDN_COLS;
};

/* Shared memory of gdn_chunk_prep<DK>, in floats (strides as gdn_strides') */
template <int DK> struct gdn_prep_smem {
    static constexpr int C = GDN_CHUNK, LQ = gdn_strides<DK>::LQ, LA = GDN_LA;
    static constexpr int Q = 0, K = Q + C * LQ, A = K + C * LQ, GAM = A + C * LA, BETA = GAM + C, EG = BETA + C,
                         ED = EG + C, FLOATS = ED + C;
};

/* Variant 2, phase A, gdn_chunk_prep<DK>: block (chunk, v-head j) computes what variant 1 computes per chunk before
 * the state enters, for every chunk of the call at once (nothing here waits for the chunk before):
 *   Qd = e^γ Q,  Kd = e^{γlast−γ} K,  P = lower(Q Kᵀ ⊙ e^{γi−γj}),
 *   W = (I+A)⁻¹(β e^γ K),  U = (I+A)⁻¹(β V) over all Dv columns  (A = strict_lower(β K Kᵀ ⊙ e^{γi−γj})),
 * and γlast, into pr [Hv][chunks][gdn_prep_layout] and glast [Hv][chunks]. q, k and g, β, γ are loaded and formed
 * exactly as variant 1 forms them; the solve is its forward substitution, one thread per column of W (tid < DK) and
 * of U (DK ≤ tid < DK + GDN_COLS: the block's 256 threads cover both at DK = 128). */
template <int DK, bool BF>
__global__ void __launch_bounds__(GDN_CHUNK_THREADS, 2)
    gdn_chunk_prep(const float *qkv /* [T][2·Hk·Dk + Hv·Dv] */, const float *a /* [T][Hv] */,
                   const float *b /* [T][Hv] */, const float *A_log /* [Hv] */, const float *dt_bias /* [Hv] */, int T,
                   int Hk, int Hv, int Dk, int Dv, float *pr /* [Hv][chunks][gdn_prep_layout<DK>::FLOATS] */,
                   float *glast /* [Hv][chunks] */) {
    using L = gdn_prep_smem<DK>;
    using G = gdn_prep_layout<DK>;
    constexpr int C = L::C, LQ = L::LQ;
    static_assert(DK % 32 == 0 && DK + GDN_COLS <= GDN_CHUNK_THREADS, "one solve thread per column of W and U");
    extern __shared__ float4 smem4[];
    float *sm = reinterpret_cast<float *>(smem4);
    float *Qs = sm + L::Q, *Ks = sm + L::K, *Am = sm + L::A; /* [C][LQ], [C][LQ], [C][LA] */
    float *gam = sm + L::GAM, *beta = sm + L::BETA;          /* [C] γ, β */
    float *eg = sm + L::EG, *ed = sm + L::ED;                /* [C] e^γ, e^{γlast−γ} */
    const int ch = blockIdx.x, chunks = gridDim.x, j = blockIdx.y, c0 = ch * C, n = min(C, T - c0);
    const int kh = j / (Hv / Hk), tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const size_t row = 2 * (size_t)Hk * Dk + (size_t)Hv * Dv;
    float *out = pr + ((size_t)j * chunks + ch) * G::FLOATS;
    pdl_start();
    const float Aj = -expf(A_log[j]), dtb = dt_bias[j], qscale = 1.0f / sqrtf((float)Dk);
    float qv[GDN_TPW][DK / 32], kv[GDN_TPW][DK / 32];
    gdn_chunk_load_qk<DK>(qv, kv, qkv, row, c0, n, kh, Hk, Dk);
    if (warp == 0) { /* g, β, γ; the decays the outputs need */
        const float last = gdn_chunk_gates(a, b, Aj, dtb, c0, n, Hv, j, gam, beta);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int i = lane + 32 * h; /* gam[i] was written by this lane */
            eg[i] = expf(gam[i]);
            ed[i] = expf(last - gam[i]);
        }
        if (lane == 0) glast[(size_t)j * chunks + ch] = last;
    }
    gdn_chunk_store_qk<DK>(qv, kv, qscale, Qs, Ks);
    __syncthreads();
    gdn_chunk_gram<DK, BF>(Qs, Ks, gam, beta, Am, out + G::P, C); /* A into shared memory, P straight out */
    for (int e = tid; e < C * DK; e += GDN_CHUNK_THREADS) {
        const int i = e / DK, d = e % DK;
        out[G::Q + e] = eg[i] * Qs[i * LQ + d];
        out[G::K + e] = ed[i] * Ks[i * LQ + d];
    }
    __syncthreads();
    /* solve: column tid of W (tid < DK) or column tid − DK of U, from registers straight out */
    if (tid < DK + GDN_COLS) {
        const bool wcol = tid < DK;
        const int c = wcol ? tid : tid - DK;
        const float *v = qkv + (size_t)c0 * row + 2 * (size_t)Hk * Dk + (size_t)j * Dv + c;
        float x[C];
#pragma unroll
        for (int i = 0; i < C; i++)
            x[i] = wcol ? beta[i] * eg[i] * Ks[i * LQ + c] : i < n && c < Dv ? beta[i] * v[(size_t)i * row] : 0.0f;
        gdn_solve_column(x, Am);
        float *col = wcol ? out + G::W + c : out + G::U + c;
        const int ld = wcol ? DK : GDN_COLS;
#pragma unroll
        for (int i = 0; i < C; i++) col[i * ld] = x[i];
    }
}

/* rows × COLS floats (COLS a multiple of 4) from global rows of stride ldg into shared rows of stride lds, by the
 * block, 16 bytes per cp.async (every row 16-byte aligned on both sides) */
template <int COLS>
__device__ __forceinline__ void gdn_copy_rows(float *dst, int lds, const float *src, int ldg, int rows) {
    constexpr int Q = COLS / 4;
    for (int e = threadIdx.x; e < rows * Q; e += blockDim.x) {
        const int r = e / Q, q = e % Q;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst + r * lds + 4 * q)),
                     "l"(src + (size_t)r * ldg + 4 * q)
                     : "memory");
    }
}
__device__ __forceinline__ void gdn_copy_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* every copy group but the newest N has landed (this thread's copies; a __syncthreads after makes them the block's) */
template <int N> __device__ __forceinline__ void gdn_copy_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Shared memory of gdn_chunk_state<DK, VS>, in floats (strides as gdn_strides') */
template <int DK, int VS> struct gdn_state_layout {
    static constexpr int C = GDN_CHUNK, LQ = gdn_strides<DK>::LQ, LU = VS + 8, LA = GDN_LA;
    static constexpr int W = 0, Q = W + C * LQ, K = Q + C * LQ, P = K + C * LQ, U = P + C * LA, V = U + C * LU,
                         S = V + C * LU, FLOATS = S + DK * LU;
};

/* Variant 2, phase B, gdn_chunk_state<DK, VS>: block (v-head j, columns v0 .. v0 + VS - 1 of its state) walks the
 * chunks in order doing only what needs the state, from gdn_chunk_prep's factors, in two steps:
 *   1: W S and Qd S in one pass over S's fragments;  V' = U − W S
 *   2: O = Qd S + P V' (to o, before the norm);  S ← e^{γlast} S + Kdᵀ V' (each warp its own tile of S)
 * (3xTF32; variant 1's warp tiles). Each chunk's factors are copied in (cp.async) while the step before computes: W,
 * U and Qd of the next chunk during step 2, its P and Kd during the next step 1; a step begins once the one group in
 * flight has landed (wait_group 0) and the block has synchronised. */
template <int DK, int VS, bool BF>
__global__ void __launch_bounds__(GDN_CHUNK_THREADS, 1)
    gdn_chunk_state(const float *pr /* [Hv][chunks][gdn_prep_layout<DK>::FLOATS] */,
                    const float *glast /* [Hv][chunks] */, const float *S_in /* [Hv][Dk][Dv] */,
                    float *S /* [Hv][Dk][Dv] */, int T, int Hv, int Dk, int Dv, float *o /* [T][Hv][Dv] */) {
    using L = gdn_state_layout<DK, VS>;
    using G = gdn_prep_layout<DK>;
    constexpr int C = L::C, LQ = L::LQ, LU = L::LU, LA = L::LA, NW = GDN_CHUNK_THREADS / 32;
    extern __shared__ float4 smem4[];
    float *sm = reinterpret_cast<float *>(smem4);
    float *Wm = sm + L::W, *Qm = sm + L::Q, *Km = sm + L::K; /* [C][LQ] */
    float *Pm = sm + L::P;                                   /* [C][LA] */
    float *Um = sm + L::U, *Vn = sm + L::V;                  /* [C][LU] U's columns v0.., V' */
    float *Ss = sm + L::S;                                   /* [DK][LU] the state's columns v0.. */
    const int j = blockIdx.x, v0 = blockIdx.y * VS, tid = threadIdx.x, warp = tid >> 5;
    const int chunks = (T + C - 1) / C;
    const float *prj = pr + (size_t)j * chunks * G::FLOATS;
    constexpr int NTO = VS / 16, WPM = NW / (DK / 16), NTS = VS / 8 / WPM;
    static_assert(NTS >= 1 && DK % 32 == 0 && VS % 16 == 0, "tiling");
    const int om = 16 * (warp & 3), on = (warp >> 2) * (VS / 2);
    const int sm0 = 16 * (warp / WPM), sn0 = (warp % WPM) * NTS * 8;
    pdl_start();
    gdn_copy_rows<DK>(Wm, LQ, prj + G::W, DK, C);
    gdn_copy_rows<VS>(Um, LU, prj + G::U + v0, GDN_COLS, C);
    gdn_copy_rows<DK>(Qm, LQ, prj + G::Q, DK, C);
    gdn_copy_commit();
    gdn_copy_rows<C>(Pm, LA, prj + G::P, C, C);
    gdn_copy_rows<DK>(Km, LQ, prj + G::K, DK, C);
    gdn_copy_commit();
    for (int e = tid; e < DK * VS; e += GDN_CHUNK_THREADS) {
        const int d = e / VS, c = e % VS;
        Ss[d * LU + c] = d < Dk && v0 + c < Dv ? S_in[((size_t)j * Dk + d) * Dv + v0 + c] : 0.0f;
    }
    gdn_copy_wait<1>();
    __syncthreads(); /* W, U, Qd of chunk 0 and the state */
    for (int ch = 0; ch < chunks; ch++) {
        const int c0 = ch * C, n = min(C, T - c0);
        const float gl = glast[(size_t)j * chunks + ch]; /* asked for here, used in step 2 */
        const float *next = ch + 1 < chunks ? prj + (size_t)(ch + 1) * G::FLOATS : NULL;
        float accO[NTO][4] = {};
        { /* step 1 */
            float accV[NTO][4] = {};
            warp_mma_split_two<BF, NTO, DK, LQ, 1, LU, 1, true>(accV, Wm + om * LQ, accO, Qm + om * LQ, Ss + on);
            for_each_acc(accV, [&](float v, int r, int c) {
                r += om, c += on;
                Vn[r * LU + c] = Um[r * LU + c] - v;
            });
        }
        gdn_copy_wait<0>();
        __syncthreads(); /* V' whole; W, U, Qd and S read; P, Kd landed */
        if (next) {
            gdn_copy_rows<DK>(Wm, LQ, next + G::W, DK, C);
            gdn_copy_rows<VS>(Um, LU, next + G::U + v0, GDN_COLS, C);
            gdn_copy_rows<DK>(Qm, LQ, next + G::Q, DK, C);
        }
        gdn_copy_commit();
        { /* step 2 */
            warp_mma_split<BF, NTO, C, LA, 1, LU, 1>(accO, Pm + om * LA, Vn + on);
            for_each_acc(accO, [&](float v, int r, int c) {
                r += om, c += on;
                if (r < n && v0 + c < Dv) o[((size_t)(c0 + r) * Hv + j) * Dv + v0 + c] = v;
            });
            const float elast = expf(gl);
            float accS[NTS][4];
            for_each_acc(accS, [&](float &v, int r, int c) { v = elast * Ss[(sm0 + r) * LU + sn0 + c]; });
            warp_mma_split<BF, NTS, C, 1, LQ, LU, 1>(accS, Km + sm0, Vn + sn0);
            for_each_acc(accS, [&](float v, int r, int c) { Ss[(sm0 + r) * LU + sn0 + c] = v; });
        }
        gdn_copy_wait<0>();
        __syncthreads(); /* S whole; P, Kd and V' read; the next W, U, Qd landed */
        if (next) {
            gdn_copy_rows<C>(Pm, LA, next + G::P, C, C);
            gdn_copy_rows<DK>(Km, LQ, next + G::K, DK, C);
        }
        gdn_copy_commit();
    }
    gdn_copy_wait<0>(); /* nothing is in flight past the last chunk; none outlives the block */
    for (int e = tid; e < DK * VS; e += GDN_CHUNK_THREADS) {
        const int d = e / VS, c = e % VS;
        if (d < Dk && v0 + c < Dv) S[((size_t)j * Dk + d) * Dv + v0 + c] = Ss[d * LU + c];
    }
}

/* Variant 1; false, launching nothing, where the shared memory cannot be had */
template <int DK, int VS>
static bool gdn_chunked_launch(const float *qkv, const float *a, const float *b, const float *A_log,
                               const float *dt_bias, const float *S_in, float *S, int T, int Hk, int Hv, int Dk, int Dv,
                               float *o) {
    const size_t smem = sizeof(float) * gdn_chunk_layout<DK, VS>::FLOATS;
    static int asked = 0;
    if (!smem_allow(gdn_chunked<DK, VS>, smem, &asked)) return false;
    const dim3 grid((unsigned)Hv, (unsigned)((Dv + VS - 1) / VS));
    QRT_LAUNCH(gdn_chunked<DK, VS>, grid, GDN_CHUNK_THREADS, smem, qkv, a, b, A_log, dt_bias, S_in, S, T, Hk, Hv, Dk,
               Dv, o);
    return true;
}

/* Variant 2's factors (gdn_chunk_prep's output, then γlast), grown on demand to the largest segment: one of 2048
 * tokens at the 27B's 48 heads of Dk = 128 asks for 48 · 32 · 36864 floats, 216 MiB. It is made at the first
 * chunked call, which is a prefill's, never while a graph is recorded (a recorded key ran plainly first and grew it);
 * a move is reported to the graph epoch. NULL (nothing kept) when the device cannot hold it. */
static float *prep_buf = NULL;
static size_t prep_floats = 0;

static float *gdn_prep_scratch(size_t floats) {
    if (floats <= prep_floats) return prep_buf;
    if (prep_buf) QRT_CUDA_CHECK(cudaFree(prep_buf));
    prep_buf = NULL, prep_floats = 0;
    qrt_cuda_scratch_moved();
    if (cudaMalloc(&prep_buf, floats * sizeof(float)) != cudaSuccess) {
        cudaGetLastError(); /* the caller falls back to variant 1, which needs no scratch */
        prep_buf = NULL;
        return NULL;
    }
    prep_floats = floats;
    return prep_buf;
}

/* Variant 2 takes a call in segments of at most this many tokens, each segment's factors made and used before the
 * next segment's, so that its scratch (216 MiB at the 27B's shape) stays the same for pieces of up to 8192 tokens */
#define GDN_SEG_TOKENS 2048

/* Variant 2; false, launching nothing, where the shared memory or the scratch cannot be had */
template <int DK, int VS, bool BF>
static bool gdn_two_phase_launch(const float *qkv, const float *a, const float *b, const float *A_log,
                                 const float *dt_bias, const float *S_in, float *S, int T, int Hk, int Hv, int Dk,
                                 int Dv, float *o) {
    using G = gdn_prep_layout<DK>;
    const size_t prep_smem = sizeof(float) * gdn_prep_smem<DK>::FLOATS;
    const size_t state_smem = sizeof(float) * gdn_state_layout<DK, VS>::FLOATS;
    static int prep_asked = 0, state_asked = 0;
    if (!smem_allow(gdn_chunk_prep<DK, BF>, prep_smem, &prep_asked) ||
        !smem_allow(gdn_chunk_state<DK, VS, BF>, state_smem, &state_asked))
        return false;
    const size_t blocks = (size_t)Hv * ((min(T, GDN_SEG_TOKENS) + GDN_CHUNK - 1) / GDN_CHUNK);
    float *pr = gdn_prep_scratch(blocks * (G::FLOATS + 1));
    if (!pr) return false;
    float *glast = pr + blocks * G::FLOATS;
    const size_t row = 2 * (size_t)Hk * Dk + (size_t)Hv * Dv;
    for (int t0 = 0; t0 < T; t0 += GDN_SEG_TOKENS) {
        const int n = min(GDN_SEG_TOKENS, T - t0), chunks = (n + GDN_CHUNK - 1) / GDN_CHUNK;
        QRT_LAUNCH(gdn_chunk_prep<DK, BF>, dim3((unsigned)chunks, (unsigned)Hv), GDN_CHUNK_THREADS, prep_smem,
                   qkv + t0 * row, a + (size_t)t0 * Hv, b + (size_t)t0 * Hv, A_log, dt_bias, n, Hk, Hv, Dk, Dv, pr,
                   glast);
        QRT_LAUNCH(gdn_chunk_state<DK, VS, BF>, dim3((unsigned)Hv, (unsigned)((Dv + VS - 1) / VS)), GDN_CHUNK_THREADS,
                   state_smem, (const float *)pr, (const float *)glast, t0 ? S : S_in, S, n, Hv, Dk, Dv,
                   o + (size_t)t0 * Hv * Dv);
    }
    return true;
}

/* The chunked form a call asks for through QRT_GDN_VARIANT: 2 (unset: variant 2, slices of 64 columns where the
 * shared memory allows, else 32), 2:32 or 2:64 (variant 2 at that slice width), 2b, 2b:32, 2b:64 (the same with its
 * products in 3xBF16: an opt-in until measured), 1 (variant 1). Variant 2 is the
 * default: the same results as variant 1 (the bench's tokens too), its GDN time in an 8192-token prefill of the 27B
 * 20% less (docs/benchmarks.md). Read at every chunked call (a few per layer and prefill piece) so that one process
 * can run both (tests/test_cuda_ops.c). */
typedef struct {
    int variant, slice; /* slice 0: the launcher's choice */
    bool bf16;          /* variant 2's products in 3xBF16 */
} gdn_choice;

static gdn_choice gdn_chosen(void) {
    const gdn_choice dflt = {2, 0, false};
    const char *e = getenv("QRT_GDN_VARIANT");
    if (!e || !*e) return dflt;
    char *end;
    const long v = strtol(e, &end, 10);
    const bool bf16 = v == 2 && *end == 'b';
    if (bf16) end++;
    const long slice = *end == ':' ? strtol(end + 1, &end, 10) : 0;
    if (!*end && ((v == 1 && slice == 0) || (v == 2 && (slice == 0 || slice == 32 || slice == 64))))
        return gdn_choice{(int)v, (int)slice, bf16};
    static int warned = 0;
    if (!warned)
        fprintf(stderr, "qwenrt: QRT_GDN_VARIANT=%s is not 1, 2, 2:32, 2:64, 2b, 2b:32 or 2b:64; running variant 2\n",
                e);
    warned = 1;
    return dflt;
}

/* Variant 2 at the chosen slice width (64 first, unless 32 is asked for); false where neither can run */
template <int DK, bool BF>
static bool gdn_two_phase_run(gdn_choice choice, const float *qkv, const float *a, const float *b, const float *A_log,
                              const float *dt_bias, const float *S_in, float *S, int T, int Hk, int Hv, int Dk, int Dv,
                              float *o) {
    if (choice.slice != 32 &&
        gdn_two_phase_launch<DK, 64, BF>(qkv, a, b, A_log, dt_bias, S_in, S, T, Hk, Hv, Dk, Dv, o))
        return true;
    return gdn_two_phase_launch<DK, 32, BF>(qkv, a, b, A_log, dt_bias, S_in, S, T, Hk, Hv, Dk, Dv, o);
}

/* The chunked form at Dk ≤ DK; false, launching nothing, where neither variant's shared memory can be had.
 * Variant 2's slices: 64 columns first. At the 27B's 48 heads that is 96 blocks of 188 KiB, one per SM and one wave
 * on 132 SMs; 32 columns (156 KiB, the most sm_80 gives a block) make 192 blocks, two waves at one block per SM, each
 * block with half the products but the same factors to copy in. Variant 1: VS = 64 at Dk = 128, 2 blocks per head of
 * the 27B (96 blocks) and its shared memory (155 KiB) within sm_80's 163. */
template <int DK>
static bool gdn_chunked_run(gdn_choice choice, const float *qkv, const float *a, const float *b, const float *A_log,
                            const float *dt_bias, const float *S_in, float *S, int T, int Hk, int Hv, int Dk, int Dv,
                            float *o) {
    if (choice.variant == 2 &&
        (choice.bf16 ? gdn_two_phase_run<DK, true> : gdn_two_phase_run<DK, false>)(choice, qkv, a, b, A_log, dt_bias,
                                                                                    S_in, S, T, Hk, Hv, Dk, Dv, o))
        return true;
    return gdn_chunked_launch<DK, DK == 128 ? 64 : 32>(qkv, a, b, A_log, dt_bias, S_in, S, T, Hk, Hv, Dk, Dv, o);
}

void qrt_cuda_gdn(const float *qkv, const float *a, const float *b, const float *A_log, const float *dt_bias,
                  const float *S_in, float *S, int T, int Hk, int Hv, int Dk, int Dv, int chunked, const float *z,
                  const float *norm_w, float eps, float *o) {
    QRT_ASSERT(Hk > 0 && Hv % Hk == 0 && Dk > 0 && Dk <= 256 && Dv > 0 && Dv <= GDN_COLS);
    bool ran_chunked = false;
    if (chunked && T > 0 && Dk <= 128) {
        const gdn_choice choice = gdn_chosen();
        ran_chunked = Dk <= 32 ? gdn_chunked_run<32>(choice, qkv, a, b, A_log, dt_bias, S_in, S, T, Hk, Hv, Dk, Dv, o)
                      : Dk <= 64
                          ? gdn_chunked_run<64>(choice, qkv, a, b, A_log, dt_bias, S_in, S, T, Hk, Hv, Dk, Dv, o)
                          : gdn_chunked_run<128>(choice, qkv, a, b, A_log, dt_bias, S_in, S, T, Hk, Hv, Dk, Dv, o);
    }
    if (ran_chunked) {
        const int rows = T * Hv, per_block = 8;
        QRT_LAUNCH(gdn_norm_gated, qrt_grid((size_t)rows, per_block), 32 * per_block, 0, o, z, norm_w, rows, Dv, eps);
        return;
    }
    /* the recurrence: decode, verify, and a chunked call the chunked kernels cannot take (Dk > 128, or too little
     * shared memory; both forms compute the same function) */
    decltype(&gdn_head<32, false>) head = Dk == 128 && Dv == GDN_COLS ? gdn_head<128, true>
                                          : Dk <= 32                   ? gdn_head<32, false>
                                          : Dk <= 64                   ? gdn_head<64, false>
                                          : Dk <= 128                  ? gdn_head<128, false>
                                                                       : gdn_head<256, false>;
    QRT_LAUNCH(head, Hv, GDN_THREADS, 0, qkv, a, b, A_log, dt_bias, S_in, S, z, norm_w, eps, T, Hk, Hv, Dk, Dv, o);
}
