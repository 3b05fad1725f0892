/* Causal depthwise conv1d over Ck taps, then SiLU; the state holds the last Ck-1 raw inputs.
 * Variants:
 *   0  conv1d_silu_channels<CK>  one thread per channel walks the T tokens in order. CK = Ck (4: the Qwen3.5/3.6
 *                                models) keeps taps and history in registers with all their loads issued at once;
 *                                CK = 0 takes any Ck ≤ 16 from the argument (arrays the compiler keeps in local
 *                                memory: a round trip per tap). Both
 *                                compute the same sums in the same order. */
#include "backend/cuda/cuda_internal.cuh"

extern "C" {
#include "util/common.h"
}

#define CONV_MAX_TAPS 16

template <int CK>
__global__ void conv1d_silu_channels(const float *x /* [T][ch] */, float *state /* [Ck-1][ch] */,
                                     const float *w /* [ch][Ck] */, int T, int ch, int Ck_arg,
                                     float *y /* [T][ch] */) {
    const int c0 = blockIdx.x * blockDim.x, c = c0 + threadIdx.x; /* the block's first channel, this thread's */
    const int Ck = CK ? CK : Ck_arg, S = Ck - 1;
    if (threadIdx.x < S) { /* the block's state rows, written a token ago (l2_prefetch) */
        const int n = ch - c0 < (int)blockDim.x ? ch - c0 : (int)blockDim.x;
        l2_prefetch(state + (size_t)threadIdx.x * ch + c0, sizeof(float) * n);
    }
    pdl_start();
    if (c >= ch) return;
    constexpr int N = CK ? CK : CONV_MAX_TAPS;
    float hist[N], taps[N];
#pragma unroll
    for (int j = 0; j < N; j++)
        if (j < Ck) taps[j] = w[(size_t)c * Ck + j];
#pragma unroll
    for (int j = 0; j < N; j++)
        if (j < S) hist[j] = state[(size_t)j * ch + c];
    for (int t = 0; t < T; t++) {
        const float xt = x[(size_t)t * ch + c];
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < N; j++)
            if (j < S) acc += taps[j] * hist[j];
        acc += taps[S] * xt;
        y[(size_t)t * ch + c] = silu_f(acc);
#pragma unroll
        for (int j = 0; j + 1 < N; j++)
            if (j + 1 < S) hist[j] = hist[j + 1];
        if (S) hist[S - 1] = xt;
    }
#pragma unroll
    for (int j = 0; j < N; j++)
        if (j < S) state[(size_t)j * ch + c] = hist[j];
}

void qrt_cuda_conv1d_silu(const float *x, float *state, const float *w, int T, int ch, int Ck, float *y) {
    QRT_ASSERT(Ck >= 1 && Ck <= CONV_MAX_TAPS);
    if (Ck == 4) QRT_LAUNCH(conv1d_silu_channels<4>, qrt_grid((size_t)ch, 128), 128, 0, x, state, w, T, ch, Ck, y);
    else QRT_LAUNCH(conv1d_silu_channels<0>, qrt_grid((size_t)ch, 128), 128, 0, x, state, w, T, ch, Ck, y);
}
