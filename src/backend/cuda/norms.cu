/* RMSNorm, and the residual add fused with the next RMSNorm (the Gated DeltaNet output norm is part of gdn.cu).
 * Variants:
 *   0  rmsnorm_rows<P>     one block per row; sum of squares by block_sum (fixed order for a block size); may run
 *                          in place (y == x): the row is read before anything is written
 *   1  add_rmsnorm_rows<P> one block per row: h += y and the sum of squares of the new h in one pass, then
 *                          x = h · inv · w; up to 1024 threads, since at decode there is one row (T = 1)
 *                          and one block has to stream all of it
 * P: a thread holds its P (at most) elements in registers, all loaded at once, w's with them (one L2 round trip;
 * P = 0 for rows longer than 32 per thread: a loop instead): a loop that loads one element per iteration pays a memory
 * round trip each, and a decoded token runs 128 add_rmsnorms. Thread t owns elements t, t + B, ... and sums them in
 * that order in every form, so P changes no bit. */
#include "backend/cuda/cuda_internal.cuh"

static unsigned norm_block(int n) { return n >= 2048 ? 256 : 128; }

/* The register form's start: v[j] = value(i) and wv[j] = w[i] for this thread's elements i = t + j·B (0 past n), every
 * load issued before the first is used. */
template <int P, typename F>
__device__ __forceinline__ void norm_load(F value, const float *w, int n, float (&v)[P], float (&wv)[P]) {
#pragma unroll
    for (int j = 0; j < P; j++) {
        const int i = threadIdx.x + j * blockDim.x;
        v[j] = i < n ? value(i) : 0.0f;
        wv[j] = i < n ? w[i] : 0.0f;
    }
}
/* The register form's end: the row's sum of squares from this thread's share ss, then out = v · inv · w. */
template <int P>
__device__ __forceinline__ void norm_store(const float (&v)[P], const float (&wv)[P], float ss, int n, float eps,
                                           float *scratch, float *out /* [n] */) {
    ss = block_sum(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / (float)n + eps);
#pragma unroll
    for (int j = 0; j < P; j++)
        if (threadIdx.x + j * blockDim.x < n) out[threadIdx.x + j * blockDim.x] = v[j] * inv * wv[j];
}

template <int P>
__global__ void rmsnorm_rows(const float *x /* [rows][n] */, const float *w /* [n] */, int n, float eps,
                             float *y /* [rows][n] */) {
    pdl_start();
    __shared__ float scratch[32];
    const float *xr = x + (size_t)blockIdx.x * n;
    float *yr = y + (size_t)blockIdx.x * n;
    const int B = blockDim.x;
    float ss = 0.0f;
    if constexpr (P > 0) {
        float v[P], wv[P];
        norm_load<P>([&](int i) { return xr[i]; }, w, n, v, wv);
#pragma unroll
        for (int j = 0; j < P; j++)
            if (threadIdx.x + j * B < n) ss = fmaf(v[j], v[j], ss);
        norm_store<P>(v, wv, ss, n, eps, scratch, yr);
    } else {
        for (int i = threadIdx.x; i < n; i += B) ss = fmaf(xr[i], xr[i], ss);
        ss = block_sum(ss, scratch);
        const float inv = 1.0f / sqrtf(ss / (float)n + eps);
        for (int i = threadIdx.x; i < n; i += B) yr[i] = xr[i] * inv * w[i];
    }
}

/* The loop form re-reads only the elements of h each thread wrote itself, so no barrier is needed between its two
 * loops beyond the one inside block_sum. */
template <int P>
__global__ void add_rmsnorm_rows(float *__restrict__ h /* [rows][n] */, const float *__restrict__ y /* [rows][n] */,
                                 const float *__restrict__ w /* [n] */, int n, float eps,
                                 float *__restrict__ x /* [rows][n] */) {
    pdl_start();
    __shared__ float scratch[32];
    float *hr = h + (size_t)blockIdx.x * n, *xr = x + (size_t)blockIdx.x * n;
    const float *yr = y + (size_t)blockIdx.x * n;
    const int B = blockDim.x;
    float ss = 0.0f;
    if constexpr (P > 0) {
        float v[P], wv[P];
        norm_load<P>([&](int i) { return hr[i] + yr[i]; }, w, n, v, wv);
#pragma unroll
        for (int j = 0; j < P; j++) {
            const int i = threadIdx.x + j * B;
            if (i < n) hr[i] = v[j], ss = fmaf(v[j], v[j], ss);
        }
        norm_store<P>(v, wv, ss, n, eps, scratch, xr);
    } else {
        for (int i = threadIdx.x; i < n; i += B) {
            const float v = hr[i] + yr[i];
            hr[i] = v;
            ss = fmaf(v, v, ss);
        }
        ss = block_sum(ss, scratch);
        const float inv = 1.0f / sqrtf(ss / (float)n + eps);
        for (int i = threadIdx.x; i < n; i += B) xr[i] = hr[i] * inv * w[i];
    }
}

/* The smallest register form that holds a row of n at `threads` per block (0: the loop). */
static int norm_per_thread(int n, unsigned threads) {
    const int per = (int)((n + threads - 1) / threads);
    return per <= 4 ? 4 : per <= 8 ? 8 : per <= 16 ? 16 : per <= 32 ? 32 : 0;
}

#define NORM_LAUNCH(kernel, per, grid, threads, ...)                                                                   \
    switch (per) {                                                                                                     \
    case 4: QRT_LAUNCH(kernel<4>, grid, threads, 0, __VA_ARGS__); break;                                               \
    case 8: QRT_LAUNCH(kernel<8>, grid, threads, 0, __VA_ARGS__); break;                                               \
    case 16: QRT_LAUNCH(kernel<16>, grid, threads, 0, __VA_ARGS__); break;                                             \
    case 32: QRT_LAUNCH(kernel<32>, grid, threads, 0, __VA_ARGS__); break;                                             \
    default: QRT_LAUNCH(kernel<0>, grid, threads, 0, __VA_ARGS__); break;                                              \
    }

void qrt_cuda_add_rmsnorm(float *h, const float *y, const float *w, int rows, int n, float eps, float *x) {
    if (rows <= 0) return;
    const unsigned threads = n >= 4096 ? 1024 : norm_block(n);
    /* 1024 threads leave 64 registers each: at most 8 elements in registers */
    const int per = threads == 1024 && norm_per_thread(n, threads) > 8 ? 0 : norm_per_thread(n, threads);
    NORM_LAUNCH(add_rmsnorm_rows, per, rows, threads, h, y, w, n, eps, x);
}

void qrt_cuda_rmsnorm(const float *x, const float *w, int rows, int n, float eps, float *y) {
    if (rows <= 0) return;
    const unsigned threads = norm_block(n);
    NORM_LAUNCH(rmsnorm_rows, norm_per_thread(n, threads), rows, threads, x, w, n, eps, y);
}
