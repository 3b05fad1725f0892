/* RMSNorm, and the residual add fused with the next RMSNorm (the Gated DeltaNet output norm is part of gdn.cu).
 * Variants:
 *   0  rmsnorm_rows        one block per row; sum of squares by block_sum (fixed order for a block size); may run
 *                          in place (y == x): each thread reads an element before it writes it, after the row's sum
 *   1  add_rmsnorm_rows    one block per row: h += y and the sum of squares of the new h in one pass, then
 *                          x = h · inv · w; up to 1024 threads, since at decode there is one row (T = 1)
 *                          and one block has to stream all of it */
#include "backend/cuda/cuda_internal.cuh"

static unsigned norm_block(int n) { return n >= 2048 ? 256 : 128; }

__global__ void rmsnorm_rows(const float *x /* [rows][n] */, const float *w /* [n] */, int n, float eps,
                             float *y /* [rows][n] */) {
    __shared__ float scratch[32];
    const float *xr = x + (size_t)blockIdx.x * n;
    float *yr = y + (size_t)blockIdx.x * n;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
    ss = block_sum(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * inv * w[i];
}

/* Each thread re-reads only the elements of h it wrote itself, so no barrier is needed between the two loops
 * beyond the one inside block_sum. */
__global__ void add_rmsnorm_rows(float *__restrict__ h /* [rows][n] */, const float *__restrict__ y /* [rows][n] */,
                                 const float *__restrict__ w /* [n] */, int n, float eps,
                                 float *__restrict__ x /* [rows][n] */) {
    __shared__ float scratch[32];
    float *hr = h + (size_t)blockIdx.x * n, *xr = x + (size_t)blockIdx.x * n;
    const float *yr = y + (size_t)blockIdx.x * n;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = hr[i] + yr[i];
        hr[i] = v;
        ss = fmaf(v, v, ss);
    }
    ss = block_sum(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) xr[i] = hr[i] * inv * w[i];
}

void qrt_cuda_add_rmsnorm(float *h, const float *y, const float *w, int rows, int n, float eps, float *x) {
    if (rows <= 0) return;
    const unsigned threads = n >= 4096 ? 1024 : norm_block(n);
    add_rmsnorm_rows<<<rows, threads>>>(h, y, w, n, eps, x);
    QRT_CUDA_LAUNCHED();
}

void qrt_cuda_rmsnorm(const float *x, const float *w, int rows, int n, float eps, float *y) {
    if (rows <= 0) return;
    rmsnorm_rows<<<rows, norm_block(n)>>>(x, w, n, eps, y);
    QRT_CUDA_LAUNCHED();
}
