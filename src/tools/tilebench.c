/* qwenrt tilebench: time every NVFP4 W4A16 matmul variant (and the BF16 dense GEMV for comparison) at the
 * Qwen3.6-27B decode shapes, against the device's measured read bandwidth.
 *
 * Method (shared/docs/BENCHMARKS.md, the device's METHOD.md): weights are random bytes made on the GPU;
 * each shape gets enough copies that one pass over them is at least 4× the L2, and the reps rotate over the
 * copies, so no rep reads a weight still in L2; every launch is timed alone with CUDA events after 3
 * warmups; the median of the reps is reported. GB/s counts the bytes the kernel must read: codes + scales
 * (+ activations, negligible). % is of the read bandwidth measured here by a streaming 16-byte-load
 * kernel over 2 GB (median of 10). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "tools/tools.h"

#define CK(call)                                                                                     \
    do {                                                                                             \
        cudaError_t e_ = (call);                                                                     \
        if (e_ != cudaSuccess) {                                                                     \
            fprintf(stderr, "tilebench: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                                 \
        }                                                                                            \
    } while (0)

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

typedef void (*bench_fn)(int copy, void *ctx);

/* Median ms of reps launches of fn (rotating copies), each between two events. */
static float time_median(bench_fn fn, void *ctx, int copies, int reps) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++) fn(i % copies, ctx);
    float *ms = malloc(sizeof(float) * reps);
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(a, 0));
        fn((r + 3) % copies, ctx);
        CK(cudaEventRecord(b, 0));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&ms[r], a, b));
    }
    qsort(ms, (size_t)reps, sizeof(float), cmp_float);
    float med = ms[reps / 2];
    free(ms);
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return med;
}

typedef struct {
    const uint8_t *buf;
    size_t bytes;
    unsigned *sink;
} probe_ctx;
static void run_probe(int copy, void *c) {
    probe_ctx *p = c;
    qrt_cuda_read_probe(p->buf, p->bytes, p->sink);
}

typedef struct {
    qrt_linear w[16];
    int variant; /* -1: the dense BF16 matmul op */
    const float *x;
    int T;
    float *y;
} mm_ctx;
static void run_mm(int copy, void *c) {
    mm_ctx *m = c;
    if (m->variant < 0) qrt_backend_cuda()->matmul(&m->w[copy], m->x, m->T, m->y);
    else qrt_nvfp4_matmul_variant(m->variant, &m->w[copy], m->x, m->T, m->y);
}

int qrt_tool_tilebench(int argc, char **argv) {
    int reps = 20;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: qwenrt tilebench [--reps N]\n\nTimes each NVFP4 W4A16 matmul variant and the BF16 "
                   "dense GEMV on the Qwen3.6-27B\ndecode shapes (lm_head, gate+up, down) at M = 1, 2, 7 and 16 tokens.\n"
                   "Columns: ms = median kernel time (CUDA events, 3 warmups, weights rotated over copies\n"
                   "larger than L2); GB/s = (codes + scales, or BF16 weight bytes) / ms; %%bw = of the read\n"
                   "bandwidth measured by a streaming-read kernel in the same run; 'pick' marks the autotuner's "
                   "choice.\n");
            return 0;
        }
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    }
    if (reps < 3) reps = 3;
    if (!qrt_backend_cuda()) {
        fprintf(stderr, "qwenrt tilebench: %s\n", qrt_last_error());
        return 1;
    }
    char dev[256];
    qrt_cuda_describe(dev, sizeof dev);
    printf("device: %s\n", dev);
    int l2 = 0;
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));

    /* read bandwidth */
    probe_ctx pc = {.bytes = (size_t)2 << 30};
    void *pbuf;
    CK(cudaMalloc(&pbuf, pc.bytes));
    CK(cudaMalloc((void **)&pc.sink, sizeof(unsigned)));
    qrt_cuda_fill_random_bytes(pbuf, pc.bytes, 7);
    pc.buf = pbuf;
    float pms = time_median(run_probe, &pc, 1, 10);
    double peak = pc.bytes / (pms * 1e-3) / 1e9;
    printf("read bandwidth: %.0f GB/s (2 GiB streamed in %.3f ms, median of 10)\n\n", peak, pms);
    CK(cudaFree(pbuf));

    struct {
        const char *name;
        int64_t n, k;
    } shapes[] = {{"lm_head", 248320, 5120}, {"gate+up", 2 * 17408, 5120}, {"down", 5120, 17408}};
    const int Ms[] = {1, 2, 7, 16};
    printf("%-8s %2s %-11s %9s %8s %6s\n", "shape", "M", "kernel", "ms", "GB/s", "%bw");
    for (int s = 0; s < 3; s++) {
        const int64_t N = shapes[s].n, K = shapes[s].k;
        const size_t fp4_bytes = (size_t)N * K / 2 + (size_t)N * K / 16, bf16_bytes = (size_t)N * K * 2;
        for (int fmt = 0; fmt < 2; fmt++) { /* 0: NVFP4 variants, 1: BF16 dense */
            const size_t bytes = fmt ? bf16_bytes : fp4_bytes;
            int copies = (int)((4 * (size_t)l2 + bytes - 1) / bytes);
            if (copies < 1) copies = 1;
            if (copies > 16) copies = 16;
            mm_ctx mc = {0};
            for (int c = 0; c < copies; c++) {
                qrt_linear *w = &mc.w[c];
                w->n = N, w->k = K, w->name = shapes[s].name;
                if (fmt == 0) {
                    void *codes, *scales;
                    CK(cudaMalloc(&codes, (size_t)N * K / 2));
                    CK(cudaMalloc(&scales, (size_t)N * K / 16));
                    qrt_cuda_fill_random_bytes(codes, (size_t)N * K / 2, 100 + c);
                    CK(cudaMemset(scales, 0x38, (size_t)N * K / 16)); /* e4m3 1.0: finite results */
                    w->fmt = QRT_WF_NVFP4, w->data = codes, w->scales = scales, w->scale2 = 1.0f / 448.0f;
                    if (qrt_cuda_nvfp4_to_blocks(w) != QRT_OK) { /* into the matmul's layout, as a load does */
                        fprintf(stderr, "tilebench: %s\n", qrt_last_error());
                        exit(1);
                    }
                } else {
                    void *data;
                    CK(cudaMalloc(&data, bf16_bytes));
                    qrt_cuda_fill_random_bytes(data, bf16_bytes, 200 + c); /* random bits: includes NaNs, harmless for timing */
                    w->fmt = QRT_WF_BF16, w->data = data;
                }
            }
            float *x, *y;
            CK(cudaMalloc((void **)&x, sizeof(float) * 16 * K));
            CK(cudaMalloc((void **)&y, sizeof(float) * 16 * N));
            qrt_cuda_fill_random_f32(x, (size_t)16 * K, 5, -1.0f, 1.0f);
            mc.x = x, mc.y = y;
            for (int mi = 0; mi < 4; mi++) {
                mc.T = Ms[mi];
                int pick = fmt == 0 ? qrt_nvfp4_pick(&mc.w[0], mc.T) : -1;
                int nv = fmt == 0 ? qrt_nvfp4_variant_count() : 1;
                for (int v = 0; v < nv; v++) {
                    mc.variant = fmt == 0 ? v : -1;
                    float ms = time_median(run_mm, &mc, copies, reps);
                    double gbs = bytes / (ms * 1e-3) / 1e9;
                    printf("%-8s %2d %-11s %9.4f %8.0f %5.1f%%%s\n", shapes[s].name, mc.T,
                           fmt == 0 ? qrt_nvfp4_variant_name(v) : "bf16_dense", ms, gbs, 100 * gbs / peak,
                           v == pick && fmt == 0 ? "  pick" : "");
                }
            }
            for (int c = 0; c < copies; c++) {
                CK(cudaFree((void *)mc.w[c].data));
                if (mc.w[c].scales) CK(cudaFree((void *)mc.w[c].scales));
            }
            CK(cudaFree(x));
            CK(cudaFree(y));
        }
    }
    CK(cudaDeviceSynchronize());
    return 0;
}
