/* Causal depthwise conv1d over Ck taps, then SiLU; the state holds the last Ck-1 raw inputs.
 * Variants:
 *   0  conv1d_silu_segments<CK>  one thread per (channel, segment of CONV_SEGMENT tokens) walks its segment in
 *                                order, loading CONV_BATCH tokens at a time. A token's window reaches Ck-1 inputs
 *                                back: inside the prompt from x, before it from the state, which only the first
 *                                segment reads (a segment is at least Ck-1 long). That segment's thread also writes
 *                                the new state, after its reads: the last Ck-1 inputs from x (or its own window when
 *                                T fits in one segment). Decode and verify (T <= 32) run one segment, a thread per
 *                                channel; a prefill piece of 8192 tokens runs 256 segments (one thread per channel
 *                                walking all 8192 tokens, a load round trip per token, took ~5 ms per layer).
 *                                CK = Ck (4: the Qwen3.5/3.6 models) keeps taps and history in registers; CK = 0
 *                                takes any Ck <= 16 from the argument (arrays the compiler keeps in local memory: a
 *                                round trip per tap). Every token's sum runs in the same order whatever the segment,
 *                                so results do not depend on T. */
#include "backend/cuda/cuda_internal.cuh"

extern "C" {
#include "util/common.h"
}

#define CONV_MAX_TAPS 16
#define CONV_SEGMENT 32 /* tokens per thread; at least CONV_MAX_TAPS - 1 (the first segment alone reads the state) */
#define CONV_BATCH 8    /* tokens loaded at once (y may alias x for the compiler: a load waits for the store before) */

template <int CK>
__global__ void conv1d_silu_segments(const float *x /* [T][ch] */, float *state /* [Ck-1][ch] */,
                                     const float *w /* [ch][Ck] */, int T, int ch, int Ck_arg,
                                     float *y /* [T][ch], not x */) {
    const int c0 = blockIdx.x * blockDim.x, c = c0 + threadIdx.x; /* the block's first channel, this thread's */
    const int t0 = blockIdx.y * CONV_SEGMENT, t1 = min(T, t0 + CONV_SEGMENT); /* this segment's tokens */
    const int Ck = CK ? CK : Ck_arg, S = Ck - 1;
    if (t0 == 0 && threadIdx.x < S) { /* the block's state rows, written a token ago (l2_prefetch) */
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
    for (int j = 0; j < N; j++) /* the inputs at t0 - S + j: the state's before the prompt */
        if (j < S) hist[j] = t0 == 0 ? state[(size_t)j * ch + c] : x[(size_t)(t0 - S + j) * ch + c];
    for (int tb = t0; tb < t1; tb += CONV_BATCH) {
        float xs[CONV_BATCH]; /* every load of the batch issued before its first store */
#pragma unroll
        for (int u = 0; u < CONV_BATCH; u++) xs[u] = tb + u < t1 ? x[(size_t)(tb + u) * ch + c] : 0.0f;
#pragma unroll
        for (int u = 0; u < CONV_BATCH; u++) {
            if (tb + u >= t1) break;
            float acc = 0.0f;
#pragma unroll
            for (int j = 0; j < N; j++)
                if (j < S) acc += taps[j] * hist[j];
            acc += taps[S] * xs[u];
            y[(size_t)(tb + u) * ch + c] = silu_f(acc);
#pragma unroll
            for (int j = 0; j + 1 < N; j++)
                if (j + 1 < S) hist[j] = hist[j + 1];
            if (S) hist[S - 1] = xs[u];
        }
    }
    if (t0 != 0) return;
    const int one_segment = T <= CONV_SEGMENT; /* then the window ends at the last input (and may hold old state) */
#pragma unroll
    for (int j = 0; j < N; j++)
        if (j < S) state[(size_t)j * ch + c] = one_segment ? hist[j] : x[(size_t)(T - S + j) * ch + c];
}

void qrt_cuda_conv1d_silu(const float *x, float *state, const float *w, int T, int ch, int Ck, float *y) {
    QRT_ASSERT(Ck >= 1 && Ck <= CONV_MAX_TAPS);
    if (T < 1) return;
    const dim3 grid(qrt_grid((size_t)ch, 128), qrt_grid((size_t)T, CONV_SEGMENT));
    if (Ck == 4) QRT_LAUNCH(conv1d_silu_segments<4>, grid, 128, 0, x, state, w, T, ch, Ck, y);
    else QRT_LAUNCH(conv1d_silu_segments<0>, grid, 128, 0, x, state, w, T, ch, Ck, y);
}
