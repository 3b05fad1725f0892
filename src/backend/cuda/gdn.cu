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
 * The chunked (prefill) form is not written yet: `chunked` runs this same recurrence, which computes the same
 * function (the CPU backend's chunked and recurrent forms agree to f32 rounding; tests check both against it).
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

void qrt_cuda_gdn(const float *qkv, const float *a, const float *b, const float *A_log, const float *dt_bias,
                  const float *S_in, float *S, int T, int Hk, int Hv, int Dk, int Dv, int chunked, const float *z,
                  const float *norm_w, float eps, float *o) {
    (void)chunked; /* the recurrence serves both forms for now (see the top of this file) */
    QRT_ASSERT(Hk > 0 && Hv % Hk == 0 && Dk > 0 && Dk <= 256 && Dv > 0 && Dv <= GDN_COLS);
    /* one launch of the smallest DKMAX that holds Dk */
    decltype(&gdn_head<32, false>) head = Dk == 128 && Dv == GDN_COLS ? gdn_head<128, true>
                                          : Dk <= 32                   ? gdn_head<32, false>
                                          : Dk <= 64                   ? gdn_head<64, false>
                                          : Dk <= 128                  ? gdn_head<128, false>
                                                                       : gdn_head<256, false>;
    QRT_LAUNCH(head, Hv, GDN_THREADS, 0, qkv, a, b, A_log, dt_bias, S_in, S, z, norm_w, eps, T, Hk, Hv, Dk, Dv, o);
}
