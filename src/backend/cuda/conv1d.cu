/* Causal depthwise conv1d over Ck taps, then SiLU; the state holds the last Ck-1 raw inputs.
 * Variants:
 *   0  conv1d_silu_channels  one thread per channel walks the T tokens in order (Ck ≤ 16) */
#include "backend/cuda/cuda_internal.cuh"

#define CONV_MAX_TAPS 16

__global__ void conv1d_silu_channels(const float *x /* [T][ch] */, float *state /* [Ck-1][ch] */,
                                     const float *w /* [ch][Ck] */, int T, int ch, int Ck, float *y /* [T][ch] */) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= ch) return;
    const int S = Ck - 1;
    float hist[CONV_MAX_TAPS], taps[CONV_MAX_TAPS];
    for (int j = 0; j < Ck; j++) taps[j] = w[(size_t)c * Ck + j];
    for (int j = 0; j < S; j++) hist[j] = state[(size_t)j * ch + c];
    for (int t = 0; t < T; t++) {
        const float xt = x[(size_t)t * ch + c];
        float acc = 0.0f;
        for (int j = 0; j < S; j++) acc += taps[j] * hist[j];
        acc += taps[S] * xt;
        y[(size_t)t * ch + c] = silu_f(acc);
        for (int j = 0; j + 1 < S; j++) hist[j] = hist[j + 1];
        if (S) hist[S - 1] = xt;
    }
    for (int j = 0; j < S; j++) state[(size_t)j * ch + c] = hist[j];
}

void qrt_cuda_conv1d_silu(const float *x, float *state, const float *w, int T, int ch, int Ck, float *y) {
    QRT_ASSERT(Ck >= 1 && Ck <= CONV_MAX_TAPS);
    conv1d_silu_channels<<<qrt_grid((size_t)ch, 128), 128>>>(x, state, w, T, ch, Ck, y);
    QRT_CUDA_LAUNCHED();
}
