/* Shared by the CUDA backend's .cu files: error checks, launch helpers, number conversions, warp sums.
 * Every kernel runs on the calling thread's default stream (nvcc --default-stream per-thread, so that it can be
 * captured into a CUDA graph), so one thread's ops execute in call order and a blocking download sees every
 * earlier op's result. One session's ops must come from one thread at a time; alloc and upload finish before
 * they return, so a model or session made on one thread can be used from another. */
#ifndef QRT_CUDA_INTERNAL_CUH
#define QRT_CUDA_INTERNAL_CUH
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" {
#include "backend/cuda/cuda_backend.h"
}

/* A failing CUDA call inside an op is a programming error (bad pointer, bad launch): abort with the
 * location. Calls whose failure is an input error (allocation) are checked where they are made. */
#define QRT_CUDA_CHECK(call)                                                                            \
    do {                                                                                                \
        cudaError_t e_ = (call);                                                                        \
        if (e_ != cudaSuccess) {                                                                        \
            fprintf(stderr, "qwenrt: CUDA error at %s:%d: %s: %s\n", __FILE__, __LINE__, #call,          \
                    cudaGetErrorString(e_));                                                            \
            abort();                                                                                    \
        }                                                                                               \
    } while (0)

/* After every launch: the launch error, and with QRT_CUDA_SYNC=1 the kernel's own error too. */
void qrt_cuda_after_launch(const char *file, int line);
#define QRT_CUDA_LAUNCHED() qrt_cuda_after_launch(__FILE__, __LINE__)

/* ---- programmatic dependent launch (sm_90 and later) ------------------------------------------------------
 * Why: a decode step is ~700 kernels back to back. A kernel launched by QRT_LAUNCH may be launched while the kernel
 * before it on the stream still runs, so its blocks are already resident when that one completes (about 2% of decode
 * on the H200, docs/benchmarks.md). The rule that keeps this correct: every kernel launched
 * by QRT_LAUNCH begins with pdl_start() in every thread, before it touches any memory that a forward kernel writes
 * (mma_cl asks for its first weights before it: they are written only at load, which ends in a device-wide
 * synchronisation; gdn_head and conv1d ask for their states to be brought into the L2, l2_prefetch below, which reads
 * nothing into the kernel). It returns once the kernel before has completed and its writes are visible, so the kernel
 * runs exactly as after a plain launch; then it lets the next kernel launch (so at most one kernel waits behind a
 * running one). Weights asked for before the wait: mma_cl's first ring slot gains (matmul_fp4_cl.cu); an L2 prefetch in
 * mma_w1 / mma_k lost (docs/benchmarks.md, "Tried and did not help"). Kernels outside the
 * forward (fills, layout changes, the read probe, the graph's step slot) keep plain launches, which wait for
 * everything before them. Both instructions do nothing after a plain launch (QRT_CUDA_PDL=0, or a GPU below sm_90). */
__device__ __forceinline__ void pdl_start(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
/* Bytes at p into the L2, asked for by one thread (sm_90's bulk prefetch; nothing below it, or unaligned). For data
 * that a kernel reads right after pdl_start() and that is likely out of the L2 (a layer's recurrent state, written a
 * token ago): asked for before the wait, its DRAM latency overlaps the kernel before. A prefetch may bring stale
 * data without harm: the loads after the wait read the L2, which every write reaches. */
__device__ __forceinline__ void l2_prefetch(const void *p, size_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (((uintptr_t)p & 15) == 0 && bytes % 16 == 0 && bytes < (1u << 31))
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"((unsigned)bytes) : "memory");
#else
    (void)p, (void)bytes;
#endif
}
/* 1 when launches may overlap their predecessor: compute capability 9.0 or more and QRT_CUDA_PDL not 0. */
int qrt_cuda_pdl(void);
/* The launch attribute that groups a grid's blocks into clusters of `cluster` along x (sm_90). */
static inline cudaLaunchAttribute qrt_cluster_attr(int cluster) {
    cudaLaunchAttribute a;
    a.id = cudaLaunchAttributeClusterDimension;
    a.val.clusterDim.x = (unsigned)cluster, a.val.clusterDim.y = 1, a.val.clusterDim.z = 1;
    return a;
}
/* cluster: blocks per thread-block cluster along x (1: no cluster; more needs sm_90, and the grid a multiple of it). */
template <typename... P, typename... A>
static inline void qrt_launch_at(const char *file, int line, int cluster, void (*kernel)(P...), dim3 grid, dim3 block,
                                 size_t smem, A... args) {
    if (!qrt_cuda_pdl() && cluster == 1) {
        kernel<<<grid, block, smem, cudaStreamPerThread>>>(args...);
        qrt_cuda_after_launch(file, line);
        return;
    }
    cudaLaunchAttribute attrs[2];
    unsigned n = 0;
    if (qrt_cuda_pdl()) {
        attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attrs[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster > 1) attrs[n++] = qrt_cluster_attr(cluster);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = cudaStreamPerThread;
    cfg.attrs = attrs, cfg.numAttrs = n;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, args...);
    if (e != cudaSuccess) {
        fprintf(stderr, "qwenrt: CUDA kernel launch failed at %s:%d: %s\n", file, line, cudaGetErrorString(e));
        abort();
    }
    qrt_cuda_after_launch(file, line);
}
/* QRT_LAUNCH(kernel, grid, block, shared bytes, args...): a launch of a kernel that follows the rule above. */
#define QRT_LAUNCH(...) qrt_launch_at(__FILE__, __LINE__, 1, __VA_ARGS__)
/* QRT_LAUNCH_CLUSTER(blocks per cluster, kernel, grid, block, shared bytes, args...): the same in clusters. */
#define QRT_LAUNCH_CLUSTER(...) qrt_launch_at(__FILE__, __LINE__, __VA_ARGS__)

static inline unsigned qrt_grid(size_t n, unsigned block) { return (unsigned)((n + block - 1) / block); }
/* The SMs of device 0 (asked once per file). */
static inline int sm_count(void) {
    static int n = 0;
    if (!n) QRT_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0));
    return n;
}
/* The compute capability's major number of device 0 (asked once per file). */
static inline int compute_major(void) {
    static int n = 0;
    if (!n) QRT_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrComputeCapabilityMajor, 0));
    return n;
}

/* The shared memory one block may ask for on device 0 (asked once per file). */
static inline int smem_per_block_optin(void) {
    static int n = 0;
    if (!n) QRT_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    return n;
}
/* false where the device cannot give one block of kernel smem bytes (99 KiB per block on sm_86 and sm_89, 163 on
 * sm_80); else lets it have them past 48 KiB (asked once per kernel: *asked). A caller that gets false runs a variant
 * that needs less. */
template <typename K> static inline bool smem_allow(K kernel, size_t smem, int *asked) {
    if (smem > (size_t)smem_per_block_optin()) return false;
    if (!*asked) {
        QRT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        *asked = 1;
    }
    return true;
}

/* Dense (and FP8) weight rows are padded on the device to a multiple of 16 bytes (see prepare_linear), so every
 * row starts 16-byte aligned. Elements per padded row: */
static inline int64_t qrt_dense_row_elems(int fmt, int64_t k) {
    int64_t per16 = fmt == QRT_WF_F32 ? 4 : fmt == QRT_WF_FP8B ? 16 : 8;
    return (k + per16 - 1) / per16 * per16;
}
/* The elements of 16-byte chunk c of a padded dense row (4 F32, 8 BF16/F16), widened to f32 (the CUDA-core dense
 * matmul and the embedding gather). */
template <int FMT>
__device__ __forceinline__ void load_w_chunk(const uint8_t *row /* [Kp] elements */, int64_t c, float *w /* [CE] */) {
    uint4 u = __ldg(reinterpret_cast<const uint4 *>(row) + c);
    uint32_t words[4] = {u.x, u.y, u.z, u.w};
    if (FMT == QRT_WF_F32) {
#pragma unroll
        for (int j = 0; j < 4; j++) w[j] = __uint_as_float(words[j]);
    } else if (FMT == QRT_WF_BF16) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            w[2 * j] = __uint_as_float(words[j] << 16);
            w[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
        }
    } else {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            __half2 h = *reinterpret_cast<__half2 *>(&words[j]);
            float2 f = __half22float2(h);
            w[2 * j] = f.x;
            w[2 * j + 1] = f.y;
        }
    }
}

/* NVFP4 rows are padded to a multiple of 512 elements (256 bytes of codes, 32 scale bytes; codes and scales
 * zero): the mma kernels' slice, so every slice is whole and every 16-byte code and 8-byte scale group they
 * copy is aligned. No waste at the 27B shapes (K = 5120, 6144, 17408). */
__host__ __device__ static inline int64_t qrt_nvfp4_row_elems(int64_t k) { return (k + 511) / 512 * 512; }

__device__ __forceinline__ float warp_sum(float v) {
    /* xor butterfly: every lane ends with the same value, summed in the same tree */
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

/* Sum (MAX false) or max (MAX true) over a block of blockDim.x threads (a multiple of 32, at most 1024); every
 * thread gets the result. scratch holds 32 floats. The sum's order is fixed by the block size; a max is exact in
 * any order. */
template <bool MAX>
__device__ __forceinline__ float block_reduce(float v, float *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = MAX ? warp_max(v) : warp_sum(v);
    __syncthreads(); /* scratch may still be read by an earlier call */
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    const float t = lane < nwarps ? scratch[lane] : MAX ? -INFINITY : 0.0f;
    return MAX ? warp_max(t) : warp_sum(t);
}
__device__ __forceinline__ float block_sum(float v, float *scratch) { return block_reduce<false>(v, scratch); }
__device__ __forceinline__ float block_max(float v, float *scratch) { return block_reduce<true>(v, scratch); }

/* ---- tensor-core instructions (mma.sync, sm_80 and later) ---------------------------------------------------
 * d += a · b for one warp: a is the 16 x k tile (row-major fragments), b the k x 8 tile (column-major), d the 16 x 8
 * f32 accumulator; which lane holds which element is the PTX ISA's fragment layout for the shape. */
/* The shared-memory address of a generic pointer into shared memory (what ldmatrix and cp.async take). */
__device__ __forceinline__ unsigned smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
/* The operands' loads: four 8x8 b16 matrices; lane l gives the address of row l & 7 of matrix l >> 3. trans: each transposed. */
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p))
                 : "memory");
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p))
                 : "memory");
}
/* m16n8k16, f16 inputs */
__device__ __forceinline__ void mma_f16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* m16n8k16, bf16 inputs */
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t bf16x2_bits(__nv_bfloat162 v) { return *reinterpret_cast<uint32_t *>(&v); }
/* (x, y) as two bf16 terms: hi = bf16(x, y), lo = bf16 of what hi missed (bf16 keeps f32's exponent range, so
 * hi + lo holds about 16 significant bits) */
__device__ __forceinline__ void split_bf16x2(float x, float y, uint32_t &hi, uint32_t &lo) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    hi = bf16x2_bits(h);
    lo = bf16x2_bits(__floats2bfloat162_rn(x - __low2float(h), y - __high2float(h)));
}
/* m16n8k8, tf32 inputs (f32 bit patterns rounded to tf32) */
__device__ __forceinline__ void mma_tf32_1688(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Graph recording (backend.cu, see the graph_* hooks in backend.h). While this thread records a graph, the
 * device addresses of the step slot's position and token ids, and the bound on the positions the graph will be
 * launched at (max_pos: attention sizes its grid for it); NULL when not recording. */
const int *qrt_cuda_graph_pos(int *max_pos);
const int32_t *qrt_cuda_graph_ids(void);
/* A grow-on-demand device buffer has been reallocated: graphs recorded before may point at the old one. */
void qrt_cuda_scratch_moved(void);
/* A grow-on-demand device buffer *buf of *cap bytes made at least `bytes`: the old one is freed only after the calling
 * thread's queued work (a kernel may still read it), and the move is reported (qrt_cuda_scratch_moved). */
void *qrt_cuda_grow(void **buf, size_t *cap, size_t bytes);

/* Device bytes of an NVFP4 weight of n rows and k columns in the matmul's layout (slice blocks, matmul_fp4_layout.cu). */
extern "C" size_t qrt_nvfp4_device_bytes(int64_t n, int64_t k);
/* w->data / w->scales: device copies of the rows as stored ([N][K/2] codes, [N][K/16] e4m3 scales). Rearranges
 * them into the matmul's layout: w->data becomes the new buffer, w->scales NULL, and both inputs are freed.
 * QRT_ERR_MEMORY (w unchanged) when the device cannot hold the new buffer. */
extern "C" qrt_status qrt_cuda_nvfp4_to_blocks(qrt_linear *w);
/* Launchers, one per op, defined in the op family's .cu file. Pointers are device memory. */
void qrt_cuda_embed(const qrt_linear *E, const int32_t *ids_dev, int T, float *out);
void qrt_cuda_matmul(const qrt_linear *W, const float *x, int T, float *y);
void qrt_cuda_matmul_dense(const qrt_linear *W, const float *x, int T, float *y); /* BF16/F16/F32/FP8: matmul_dense.cu */
void qrt_cuda_matmul_dense_mma(const qrt_linear *W, const float *x, int T, float *y); /* matmul_dense_mma.cu */
/* A group whose parts are all BF16 or all FP8 block-128 (the stored layout's GDN in_proj) in one tensor-core launch,
 * each part's bits as matmul on it alone: matmul_dense_mma.cu. */
bool qrt_cuda_dense_mma_group_fits(const qrt_linear_group *g);
void qrt_cuda_matmul_dense_mma_group(const qrt_linear_group *g, const float *x, int T, float *const *y);
qrt_status qrt_cuda_prepare_group(qrt_linear_group *g);
void qrt_cuda_matmul_group(const qrt_linear_group *g, const float *x, int T, float *const *y);
void qrt_cuda_matmul_swiglu(const qrt_linear_group *g, const float *x, int T, float *y, float *up);
void qrt_cuda_rmsnorm(const float *x, const float *w, int rows, int n, float eps, float *y);
void qrt_cuda_add_rmsnorm(float *h, const float *y, const float *w, int rows, int n, float eps, float *x);
void qrt_cuda_conv1d_silu(const float *x, float *state, const float *w, int T, int ch, int Ck, float *y);
void qrt_cuda_gdn(const float *qkv, const float *a, const float *b, const float *A_log, const float *dt_bias,
                  const float *S_in, float *S, int T, int Hk, int Hv, int Dk, int Dv, int chunked, const float *z,
                  const float *norm_w, float eps, float *o);
void qrt_cuda_attn_prep(float *qg, const float *k, const float *v, const float *q_norm, const float *k_norm, float eps,
                        const qrt_kv *kv, int T, int pos0, int Hq, int Hkv, int Dh, int R, double theta);
void qrt_cuda_attention(const float *qg, const qrt_kv *kv, int T, int pos0, int Hq, int Hkv, int Dh, float *out);
void qrt_cuda_swiglu(const float *g, const float *u, size_t n, float *y);
void qrt_cuda_argmax(const float *x, int rows, int n, int32_t *out);
#endif
