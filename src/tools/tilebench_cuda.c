/* GPU side of qwenrt tilebench: one launch timed by CUDA events, and the L2 size (see tilebench.h). */
#include "tools/tilebench.h"

#include <cuda_runtime.h>
#include <stdio.h>

#define CKT(call)                                                                                        \
    do {                                                                                                 \
        cudaError_t e_ = (call);                                                                         \
        if (e_ != cudaSuccess) {                                                                         \
            fprintf(stderr, "qwenrt tilebench: %s: %s\n", #call, cudaGetErrorString(e_));                \
            cudaGetLastError();                                                                          \
            return 1;                                                                                    \
        }                                                                                                \
    } while (0)

/* The two events live for the process: tilebench times hundreds of launches one after another. */
static cudaEvent_t ev_a, ev_b;

int qrt_tilebench_cuda_time(void (*launch)(void *ctx), void *ctx, double *ms) {
    if (!ev_a) {
        CKT(cudaEventCreate(&ev_a));
        CKT(cudaEventCreate(&ev_b));
    }
    CKT(cudaEventRecord(ev_a, cudaStreamPerThread)); /* the stream the backend runs on */
    launch(ctx);
    CKT(cudaGetLastError());
    CKT(cudaEventRecord(ev_b, cudaStreamPerThread));
    CKT(cudaEventSynchronize(ev_b));
    float f = 0;
    CKT(cudaEventElapsedTime(&f, ev_a, ev_b));
    *ms = f;
    return 0;
}

size_t qrt_tilebench_cuda_l2(void) {
    int l2 = 0;
    if (cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return (size_t)l2;
}
