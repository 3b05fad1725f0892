/* NVFP4 (W4A16) matmul: the variants, and the dispatch that runs one of them (the autotuner picks which:
 * matmul_tune.cu). Every variant gives the same bits for a row, whatever T, the variant or the token's place in the
 * batch (matmul_fp4.cuh, "Order"), so the pick never changes a result.
 *   mma_w1         any T: one warp per 16-row tile, slices straight into registers       (matmul_fp4_w1k.cu)
 *   mma_k4         any T: a block of 4 warps per tile splits its slices (long K)         (matmul_fp4_w1k.cu)
 *   mma_k4_sx      mma_k4, on one token preparing x in the block                         (matmul_fp4_w1k.cu)
 *   mma_gemm       T >= 16: 8 tile warps share 16 tokens' x fragments in shared memory   (matmul_fp4_gemm.cu)
 *   mma_il12x2     any T: a block's 12 warps take its tiles' units slice by slice        (matmul_fp4_il.cu)
 *   mma_cl12x2     T = 1, sm_90: clusters of 2 blocks own whole tiles, split tiles summed in shared memory
 *                  of the cluster                                                         (matmul_fp4_cl.cu)
 *   mma_ck8x2e     T = 1, sm_90: mma_cl with K split between the cluster's 2 blocks, in five configurations
 *   mma_ck12x2     (warps x ring slots, e: early refill, h: hold the first unit and sum by st.async, t: the last
 *   mma_ck8x2eh    unit cut over 4 warps)                                                 (matmul_fp4_ck.cu)
 *   mma_ck12x2eh
 *   mma_ck12x2eht
 * Where a variant cannot run (the T it does not serve, a GPU below sm_90, a grid that does not fit) mma_w1 runs in its
 * place, and the autotuner does not time it there (qrt_nvfp4_variant_runs). Not a variant: the prefill kernel mma_pf
 * (matmul_fp4_prefill.cu), which sums in another order and runs only where matmul.cu sends prefill calls to it. */
#include <string.h>

#include "backend/cuda/matmul_fp4.cuh"

static_assert(FP4_CK12X2EHT - FP4_CK8X2E == FP4_CK_12X2EHT, "the mma_ck variants in the order of their configurations");
static const char *const fp4_variant_names[FP4_VARIANTS] = {
    "mma_w1",     "mma_k4",     "mma_k4_sx",   "mma_gemm",     "mma_il12x2",   "mma_cl12x2",
    "mma_ck8x2e", "mma_ck12x2", "mma_ck8x2eh", "mma_ck12x2eh", "mma_ck12x2eht"};

/* One warp per (token, slice), into the layout the B fragments are read in: xf [T/8][S][4 q][8 i][32 lanes] uint4,
 * lane 4g + c holding part g & 1 (hi, lo) of tokens 8·tg + g/2 (x, y) and 8·tg + 4 + g/2 (z, w): one 16-byte load
 * feeds both token tiles of an 8-token pass. */
__global__ void fp4_prep_x(const float *x /* [T][K] */, int64_t K, int T, int64_t S,
                           uint4 *xf /* [ceil(T/8)][S][4][8][32] */, float *xscale /* [T][S] */) {
    pdl_start();
    const int lane = threadIdx.x & 31;
    const int64_t wid = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (wid >= (int64_t)T * S) return;
    const int t = (int)(wid / S);
    const int64_t s = wid % S;
    const int c = lane & 3, i = lane >> 2;
    float v[4][4];
    fp4_prep_load(x + (size_t)t * K, K, s, lane, v);
    uint4 u[4];
    float down;
    fp4_prep_convert(v, u, down);
    const int tg = t / 8, j = t % 4, half = t / 4 % 2;
    uint2 *xf2 = reinterpret_cast<uint2 *>(xf);
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const int64_t entry = ((((int64_t)tg * S + s) * 4 + q) * 8 + i) * 32 + c;
        xf2[(entry + 4 * (2 * j)) * 2 + half] = make_uint2(u[q].x, u[q].y);     /* hi: B column 2j */
        xf2[(entry + 4 * (2 * j + 1)) * 2 + half] = make_uint2(u[q].z, u[q].w); /* lo: B column 2j + 1 */
    }
    if (lane == 0) xscale[(size_t)t * S + s] = down;
}


/* x fragments, grown on demand (a move reported to the graph epoch); every op runs on the calling thread's default
 * stream, so the buffer is never in use by two kernels at once. */
static uint4 *xf_buf = NULL;
static size_t xf_cap = 0; /* bytes, fragments then scales */

/* x [T][K] → xf_buf fragments and slice scales (fp4_prep_x); returns the scales. */
static float *fp4_prepare_x(const float *x, int64_t K, int T, int64_t S) {
    const int64_t TG = (T + 7) / 8;
    const size_t frag_bytes = (size_t)TG * S * 4 * 8 * 32 * sizeof(uint4), bytes = frag_bytes + sizeof(float) * T * S;
    if (bytes > xf_cap) {
        if (xf_buf) QRT_CUDA_CHECK(cudaFree(xf_buf));
        xf_cap = bytes < ((size_t)1 << 22) ? ((size_t)1 << 22) : bytes;
        QRT_CUDA_CHECK(cudaMalloc(&xf_buf, xf_cap));
        /* entries of tokens past T are read (into D columns never stored): keep them finite and initialized */
        QRT_CUDA_CHECK(cudaMemset(xf_buf, 0, xf_cap));
        qrt_cuda_scratch_moved();
    }
    float *xscale = reinterpret_cast<float *>(reinterpret_cast<char *>(xf_buf) + frag_bytes);
    QRT_LAUNCH(fp4_prep_x, qrt_grid((size_t)T * S * 32, 256), 256, 0, x, K, T, S, xf_buf, xscale);
    return xscale;
}


/* Variant v over the segments. On one token every variant but mma_k4 runs one launch that prepares its own x (SX: the
 * x-preparation launch would cost more than the kernel's own copy); otherwise fp4_prep_x prepares x, then the launch
 * (preparing all of x in each of mma_k4's few blocks was slower on down_proj). Both read the same fragment values, so
 * the bits are the same. */
void fp4_launch_variant(int v, const uint8_t *blocks, const fp4_segments &seg, int64_t K, const float *x, int T) {
    fp4_launch a = {blocks, &seg, {NULL, NULL}, x, K, qrt_nvfp4_row_elems(K) / FP4_SLICE, T};
    if (!(T == 1 && v != FP4_K4)) {
        const float *xscale = fp4_prepare_x(x, K, T, a.S); /* may grow xf_buf: read it after */
        a.xs = fp4_xsrc{xf_buf, xscale};
    }
    bool ran = true;
    switch (v) {
    case FP4_W1: ran = false; break; /* below */
    case FP4_K4:
    case FP4_K4_SX: fp4_run_k4(a); break;
    case FP4_GEMM: ran = fp4_run_gemm(a); break;
    case FP4_IL12X2: ran = fp4_run_il(a); break;
    case FP4_CL12X2: ran = fp4_run_cl(a); break;
    default: ran = fp4_run_ck(a, v - FP4_CK8X2E); break;
    }
    if (!ran) fp4_run_w1(a);
}

/* Whether variant v runs its own kernel at T tokens on an N x K weight (not mma_w1 in its place; a K too long for one
 * block of mma_il or mma_cl is not caught here: it too runs mma_w1). mma_ck: its cluster's sums must fit beside the
 * ring when every SM holds one block (lm_head's do not). */
static bool fp4_variant_own(int v, int T, int64_t N, int64_t K) {
    if (v == FP4_GEMM) return T >= 16;
    if (v < FP4_CL12X2) return true;
    if (T != 1 || compute_major() < 9) return false; /* the clustered variants */
    return v == FP4_CL12X2 || fp4_ck_fits(v - FP4_CK8X2E, N, K);
}

extern "C" int qrt_nvfp4_variant_count(void) { return FP4_VARIANTS; }
extern "C" int qrt_nvfp4_variant_runs(int v, int T, int64_t n, int64_t k) {
    return v >= 0 && v < FP4_VARIANTS && fp4_variant_own(v, T, n, k);
}
extern "C" const char *qrt_nvfp4_variant_name(int v) { return v >= 0 && v < FP4_VARIANTS ? fp4_variant_names[v] : "?"; }
extern "C" int qrt_nvfp4_variant_order(int v) { return v >= 0 && v < FP4_VARIANTS ? 0 : -1; }

extern "C" void qrt_nvfp4_matmul_variant(int v, const qrt_linear *W, const float *x, int T, float *y) {
    QRT_ASSERT(W->fmt == QRT_WF_NVFP4 && v >= 0 && v < FP4_VARIANTS && T >= 1);
    fp4_launch_variant(v, (const uint8_t *)W->data, fp4_one_segment(W, y), W->k, x, T);
}
