/* Prefill matmul y [T][N] = x [T][K] · Wᵀ on the tensor cores through cuBLASLt (BF16 x BF16, f32 accumulate and
 * output), for BF16, F16, FP8 block-128 and NVFP4 weights at prefill sizes (qrt_cuda_blas_takes).
 *
 * Why: the hand kernels (matmul_dense.cu, matmul_fp4_*.cu) are built for decode, T ≤ 16, where a matmul is a read
 * of the weights; at prefill sizes it is compute, which a tuned library GEMM does at the tensor cores' rate and
 * they do not (docs/benchmarks.md, "Prefill matmuls", says how tilebench compares them). Steps, all on the calling
 * thread's default stream:
 *   x_to_bf16        x → bf16 [T][Kb] once per matmul or group (Kb = K rounded up to 8, zero padded): cuBLASLt
 *                    takes one input type for both operands.
 *   BF16 weights     read in place: the device rows are already padded to Kb (prepare_linear).
 *   dequant_fp4      NVFP4 slice blocks (plain, fused group or gate|up pairs) → bf16 rows [rows][Kb], exact
 *                    value code · e4m3 scale · scale2 rounded once to bf16; dequant_dense the same for F16 and FP8
 *                    (e4m3 · its block's f32 scale). Into one scratch buffer of at most BLAS_WSCRATCH_BYTES; a
 *                    weight larger than that (lm_head) runs in row chunks, one GEMM per chunk.
 *   cublasLtMatmul   D [T][rows] (column-major rows x T, ld N) = W_bf16 [rows][Kb] (op T) · x_bf16 (op N), the
 *                    algorithm of the library's heuristic, cached per shape.
 * Numbers: the weights are exact or rounded once to bf16 (F16, FP8 · scale, NVFP4 · scale2); x is rounded to bf16
 * (relative error ≤ 2^-9 per element); products are accumulated in f32 in the library's order. A token's result
 * therefore depends on T and differs from the hand kernels' by bf16 rounding: this path is never taken at decode or
 * verify sizes (T ≤ QRT_GRAPH_MAX_T), whose batch invariance the speculative parity depends on, and never inside a
 * recorded graph. F32 weights keep the hand kernel. Every CUDA and cuBLASLt call is checked (a failure aborts with
 * the call and its status: it is a programming error, as in the other ops). */
#include <cublasLt.h>
#include <string.h>

#include "backend/cuda/matmul_fp4.cuh"

/* Bytes of the dequantized-weight scratch: the largest 27B-shape linear (gate or up or down, 17408 x 5120 bf16:
 * 178 MB) fits whole; larger ones (lm_head) run in row chunks. */
#define BLAS_WSCRATCH_BYTES ((size_t)192 << 20)
#define BLAS_WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLASLt's workspace (its heuristic picks within it) */
#define BLAS_CACHE 128                          /* shapes whose layouts and algorithm are kept */

#define QRT_BLAS_CHECK(call)                                                                                  \
    do {                                                                                                      \
        cublasStatus_t s_ = (call);                                                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                    \
            fprintf(stderr, "qwenrt: cuBLASLt error at %s:%d: %s: status %d (%s)\n", __FILE__, __LINE__, #call, \
                    (int)s_, cublasLt_status_name(s_));                                                       \
            abort();                                                                                          \
        }                                                                                                     \
    } while (0)

static const char *cublasLt_status_name(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized: is libcublasLt from the same CUDA toolkit?";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "not supported on this GPU";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "see cublas_api.h";
    }
}

/* ---- when this path runs ------------------------------------------------------------------------------
 * From T = qrt_cuda_blas_min_t(fmt), by format: the smallest M at which tilebench shows cuBLASLt (x conversion and
 * dequantization included) beating the hand kernel on every 27B shape and staying ahead up to M = 8192
 * (docs/benchmarks.md, "Prefill matmuls", has the table): BF16 from 64 (the smallest M timed; 3-4x ahead there), NVFP4
 * from 192 (at 128 mma_gemm still wins on every shape, the dequantization being a fixed cost). F16 (its values
 * rounded to bf16 here) and FP8 are not measured and keep the hand kernels. Never at T ≤ QRT_GRAPH_MAX_T (see the
 * header); and only for weights (or groups) of at least BLAS_MIN_ELEMS elements: below that (the test fixtures'
 * 128-wide layers) a GEMM is a few microseconds either way, and the hand kernels keep those models' results within
 * their tight tolerances of the reference. QRT_BLAS_MIN_T overrides the table for every format but F32 (for
 * measurements; 0 or unset: the table). */
#define BLAS_MIN_ELEMS ((int64_t)1 << 21)
/* A format whose crossover is not measured yet: off unless QRT_BLAS_MIN_T asks for it. */
#define QRT_BLAS_UNMEASURED (1 << 29)

static int blas_table_min_t(int fmt) {
    switch (fmt) {
    case QRT_WF_BF16: return 64;
    case QRT_WF_NVFP4: return 192;
    case QRT_WF_F16:
    case QRT_WF_FP8B: return QRT_BLAS_UNMEASURED;
    default: return 1 << 30; /* F32: the hand kernel always */
    }
}

extern "C" int qrt_cuda_blas_min_t(int fmt) {
    static int forced = -1;
    if (forced < 0) {
        const char *e = getenv("QRT_BLAS_MIN_T");
        forced = e ? atoi(e) : 0;
        forced = forced < 0 ? 0 : forced;
    }
    const int t = forced && blas_table_min_t(fmt) < (1 << 30) ? forced : blas_table_min_t(fmt);
    return t > QRT_GRAPH_MAX_T ? t : QRT_GRAPH_MAX_T + 1;
}

extern "C" int qrt_cuda_blas_takes(int fmt, int64_t elems, int T) {
    return T >= qrt_cuda_blas_min_t(fmt) && elems >= BLAS_MIN_ELEMS;
}

/* ---- scratch: x in bf16, the dequantized weight rows, cuBLASLt's handle and workspace -------------------- */

static cublasLtHandle_t blas_handle;
static void *blas_workspace;
static void *xb_buf, *wb_buf; /* bf16 */
static size_t xb_cap, wb_cap; /* bytes */

static void blas_init(void) {
    if (blas_handle) return;
    QRT_BLAS_CHECK(cublasLtCreate(&blas_handle));
    QRT_CUDA_CHECK(cudaMalloc(&blas_workspace, BLAS_WORKSPACE_BYTES));
}

/* A grow-on-demand buffer of at least n bf16 (never used inside a recorded graph, but a move is still reported). */
static __nv_bfloat16 *grow(void **buf, size_t *cap, size_t n) {
    return static_cast<__nv_bfloat16 *>(qrt_cuda_grow(buf, cap, n * sizeof(__nv_bfloat16)));
}

static inline int64_t blas_ld(int64_t K) { return (K + 7) / 8 * 8; } /* bf16 rows padded to 16 bytes */

/* ---- kernels ------------------------------------------------------------------------------------------ */

/* One thread per 8 elements of x: xb [t][k] = bf16(x [t][k]), 0 for K ≤ k < Kb. VEC (K a multiple of 8 and x
 * 16-byte aligned, every 27B shape): two 16-byte loads per thread instead of eight 4-byte ones. */
template <bool VEC>
__global__ void x_to_bf16(const float *x /* [T][K] */, int64_t K, int64_t Kb, int T, uint4 *xb /* [T][Kb/8] */) {
    pdl_start();
    const int64_t per_row = Kb / 8, n = per_row * T;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        __align__(16) __nv_bfloat162 v[4];
        if (VEC) {
            const float4 *src = reinterpret_cast<const float4 *>(x) + 2 * i; /* Kb = K: row t starts at 8·per_row·t */
            const float4 a = src[0], b = src[1];
            v[0] = __floats2bfloat162_rn(a.x, a.y), v[1] = __floats2bfloat162_rn(a.z, a.w);
            v[2] = __floats2bfloat162_rn(b.x, b.y), v[3] = __floats2bfloat162_rn(b.z, b.w);
        } else {
            const int64_t t = i / per_row, k0 = i % per_row * 8;
            const float *src = x + t * K;
            float f[8];
#pragma unroll
            for (int e = 0; e < 8; e++) f[e] = k0 + e < K ? src[k0 + e] : 0.0f;
#pragma unroll
            for (int e = 0; e < 4; e++) v[e] = __floats2bfloat162_rn(f[2 * e], f[2 * e + 1]);
        }
        xb[i] = *reinterpret_cast<const uint4 *>(v);
    }
}

/* Where logical row R of an NVFP4 weight sits in its slice blocks. Plain (a linear, or a part of a fused group:
 * its data points at its first tile): tile R/16, row half (R%16)/8. A part of a gate|up pair (fp4_pair_blocks):
 * pair tile 2·(R/16) + (R%16)/8, row half = the part (0 gate, 1 up). Row g = R%8 of the half either way. */
struct fp4_rows {
    const uint4 *blocks; /* [tiles][S][FP4_BLOCK_U4] */
    int64_t S;           /* slices per row */
    int pair_half;       /* -1: plain; 0 / 1: gate / up of a pair */
    float scale2;
};

/* One thread per 8 elements (one word of codes): rows r0..r0+rows-1 of the weight → wb [rows][Kb] bf16, so that a
 * warp's stores are 512 contiguous bytes. Word w of the 32-element chunk ch of slice s = ch / 16 is a word of chunk
 * step q = ch % 4 of lane c = ch % 16 / 4 (the layout of fp4_to_blocks); its block scale is byte w / 2 of the
 * chunk's two in the lane's scale uint4. Each value is code · (e4m3 scale · FP4_DECODE_UNDO · scale2) in f32, rounded
 * once to bf16. */
__global__ void dequant_fp4(fp4_rows src, int64_t r0, int64_t rows, int64_t Kb, uint4 *wb /* [rows][Kb/8] */) {
    pdl_start();
    const int64_t words = Kb / 8, n = rows * words;
    const float mul = FP4_DECODE_UNDO * src.scale2;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / words, wd = i % words, R = r0 + r, ch = wd / 4, s = ch / 16;
        const int w = (int)(wd % 4), q = (int)(ch % 4), c = (int)(ch % 16 / 4), g = (int)(R % 8);
        const int64_t tile = src.pair_half < 0 ? R / 16 : 2 * (R / 16) + R % 16 / 8;
        const int h = src.pair_half < 0 ? (int)(R % 16 / 8) : src.pair_half;
        const uint4 *block = src.blocks + (tile * src.S + s) * FP4_BLOCK_U4;
        const int lane = g * 4 + c;
        const uint32_t code = reinterpret_cast<const uint32_t *>(block + (h * 4 + q) * 32 + lane)[w];
        const uint32_t sw = reinterpret_cast<const uint32_t *>(block + 256 + lane)[2 * h + q / 2];
        const uint32_t s2 = e4m3x2_lo_to_h2(sw >> (16 * (q & 1))); /* this chunk's 2 block scales */
        const __half2 s01 = *reinterpret_cast<const __half2 *>(&s2);
        const float bs = (w < 2 ? __low2float(s01) : __high2float(s01)) * mul;
        uint32_t o[4];
        fp4_decode_word(code, o);
        /* o[0] = (e0, e2), o[1] = (e1, e3), o[2] = (e4, e6), o[3] = (e5, e7) */
        const float2 f0 = __half22float2(*reinterpret_cast<__half2 *>(&o[0]));
        const float2 f1 = __half22float2(*reinterpret_cast<__half2 *>(&o[1]));
        const float2 f2 = __half22float2(*reinterpret_cast<__half2 *>(&o[2]));
        const float2 f3 = __half22float2(*reinterpret_cast<__half2 *>(&o[3]));
        __align__(16) __nv_bfloat162 v[4] = {
            __floats2bfloat162_rn(f0.x * bs, f1.x * bs), __floats2bfloat162_rn(f0.y * bs, f1.y * bs),
            __floats2bfloat162_rn(f2.x * bs, f3.x * bs), __floats2bfloat162_rn(f2.y * bs, f3.y * bs)};
        wb[i] = *reinterpret_cast<const uint4 *>(v);
    }
}

/* One thread per 8 elements: rows r0.. of a padded F16 or FP8 weight (row stride Kp elements) → wb [rows][Kb]. FP8:
 * e4m3 · the f32 scale of its 128 x 128 block (scales [ceil(N/128)][scols]), rounded once. */
template <int FMT>
__global__ void dequant_dense(const uint8_t *w, const float *scales, int64_t scols, int64_t Kp, int64_t K, int64_t r0,
                              int64_t rows, int64_t Kb, uint4 *wb /* [rows][Kb/8] */) {
    pdl_start();
    const int64_t per_row = Kb / 8, n = rows * per_row;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / per_row, k0 = i % per_row * 8, R = r0 + r;
        __align__(16) __nv_bfloat16 v[8];
        if (FMT == QRT_WF_FP8B) {
            const float sc = scales[(R / 128) * scols + k0 / 128]; /* 8 elements never span two blocks */
            const uint2 u = *reinterpret_cast<const uint2 *>(w + R * Kp + k0);
            const uint32_t words[2] = {u.x, u.y};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(
                    (__nv_fp8x2_storage_t)(words[j / 2] >> (16 * (j & 1))), __NV_E4M3);
                const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&hr));
                v[2 * j] = __float2bfloat16_rn(k0 + 2 * j < K ? f.x * sc : 0.0f);
                v[2 * j + 1] = __float2bfloat16_rn(k0 + 2 * j + 1 < K ? f.y * sc : 0.0f);
            }
        } else {
            const uint4 u = *reinterpret_cast<const uint4 *>(w + (R * Kp + k0) * 2);
            const __half *hv = reinterpret_cast<const __half *>(&u);
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = __float2bfloat16_rn(k0 + j < K ? __half2float(hv[j]) : 0.0f);
        }
        wb[i] = *reinterpret_cast<const uint4 *>(v);
    }
}

static unsigned grid_for(int64_t threads) { return (unsigned)QRT_MIN((threads + 255) / 256, (int64_t)65536); }

/* ---- cuBLASLt ----------------------------------------------------------------------------------------- */

/* Alignment (bytes, up to 256) of a pointer: part of a shape's key, the heuristic's algorithms depend on it. */
static int align_of(const void *p) {
    const uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 4 && a % (uintptr_t)al) al /= 2;
    return al;
}

typedef struct {
    int64_t rows, T, K, lda, ldb, ldd;
    int align_a, align_d;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
    int used;
} blas_shape;

static cublasLtMatmulDesc_t blas_desc;
static blas_shape blas_shapes[BLAS_CACHE];
static int blas_next; /* the slot a new shape takes when all are used (round robin) */

static void shape_free(blas_shape *e) {
    if (!e->used) return;
    QRT_BLAS_CHECK(cublasLtMatrixLayoutDestroy(e->a));
    QRT_BLAS_CHECK(cublasLtMatrixLayoutDestroy(e->b));
    QRT_BLAS_CHECK(cublasLtMatrixLayoutDestroy(e->d));
    e->used = 0;
}

/* Which of the heuristic's candidates runs, to measure whether its order is the order of speed: QRT_BLAS_ALGO=i
 * takes the i-th (0 = the first, the default; the last offered where fewer are), QRT_BLAS_ALGO=time times every
 * candidate on a shape's first call and keeps the fastest (BLAS_TIMED: the picks last for the process, not across
 * processes, and candidates differ in their bits: a measurement mode). */
#define BLAS_CANDIDATES 8
#define BLAS_TIMED (-1)
static int blas_candidate(void) {
    static int i = -2;
    if (i == -2) {
        const char *e = getenv("QRT_BLAS_ALGO");
        i = !e ? 0 : !strcmp(e, "time") ? BLAS_TIMED : atoi(e);
        i = i < BLAS_TIMED ? 0 : i >= BLAS_CANDIDATES ? BLAS_CANDIDATES - 1 : i;
    }
    return i;
}

/* D = A · Bᵀ for shape e with algorithm algo, on the calling thread's default stream */
static void blas_run(const blas_shape *e, const cublasLtMatmulAlgo_t *algo, const void *A, const void *B, void *D) {
    const float one = 1.0f, zero = 0.0f;
    QRT_BLAS_CHECK(cublasLtMatmul(blas_handle, blas_desc, &one, A, e->a, B, e->b, &zero, D, e->d, D, e->d, algo,
                                  blas_workspace, BLAS_WORKSPACE_BYTES, cudaStreamPerThread));
}

/* The fastest of n candidates for e on the call's own operands (D is written; the call itself runs after): one
 * untimed run each, then two timed back to back. */
static int blas_fastest(const blas_shape *e, const cublasLtMatmulHeuristicResult_t *res, int n, const void *A,
                        const void *B, void *D) {
    cudaEvent_t ev[2];
    for (int i = 0; i < 2; i++) QRT_CUDA_CHECK(cudaEventCreate(&ev[i]));
    int pick = 0;
    float best = 0.0f;
    for (int c = 0; c < n; c++) {
        for (int r = 0; r < 3; r++) {
            if (r == 1) QRT_CUDA_CHECK(cudaEventRecord(ev[0], cudaStreamPerThread));
            blas_run(e, &res[c].algo, A, B, D);
        }
        QRT_CUDA_CHECK(cudaEventRecord(ev[1], cudaStreamPerThread));
        QRT_CUDA_CHECK(cudaEventSynchronize(ev[1]));
        float ms;
        QRT_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
        if (c == 0 || ms < best) best = ms, pick = c;
    }
    for (int i = 0; i < 2; i++) QRT_CUDA_CHECK(cudaEventDestroy(ev[i]));
    return pick;
}

/* The layouts and the heuristic's algorithm (blas_candidate) for one GEMM shape, made on its first call. */
static const blas_shape *blas_shape_for(int64_t rows, int64_t T, int64_t K, int64_t lda, int64_t ldb, int64_t ldd,
                                        const void *A, const void *B, void *D) {
    const int align_a = align_of(A), align_d = align_of(D);
    for (int i = 0; i < BLAS_CACHE; i++) {
        const blas_shape *e = &blas_shapes[i];
        if (e->used && e->rows == rows && e->T == T && e->K == K && e->lda == lda && e->ldb == ldb &&
            e->ldd == ldd && e->align_a == align_a && e->align_d == align_d)
            return e;
    }
    if (!blas_desc) {
        QRT_BLAS_CHECK(cublasLtMatmulDescCreate(&blas_desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
        QRT_BLAS_CHECK(cublasLtMatmulDescSetAttribute(blas_desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT));
        QRT_BLAS_CHECK(cublasLtMatmulDescSetAttribute(blas_desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN));
    }
    blas_shape *e = &blas_shapes[blas_next];
    blas_next = (blas_next + 1) % BLAS_CACHE;
    shape_free(e);
    memset(e, 0, sizeof *e);
    e->rows = rows, e->T = T, e->K = K, e->lda = lda, e->ldb = ldb, e->ldd = ldd;
    e->align_a = align_a, e->align_d = align_d;
    /* column-major: A is K x rows (the weight's rows, op T), B is K x T (x's rows), D is rows x T (y's rows) */
    QRT_BLAS_CHECK(cublasLtMatrixLayoutCreate(&e->a, CUDA_R_16BF, (uint64_t)K, (uint64_t)rows, lda));
    QRT_BLAS_CHECK(cublasLtMatrixLayoutCreate(&e->b, CUDA_R_16BF, (uint64_t)K, (uint64_t)T, ldb));
    QRT_BLAS_CHECK(cublasLtMatrixLayoutCreate(&e->d, CUDA_R_32F, (uint64_t)rows, (uint64_t)T, ldd));
    e->used = 1;
    cublasLtMatmulPreference_t pref;
    QRT_BLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws = BLAS_WORKSPACE_BYTES;
    const uint32_t al_a = (uint32_t)align_a, al_b = 256, al_d = (uint32_t)align_d;
    QRT_BLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    QRT_BLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                                        sizeof al_a));
    QRT_BLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                                        sizeof al_b));
    QRT_BLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d,
                                                        sizeof al_d));
    QRT_BLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d,
                                                        sizeof al_d));
    cublasLtMatmulHeuristicResult_t res[BLAS_CANDIDATES];
    int found = 0;
    const int c = blas_candidate(); /* the first candidate alone, unless QRT_BLAS_ALGO asks for more */
    QRT_BLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(blas_handle, blas_desc, e->a, e->b, e->d, e->d, pref,
                                                  c == 0 ? 1 : BLAS_CANDIDATES, res, &found));
    QRT_BLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (!found) {
        fprintf(stderr, "qwenrt: cuBLASLt has no BF16 GEMM for rows %lld, T %lld, K %lld (ld %lld/%lld/%lld); set "
                        "QRT_BLAS_MIN_T=100000 to run the hand kernels\n",
                (long long)rows, (long long)T, (long long)K, (long long)lda, (long long)ldb, (long long)ldd);
        abort();
    }
    e->algo = res[c == BLAS_TIMED ? blas_fastest(e, res, found, A, B, D) : QRT_MIN(c, found - 1)].algo;
    return e;
}

/* D [T][ldd] (rows columns of it) = A [rows][lda] (bf16) · B [T][ldb]ᵀ (bf16), K summed. */
static void gemm(const __nv_bfloat16 *A, int64_t lda, int64_t rows, const __nv_bfloat16 *B, int64_t ldb, int T,
                 int64_t K, float *D, int64_t ldd) {
    const blas_shape *e = blas_shape_for(rows, T, K, lda, ldb, ldd, A, B, D);
    blas_run(e, &e->algo, A, B, D);
}

/* ---- one weight --------------------------------------------------------------------------------------- */

/* A weight as this path reads it: a BF16 one in place, the others by rows into the scratch. */
typedef struct {
    const qrt_linear *w;
    fp4_rows fp4; /* NVFP4 only */
} blas_weight;

static void dequant_rows(const blas_weight *bw, int64_t r0, int64_t rows, int64_t Kb, __nv_bfloat16 *dst) {
    const qrt_linear *W = bw->w;
    uint4 *out = reinterpret_cast<uint4 *>(dst);
    const int64_t Kp = qrt_dense_row_elems(W->fmt, W->k), scols = (W->k + 127) / 128;
    switch (W->fmt) {
    case QRT_WF_NVFP4:
        QRT_LAUNCH(dequant_fp4, grid_for(rows * (Kb / 8)), 256, 0, bw->fp4, r0, rows, Kb, out);
        break;
    case QRT_WF_FP8B:
        QRT_LAUNCH(dequant_dense<QRT_WF_FP8B>, grid_for(rows * Kb / 8), 256, 0, (const uint8_t *)W->data,
                   (const float *)W->scales, scols, Kp, W->k, r0, rows, Kb, out);
        break;
    case QRT_WF_F16:
        QRT_LAUNCH(dequant_dense<QRT_WF_F16>, grid_for(rows * Kb / 8), 256, 0, (const uint8_t *)W->data,
                   (const float *)NULL, scols, Kp, W->k, r0, rows, Kb, out);
        break;
    default: QRT_ASSERT(!"matmul_blas: a format without a bf16 form");
    }
}

/* y [T][N] = xb · Wᵀ for one weight, xb [T][Kb] already in bf16. */
static void blas_one(const blas_weight *bw, const __nv_bfloat16 *xb, int T, float *y) {
    const qrt_linear *W = bw->w;
    const int64_t N = W->n, K = W->k, Kb = blas_ld(K);
    if (W->fmt == QRT_WF_BF16) {
        gemm((const __nv_bfloat16 *)W->data, Kb, N, xb, Kb, T, K, y, N);
        return;
    }
    /* rows per chunk: the scratch's worth, a multiple of 64 (so each chunk's y columns stay 256-byte aligned) */
    int64_t chunk = (int64_t)(BLAS_WSCRATCH_BYTES / sizeof(__nv_bfloat16)) / Kb / 64 * 64;
    chunk = chunk < 64 ? 64 : chunk;
    chunk = chunk > N ? N : chunk;
    __nv_bfloat16 *wb = grow(&wb_buf, &wb_cap, (size_t)chunk * (size_t)Kb);
    for (int64_t r0 = 0; r0 < N; r0 += chunk) {
        const int64_t rows = QRT_MIN(chunk, N - r0);
        dequant_rows(bw, r0, rows, Kb, wb);
        gemm(wb, Kb, rows, xb, Kb, T, K, y + r0, N);
    }
}

static const __nv_bfloat16 *x_bf16(const float *x, int T, int64_t K) {
    blas_init();
    const int64_t Kb = blas_ld(K);
    __nv_bfloat16 *xb = grow(&xb_buf, &xb_cap, (size_t)T * (size_t)Kb);
    const bool vec = K % 8 == 0 && (uintptr_t)x % 16 == 0;
    QRT_LAUNCH(vec ? x_to_bf16<true> : x_to_bf16<false>, grid_for((int64_t)T * Kb / 8), 256, 0, x, K, Kb, T,
               reinterpret_cast<uint4 *>(xb));
    return xb;
}

static blas_weight plain_weight(const qrt_linear *W) {
    blas_weight bw = {W, {(const uint4 *)W->data, qrt_nvfp4_row_elems(W->k) / FP4_SLICE, -1, W->scale2}};
    return bw;
}

extern "C" void qrt_cuda_matmul_blas(const qrt_linear *W, const float *x, int T, float *y) {
    QRT_ASSERT(W->fmt != QRT_WF_F32 && !(W->fmt == QRT_WF_NVFP4 && W->scales)); /* not a part of a pair */
    const blas_weight bw = plain_weight(W);
    blas_one(&bw, x_bf16(x, T, W->k), T, y);
}

/* Every part of a group (one K) from one bf16 copy of x: the parts of a gate|up pair read through their pair layout,
 * F32 parts through the hand kernel. */
extern "C" void qrt_cuda_matmul_group_blas(const qrt_linear_group *g, const float *x, int T, float *const *y) {
    const int64_t K = g->part[0]->k;
    const __nv_bfloat16 *xb = x_bf16(x, T, K);
    for (int i = 0; i < g->n; i++) {
        const qrt_linear *W = g->part[i];
        if (W->fmt == QRT_WF_F32) {
            qrt_cuda_matmul_dense(W, x, T, y[i]);
            continue;
        }
        blas_weight bw = plain_weight(W);
        if (g->paired) bw.fp4.blocks = (const uint4 *)g->fused, bw.fp4.pair_half = i;
        blas_one(&bw, xb, T, y[i]);
    }
}
