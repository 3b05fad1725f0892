/* Gated DeltaNet core: T tokens through the delta-rule recurrence, state S [Hv][Dk][Dv] in device memory.
 * Variants:
 *   0  gdn_recurrent<DKMAX>  one warp per (v-head, 32 state columns); each lane keeps one column of S
 *                            (Dk values) in registers for the whole call and walks the tokens in order
 * The chunked (prefill) form is not written yet: `chunked` runs this same recurrence, which computes the
 * same function (the CPU backend's chunked and recurrent forms agree to f32 rounding; tests check both
 * against it). Per token: q, k l2-normalised in f32 (eps inside the sum), q scaled by 1/sqrt(Dk),
 * g = -exp(A_log)·softplus(a + dt_bias), β = sigmoid(b); S ← S·e^g; δ = β(v − Sᵀk); S += k δᵀ; o = Sᵀq. */
#include "backend/cuda/cuda_internal.cuh"

extern "C" {
#include "util/common.h"
}

__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

template <int DKMAX>
__global__ void __launch_bounds__(32) gdn_recurrent(const float *qkv /* [T][2·Hk·Dk + Hv·Dv] */,
                                                    const float *a /* [T][Hv] */, const float *b /* [T][Hv] */,
                                                    const float *A_log /* [Hv] */, const float *dt_bias /* [Hv] */,
                                                    float *S /* [Hv][Dk][Dv] */, int T, int Hk, int Hv, int Dk, int Dv,
                                                    float *o /* [T][Hv][Dv] */) {
    __shared__ float qs[DKMAX], ks[DKMAX];
    const int j = blockIdx.x, lane = threadIdx.x, c = blockIdx.y * 32 + lane;
    const int kh = j / (Hv / Hk); /* v-head j reads k-head j // (Hv/Hk) */
    const size_t row = 2 * (size_t)Hk * Dk + (size_t)Hv * Dv;
    const bool col = c < Dv;
    float *Sj = S + (size_t)j * Dk * Dv;
    float s[DKMAX]; /* column c of S_j */
#pragma unroll
    for (int i = 0; i < DKMAX; i++) s[i] = (col && i < Dk) ? Sj[(size_t)i * Dv + c] : 0.0f;
    const float A = -expf(A_log[j]), dtb = dt_bias[j], qscale = 1.0f / sqrtf((float)Dk);
    for (int t = 0; t < T; t++) {
        const float *q = qkv + (size_t)t * row + (size_t)kh * Dk, *k = q + (size_t)Hk * Dk;
        float qq = 0.0f, kk = 0.0f;
        for (int i = lane; i < Dk; i += 32) qq = fmaf(q[i], q[i], qq), kk = fmaf(k[i], k[i], kk);
        qq = warp_sum(qq);
        kk = warp_sum(kk);
        const float qinv = 1.0f / sqrtf(qq + 1e-6f) * qscale, kinv = 1.0f / sqrtf(kk + 1e-6f);
        __syncwarp(); /* the previous token's reads of qs/ks are done */
        for (int i = lane; i < Dk; i += 32) qs[i] = q[i] * qinv, ks[i] = k[i] * kinv;
        __syncwarp();
        const float g = A * softplus_f(a[(size_t)t * Hv + j] + dtb);
        const float beta = sigmoid_f(b[(size_t)t * Hv + j]);
        const float decay = expf(g);
        const float v = col ? qkv[(size_t)t * row + 2 * (size_t)Hk * Dk + (size_t)j * Dv + c] : 0.0f;
        float m = 0.0f;
#pragma unroll
        for (int i = 0; i < DKMAX; i++)
            if (i < Dk) {
                s[i] *= decay;
                m = fmaf(s[i], ks[i], m);
            }
        const float delta = beta * (v - m);
        float out = 0.0f;
#pragma unroll
        for (int i = 0; i < DKMAX; i++)
            if (i < Dk) {
                s[i] = fmaf(ks[i], delta, s[i]);
                out = fmaf(s[i], qs[i], out);
            }
        if (col) o[((size_t)t * Hv + j) * Dv + c] = out;
    }
#pragma unroll
    for (int i = 0; i < DKMAX; i++)
        if (col && i < Dk) Sj[(size_t)i * Dv + c] = s[i];
}

void qrt_cuda_gdn(const float *qkv, const float *a, const float *b, const float *A_log, const float *dt_bias,
                  float *S, int T, int Hk, int Hv, int Dk, int Dv, int chunked, float *o) {
    (void)chunked; /* the recurrence serves both forms for now (see the top of this file) */
    QRT_ASSERT(Hk > 0 && Hv % Hk == 0 && Dk > 0 && Dk <= 256 && Dv > 0);
    dim3 grid(Hv, qrt_grid((size_t)Dv, 32));
    if (Dk <= 32) gdn_recurrent<32><<<grid, 32>>>(qkv, a, b, A_log, dt_bias, S, T, Hk, Hv, Dk, Dv, o);
    else if (Dk <= 64) gdn_recurrent<64><<<grid, 32>>>(qkv, a, b, A_log, dt_bias, S, T, Hk, Hv, Dk, Dv, o);
    else if (Dk <= 128) gdn_recurrent<128><<<grid, 32>>>(qkv, a, b, A_log, dt_bias, S, T, Hk, Hv, Dk, Dv, o);
    else gdn_recurrent<256><<<grid, 32>>>(qkv, a, b, A_log, dt_bias, S, T, Hk, Hv, Dk, Dv, o);
    QRT_CUDA_LAUNCHED();
}
