/* GPU side of membw/doctor (built only with -DQRT_CUDA=ON): copy, read and write bandwidth with CUDA events,
 * a sustained read sampled per window with NVML state, and the NVFP4 lm_head GEMV check. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "model/weights.h"
#include "tools/membw.h"

#define CKR(call)                                                                                              \
    do {                                                                                                       \
        cudaError_t e_ = (call);                                                                               \
        if (e_ != cudaSuccess) {                                                                               \
            fprintf(stderr, "qwenrt membw: %s: %s (free GPU memory or use smaller --sizes)\n", #call,          \
                    cudaGetErrorString(e_));                                                                   \
            cudaGetLastError();                                                                                \
            return 1;                                                                                          \
        }                                                                                                      \
    } while (0)

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef enum { OP_COPY, OP_READ, OP_WRITE } bw_op;

/* Median over 5 batches of `iters` back-to-back operations on rotating slots; returns GB/s of bytes moved. */
static int time_op(bw_op op, uint8_t *src, uint8_t *dst, size_t bytes, int slots, unsigned *sink, double *gbs) {
    size_t want = ((size_t)2 << 30) / bytes; /* about 2 GiB moved per batch */
    int iters = want > 200 ? 200 : (int)want;
    if (iters < 3) iters = 3;
    if (iters > 200) iters = 200;
    cudaEvent_t a, b;
    CKR(cudaEventCreate(&a));
    CKR(cudaEventCreate(&b));
    double per[5];
    for (int rep = -1; rep < 5; rep++) { /* rep -1 warms up */
        CKR(cudaEventRecord(a, 0));
        for (int i = 0; i < iters; i++) {
            size_t off = (size_t)((rep + 1) * iters + i) % (size_t)slots * bytes;
            if (op == OP_COPY) CKR(cudaMemcpyAsync(dst + off, src + off, bytes, cudaMemcpyDeviceToDevice, 0));
            else if (op == OP_READ) qrt_cuda_read_probe(src + off, bytes, sink);
            else CKR(cudaMemsetAsync(dst + off, (rep + i) & 0xff, bytes, 0));
        }
        CKR(cudaEventRecord(b, 0));
        CKR(cudaEventSynchronize(b));
        float ms;
        CKR(cudaEventElapsedTime(&ms, a, b));
        if (rep >= 0) per[rep] = (double)bytes * (op == OP_COPY ? 2 : 1) * iters / (ms * 1e-3) / 1e9;
    }
    qsort(per, 5, sizeof per[0], cmp_double);
    *gbs = per[2];
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return 0;
}

/* Fresh memory a size rotates over: ≥ 1 GiB (a whole number of slots), so no rep reads what the last left in L2. */
static size_t cuda_region(size_t bytes) {
    const size_t gib = (size_t)1 << 30;
    return bytes >= gib ? bytes : gib / bytes * bytes;
}

int qrt_membw_cuda_point(qrt_bw_point *p) {
    const size_t bytes = p->bytes, region = cuda_region(bytes);
    const int slots = (int)(region / bytes);
    uint8_t *src = NULL, *dst = NULL;
    unsigned *sink = NULL;
    CKR(cudaMalloc((void **)&src, region));
    CKR(cudaMalloc((void **)&dst, region));
    CKR(cudaMalloc((void **)&sink, sizeof(unsigned)));
    qrt_cuda_fill_random_bytes(src, region, 1);
    int rc = time_op(OP_COPY, src, dst, bytes, slots, sink, &p->copy_gbs) ||
             time_op(OP_READ, src, dst, bytes, slots, sink, &p->read_gbs) ||
             time_op(OP_WRITE, src, dst, bytes, slots, sink, &p->write_gbs);
    cudaFree(src);
    cudaFree(dst);
    cudaFree(sink);
    return rc;
}

int qrt_membw_cuda_read(size_t bytes, double *gbs) {
    const size_t region = cuda_region(bytes);
    uint8_t *src = NULL;
    unsigned *sink = NULL;
    CKR(cudaMalloc((void **)&src, region));
    CKR(cudaMalloc((void **)&sink, sizeof(unsigned)));
    qrt_cuda_fill_random_bytes(src, region, 1);
    int rc = time_op(OP_READ, src, src, bytes, (int)(region / bytes), sink, gbs); /* dst unused by a read */
    cudaFree(src);
    cudaFree(sink);
    return rc;
}

int qrt_membw_cuda_sustained(size_t bytes, double sustain_s, double interval_s, qrt_devinfo *dev,
                             qrt_membw_result *r) {
    uint8_t *buf = NULL;
    unsigned *sink = NULL;
    CKR(cudaMalloc((void **)&buf, bytes));
    CKR(cudaMalloc((void **)&sink, sizeof(unsigned)));
    qrt_cuda_fill_random_bytes(buf, bytes, 2);
    cudaEvent_t a, b;
    CKR(cudaEventCreate(&a));
    CKR(cudaEventCreate(&b));
    /* one pass to size the windows: passes per window so each lasts about interval_s */
    float ms = 0;
    CKR(cudaEventRecord(a, 0));
    qrt_cuda_read_probe(buf, bytes, sink);
    CKR(cudaEventRecord(b, 0));
    CKR(cudaEventSynchronize(b));
    CKR(cudaEventElapsedTime(&ms, a, b));
    int passes = (int)(interval_s * 1e3 / (ms > 1e-3 ? ms : 1e-3));
    if (passes < 1) passes = 1;
    double t = 0;
    r->n_samples = 0;
    while (t < sustain_s - 1e-9 && r->n_samples < QRT_MEMBW_MAX_SAMPLES) {
        CKR(cudaEventRecord(a, 0));
        for (int i = 0; i < passes; i++) qrt_cuda_read_probe(buf, bytes, sink);
        CKR(cudaEventRecord(b, 0));
        /* the GPU is busy with this window's reads now: the state NVML reports is the state under load */
        qrt_bw_sample *s = &r->samples[r->n_samples++];
        qrt_devinfo_refresh(dev);
        s->sm_mhz = dev->sm_mhz, s->mem_mhz = dev->mem_mhz, s->temp_c = dev->temp_c, s->power_w = dev->power_w;
        CKR(cudaEventSynchronize(b));
        CKR(cudaEventElapsedTime(&ms, a, b));
        t += ms * 1e-3;
        s->t_s = t;
        s->gbs = (double)bytes * passes / (ms * 1e-3) / 1e9;
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaFree(buf);
    cudaFree(sink);
    return 0;
}

int qrt_membw_cuda_nvfp4_lm_head(double *ms_out, double *weight_bytes, const char **variant) {
    const int64_t N = 248320, K = 5120;
    const int copies = 4; /* 4 × 715 MB: no rep reads a weight still in L2 */
    qrt_linear w[4];
    memset(w, 0, sizeof w);
    float *x = NULL, *y = NULL;
    CKR(cudaMalloc((void **)&x, sizeof(float) * K));
    CKR(cudaMalloc((void **)&y, sizeof(float) * N));
    qrt_cuda_fill_random_f32(x, (size_t)K, 3, -1.0f, 1.0f);
    for (int c = 0; c < copies; c++) {
        void *codes, *scales;
        CKR(cudaMalloc(&codes, (size_t)(N * K / 2)));
        CKR(cudaMalloc(&scales, (size_t)(N * K / 16)));
        qrt_cuda_fill_random_bytes(codes, (size_t)(N * K / 2), 40 + c);
        CKR(cudaMemset(scales, 0x38, (size_t)(N * K / 16))); /* e4m3 1.0 */
        w[c] = (qrt_linear){.fmt = QRT_WF_NVFP4, .n = N, .k = K, .data = codes, .scales = scales,
                            .scale2 = 1.0f / 448.0f, .name = "lm_head"};
    }
    int v = qrt_nvfp4_pick(&w[0], 1);
    cudaEvent_t a, b;
    CKR(cudaEventCreate(&a));
    CKR(cudaEventCreate(&b));
    double t[9];
    for (int r = -2; r < 9; r++) {
        CKR(cudaEventRecord(a, 0));
        qrt_nvfp4_matmul_variant(v, &w[(r + 2) % copies], x, 1, y);
        CKR(cudaEventRecord(b, 0));
        CKR(cudaEventSynchronize(b));
        float ms;
        CKR(cudaEventElapsedTime(&ms, a, b));
        if (r >= 0) t[r] = ms;
    }
    qsort(t, 9, sizeof t[0], cmp_double);
    *ms_out = t[4];
    *weight_bytes = (double)qrt_linear_bytes(&w[0]);
    *variant = qrt_nvfp4_variant_name(v);
    for (int c = 0; c < copies; c++) {
        cudaFree((void *)w[c].data);
        cudaFree((void *)w[c].scales);
    }
    cudaFree(x);
    cudaFree(y);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return 0;
}
