/* The CUDA backend's op table: memory (cudaMalloc, per-thread default stream), weight upload, CUDA graphs
 * (record, replay, the step slot and the epoch; see the graph section below), and the ops
 * whose kernels live in the op-family files beside this one:
 *   matmul.cu       the matmul op by weight format, and groups of linears in one launch
 *   matmul_dense.cu BF16 / F16 / F32 / FP8 GEMV and tiled matmul
 *   matmul_fp4*.cu  NVFP4 W4A16 on the tensor cores: layout, dispatch, one file per kernel family
 *   matmul_tune.cu  the NVFP4 autotuner and its cache
 *   norms.cu        rmsnorm, add + rmsnorm
 *   conv1d.cu       causal depthwise conv + SiLU
 *   gdn.cu          Gated DeltaNet: the recurrence + its gated output norm; the chunked form on tensor cores
 *   attention.cu    q/k norm + RoPE + KV cache store (f32 / bf16 / fp8) in one op, gated causal GQA attention
 *   elementwise.cu  embed, swiglu, argmax, test/bench fills and the read probe
 * Weights uploaded by prepare_linear stay for the life of the process: the op table has no release hook
 * (the mmap'd host data is left as it is). */
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

extern "C" {
#include "util/common.h"
}

static int sync_every_launch = -1; /* QRT_CUDA_SYNC=1: synchronize after each launch to pin errors */
static thread_local int recording = 0; /* this thread's stream is being captured into a graph */

void qrt_cuda_after_launch(const char *file, int line) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && sync_every_launch < 0) {
        const char *s = getenv("QRT_CUDA_SYNC");
        sync_every_launch = s && *s && *s != '0';
    }
    /* a recorded launch does not run (and a capture forbids synchronizing): its errors show at the replay */
    if (e == cudaSuccess && sync_every_launch && !recording) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        fprintf(stderr, "qwenrt: CUDA kernel launch failed at %s:%d: %s\n", file, line, cudaGetErrorString(e));
        abort();
    }
}

int qrt_cuda_pdl(void) {
    static int on = -1;
    if (on < 0) {
        int major = 0;
        QRT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
        const char *s = getenv("QRT_CUDA_PDL");
        on = major >= 9 && !(s && *s == '0');
    }
    return on;
}

extern "C" int qrt_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" error */
        return 0;
    }
    return n;
}

extern "C" void qrt_cuda_describe(char *buf, size_t n) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
        snprintf(buf, n, "no CUDA device");
        return;
    }
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    snprintf(buf, n, "%s (sm_%d%d, %d SMs, %.0f MB L2, %.1f GB, driver %d.%d, runtime %d.%d)", p.name, p.major,
             p.minor, p.multiProcessorCount, p.l2CacheSize / 1e6, p.totalGlobalMem / 1e9, drv / 1000,
             drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
}

extern "C" void qrt_cuda_sync(void) { QRT_CUDA_CHECK(cudaDeviceSynchronize()); }

static void *cuda_alloc(size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError();
        qrt_fail(QRT_ERR_MEMORY, "cudaMalloc of %.1f MB failed: %s", bytes / 1e6, cudaGetErrorString(e));
        return NULL;
    }
    QRT_CUDA_CHECK(cudaMemset(p, 0, bytes));
    /* finished before returning, so any thread's stream may use it (see cuda_internal.cuh) */
    QRT_CUDA_CHECK(cudaDeviceSynchronize());
    return p;
}
static void cuda_free(void *p) {
    if (p) QRT_CUDA_CHECK(cudaFree(p));
}
static void cuda_copy(void *dst, const void *src, size_t bytes) {
    QRT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0));
}
static void cuda_zero(void *p, size_t bytes) { QRT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, 0)); }
static void cuda_upload(void *dst, const void *host_src, size_t bytes) {
    QRT_CUDA_CHECK(cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice));
    /* uploads are load-time work: finished (with the weight preparation queued before) on return */
    QRT_CUDA_CHECK(cudaDeviceSynchronize());
}
static void cuda_download(void *host_dst, const void *src, size_t bytes) {
    QRT_CUDA_CHECK(cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost));
}
static size_t cuda_mem_available(void) {
    size_t free_bytes = 0, total = 0;
    QRT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return free_bytes;
}

/* Upload rows of `row_bytes` from host into device rows of `padded_bytes` (zero padding), so every
 * device row starts 16-byte aligned and the kernels need no tail cases for the weight. */
static qrt_status upload_padded_rows(const void *host, int64_t rows, size_t row_bytes, size_t padded_bytes,
                                     void **out) {
    uint8_t *dev = (uint8_t *)cuda_alloc((size_t)rows * padded_bytes);
    if (!dev) return QRT_ERR_MEMORY;
    if (row_bytes == padded_bytes) QRT_CUDA_CHECK(cudaMemcpy(dev, host, (size_t)rows * row_bytes, cudaMemcpyHostToDevice));
    else
        QRT_CUDA_CHECK(cudaMemcpy2D(dev, padded_bytes, host, row_bytes, row_bytes, (size_t)rows,
                                    cudaMemcpyHostToDevice));
    *out = dev;
    return QRT_OK;
}

static qrt_status cuda_prepare_linear(qrt_linear *w) {
    void *data = NULL, *scales = NULL;
    switch (w->fmt) {
    case QRT_WF_F32:
    case QRT_WF_F16:
    case QRT_WF_BF16: {
        size_t esize = w->fmt == QRT_WF_F32 ? 4 : 2;
        QRT_TRY(upload_padded_rows(w->data, w->n, (size_t)w->k * esize,
                                   (size_t)qrt_dense_row_elems(w->fmt, w->k) * esize, &data));
        break;
    }
    case QRT_WF_FP8B: { /* e4m3 rows padded like the dense formats; the f32 block scales as they are */
        QRT_TRY(upload_padded_rows(w->data, w->n, (size_t)w->k, (size_t)qrt_dense_row_elems(w->fmt, w->k), &data));
        const size_t scale_bytes = (size_t)((w->n + 127) / 128) * (size_t)((w->k + 127) / 128) * sizeof(float);
        qrt_status st = upload_padded_rows(w->scales, 1, scale_bytes, scale_bytes, &scales);
        if (st != QRT_OK) {
            cuda_free(data);
            return st;
        }
        break;
    }
    case QRT_WF_NVFP4: {
        if (w->k % 16)
            return qrt_fail(QRT_ERR_WEIGHTS, "%s: NVFP4 needs K divisible by 16, K is %lld", w->name ? w->name : "?",
                            (long long)w->k);
        /* the rows as stored, then rearranged on the device into the matmul's slice blocks */
        QRT_TRY(upload_padded_rows(w->data, w->n, (size_t)w->k / 2, (size_t)w->k / 2, &data));
        qrt_status st = upload_padded_rows(w->scales, w->n, (size_t)w->k / 16, (size_t)w->k / 16, &scales);
        if (st != QRT_OK) {
            cuda_free(data);
            return st;
        }
        qrt_linear dev = *w;
        dev.data = data, dev.scales = scales;
        if ((st = qrt_cuda_nvfp4_to_blocks(&dev)) != QRT_OK) {
            cuda_free(data);
            cuda_free(scales);
            return st;
        }
        data = (void *)dev.data, scales = NULL;
        break;
    }
    default:
        return qrt_fail(QRT_ERR_UNSUPPORTED, "%s: weight format %s has no CUDA matmul yet", w->name ? w->name : "?",
                        qrt_wformat_name(w->fmt));
    }
    w->data = data;
    w->scales = scales;
    return QRT_OK;
}

/* ---- graphs -------------------------------------------------------------------------------------------
 * A forward is recorded by stream capture of this thread's default stream and replayed with cudaGraphLaunch.
 * What changes from one replay to the next lives in the step slot, a device array that graph_launch fills by
 * one tiny kernel (its values passed by value, so no host buffer has to outlive the call) right before the
 * replay: [0] the position, [1..] the token ids. Recorded embed / attn_prep / attention read it (their kernels
 * take the slot's address; unrecorded they get NULL and use their arguments, so the plain path is unchanged).
 *
 * The epoch: a recorded kernel keeps the addresses it was given, including the grow-on-demand scratch buffers
 * (attention's chunk scratch here, the matmuls' x staging and split-tile buffers). Each reallocation reports itself
 * (qrt_cuda_scratch_moved), which moves the epoch. Recording never moves one: the model records a key only after
 * running it once plainly, and that run grew whatever the key needs. */

#define STEP_IDS 1 /* slot index of the first token id */
__device__ static int step_slot[STEP_IDS + QRT_GRAPH_MAX_T];
static int *step_dev = NULL; /* its device address */
static int graph_max_pos = 0;
static unsigned epoch = 0;

typedef struct {
    int pos, n;
    int32_t ids[QRT_GRAPH_MAX_T];
} step_args;

__global__ void set_step(step_args a) {
    if (threadIdx.x == 0) step_slot[0] = a.pos;
    if ((int)threadIdx.x < a.n) step_slot[STEP_IDS + threadIdx.x] = a.ids[threadIdx.x];
}

const int *qrt_cuda_graph_pos(int *max_pos) {
    if (!recording) return NULL;
    *max_pos = graph_max_pos;
    return step_dev;
}
const int32_t *qrt_cuda_graph_ids(void) { return recording ? step_dev + STEP_IDS : NULL; }
void qrt_cuda_scratch_moved(void) { epoch++; }

void *qrt_cuda_grow(void **buf, size_t *cap, size_t bytes) {
    if (bytes > *cap) {
        if (*buf) {
            QRT_CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
            QRT_CUDA_CHECK(cudaFree(*buf));
        }
        QRT_CUDA_CHECK(cudaMalloc(buf, bytes));
        *cap = bytes;
        qrt_cuda_scratch_moved();
    }
    return *buf;
}

static int cuda_graph_begin(int max_pos) {
    if (!step_dev) QRT_CUDA_CHECK(cudaGetSymbolAddress((void **)&step_dev, step_slot));
    /* thread-local mode: this thread may not allocate or synchronize while capturing (an error if it tries) */
    if (cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    recording = 1;
    graph_max_pos = max_pos;
    return 1;
}

static void *cuda_graph_end(void) {
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    recording = 0;
    cudaError_t e = cudaStreamEndCapture(cudaStreamPerThread, &g);
    if (e == cudaSuccess) e = cudaGraphInstantiate(&x, g, 0);
    if (g) cudaGraphDestroy(g); /* the executable graph keeps its own copy */
    if (e != cudaSuccess) {
        fprintf(stderr, "qwenrt: recording a CUDA graph failed (%s); running without it\n", cudaGetErrorString(e));
        cudaGetLastError();
        return NULL;
    }
    return x;
}

static void cuda_graph_launch(void *graph, int pos, const int32_t *ids, int T) {
    QRT_ASSERT(T >= 0 && T <= QRT_GRAPH_MAX_T);
    if (T) {
        step_args a;
        a.pos = pos, a.n = T;
        memcpy(a.ids, ids, sizeof(int32_t) * (size_t)T);
        set_step<<<1, QRT_GRAPH_MAX_T>>>(a); /* plain: the replay before may still read the slot */
        QRT_CUDA_LAUNCHED();
    }
    QRT_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph, cudaStreamPerThread));
}

static void cuda_graph_free(void *graph) {
    if (graph) QRT_CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)graph));
}

static unsigned cuda_graph_epoch(void) { return epoch; }

/* ---- embed ---------------------------------------------------------------------------------------------- */

/* embed takes host ids: they go through one device buffer, grown when a longer call comes (while recording, the
 * step slot's ids instead). */
static int32_t *ids_dev = NULL;
static int ids_cap = 0;

static void cuda_embed(const qrt_linear *E, const int32_t *ids, int T, float *out) {
    if (const int32_t *slot = qrt_cuda_graph_ids()) {
        QRT_ASSERT(T <= QRT_GRAPH_MAX_T);
        qrt_cuda_embed(E, slot, T, out);
        return;
    }
    if (T > ids_cap) {
        cuda_free(ids_dev);
        ids_cap = T < 256 ? 256 : T;
        QRT_CUDA_CHECK(cudaMalloc(&ids_dev, sizeof(int32_t) * (size_t)ids_cap));
    }
    QRT_CUDA_CHECK(cudaMemcpy(ids_dev, ids, sizeof(int32_t) * (size_t)T, cudaMemcpyHostToDevice));
    qrt_cuda_embed(E, ids_dev, T, out);
}

static qrt_backend cuda_backend;

extern "C" const qrt_backend *qrt_backend_cuda(void) {
    if (qrt_cuda_device_count() < 1) {
        qrt_fail(QRT_ERR_UNSUPPORTED, "no CUDA device is available (no GPU, or no driver); use --device cpu");
        return NULL;
    }
    if (!cuda_backend.name) {
        QRT_CUDA_CHECK(cudaSetDevice(0));
        qrt_backend *b = &cuda_backend;
        b->alloc = cuda_alloc;
        b->free = cuda_free;
        b->copy = cuda_copy;
        b->zero = cuda_zero;
        b->upload = cuda_upload;
        b->download = cuda_download;
        b->mem_available = cuda_mem_available;
        /* QRT_MAX_T: a piece's matmuls run on cuBLASLt (matmul_blas.cu), each NVFP4 weight dequantized once per
         * piece, so the longer the faster (a session shrinks it where memory is short) */
        b->prefill_piece = 8192;
        b->prepare_linear = cuda_prepare_linear;
        b->embed = cuda_embed;
        b->matmul = qrt_cuda_matmul;
        b->prepare_group = qrt_cuda_prepare_group;
        b->matmul_group = qrt_cuda_matmul_group;
        b->rmsnorm = qrt_cuda_rmsnorm;
        b->add_rmsnorm = qrt_cuda_add_rmsnorm;
        b->conv1d_silu = qrt_cuda_conv1d_silu;
        b->gdn = qrt_cuda_gdn;
        b->attn_prep = qrt_cuda_attn_prep;
        b->attention = qrt_cuda_attention;
        b->swiglu = qrt_cuda_swiglu;
        b->matmul_swiglu = qrt_cuda_matmul_swiglu;
        b->argmax = qrt_cuda_argmax;
        b->graph_begin = cuda_graph_begin;
        b->graph_end = cuda_graph_end;
        b->graph_launch = cuda_graph_launch;
        b->graph_free = cuda_graph_free;
        b->graph_epoch = cuda_graph_epoch;
        b->name = "cuda";
    }
    return &cuda_backend;
}
