/* Every CUDA op and every matmul variant against the CPU backend (NVFP4: against a float64 reference of
 * the dequantized weight, which the CPU backend cannot run yet), on random inputs (never zeros), at the
 * Qwen3.6-27B shapes and at odd ones. Each device output is poisoned with NaN before the op and followed by
 * a guard band of sentinels; the check fails on an unwritten element, a NaN/Inf, a touched guard, or an
 * error ‖gpu − ref‖ / ‖ref‖ above the tolerance named at the call (f32 vs f32 in another summation order:
 * ~1e-6 expected; the GDN chunked form vs the recurrence and long reductions: ~1e-5).
 * Batch invariance: the matmul row of a token must be bit-identical at any T, at any place in the batch, and for
 * every NVFP4 variant of one reduction order (all of today's variants share one, and the autotuner picks among
 * them) and every BF16 / FP8 tensor-core variant; not on the prefill path through cuBLASLt (matmul_blas.cu), which is
 * checked against the CPU with BLAS_TOL, and for its groups, bit for bit against itself on each part alone; nor on
 * the NVFP4 prefill kernel mma_pf (matmul_fp4_prefill.cu), checked against the CPU in each of its forms at PF_TOL, a
 * token's row against that token in another place of the batch, and its groups like the cuBLASLt path's.
 * Exit 77 (CTest SKIP) when there is no GPU. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "io/dtype.h"
#include "test_util.h"
#include "util/mix64.h"

#define GUARD 64
/* The cuBLASLt path rounds x to bf16 (and F16, FP8 · scale, NVFP4 · scale2 weights to bf16): each product carries a
 * relative error of at most 2^-9 per rounded operand, independent from term to term, so ‖gpu − ref‖ / ‖ref‖ comes out
 * near 2^-9 / √3 per rounded operand (~1.1e-3 for BF16 weights, ~1.6e-3 for rounded ones; summed in f32, the order
 * adds ~1e-6). 2^-8, the bf16 unit roundoff, bounds that with margin and still fails on any wrong element, scale or
 * row (errors of order 1). A swiglu of two such results: twice that. */
#define BLAS_TOL 3.9e-3
/* mma_pf (matmul_fp4_prefill.cu), by form. 1: x as f16 hi + lo of the token scaled by a power of two, each element
 * within 2^-22 of the token's largest |x| (the weights exact), so the error is the f32 summation's, as the hand
 * kernels' (~1e-6): 1e-5 as for f32 against f32 in another order. 2: x as f16 alone, a relative error of at most 2^-11
 * per element (rms ~2^-11 / √3 ≈ 2.8e-4 for random signs): 1e-3, ~3.5x that and 3.9x tighter than BLAS_TOL, still
 * failing on any wrong element, scale or row. */
static double pf_tol(int form) { return form == 1 ? 1e-5 : 1e-3; } /* form 3: form 2's arithmetic */
#define PF_FORMS 3
static const uint32_t SENTINEL = 0x7f7fbeefu; /* a finite float no op writes by chance */
static const uint32_t POISON = 0x7fc0dead;    /* a NaN */

static const qrt_backend *cpu, *gpu;

static float urand(uint64_t seed, size_t i, float lo, float hi) {
    return lo + (hi - lo) * (float)(qrt_mix64(seed * QRT_MIX64_STEP + i) >> 40) * (1.0f / 16777216.0f);
}
/* n random floats in [lo, hi), host memory */
static float *host_rand(size_t n, uint64_t seed, float lo, float hi) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) p[i] = urand(seed, i, lo, hi);
    return p;
}

/* A device copy of n host floats, guard band after it. */
static float *dev_in(const float *h, size_t n) {
    float *d = gpu->alloc(sizeof(float) * (n + GUARD));
    gpu->upload(d, h, sizeof(float) * n);
    uint32_t g[GUARD];
    for (int i = 0; i < GUARD; i++) g[i] = SENTINEL;
    gpu->upload(d + n, g, sizeof g);
    return d;
}
/* A device output of n floats: poisoned, guard band after it. */
static float *dev_out(size_t n) {
    uint32_t *h = malloc(sizeof(uint32_t) * (n + GUARD));
    for (size_t i = 0; i < n; i++) h[i] = POISON;
    for (int i = 0; i < GUARD; i++) h[n + i] = SENTINEL;
    float *d = gpu->alloc(sizeof(float) * (n + GUARD));
    gpu->upload(d, h, sizeof(uint32_t) * (n + GUARD));
    free(h);
    return d;
}
static float *download(const float *d, size_t n) {
    float *h = malloc(sizeof(float) * (n + GUARD));
    gpu->download(h, d, sizeof(float) * (n + GUARD));
    return h;
}

/* Compare device result d [n] with reference ref [n]; returns the downloaded copy (caller frees). */
static float *check_dev(const char *what, const float *d, const double *refd, const float *reff, size_t n,
                        double tol) {
    float *h = download(d, n);
    size_t bad = n, guard_bad = GUARD;
    double num = 0, den = 0, maxabs = 0;
    for (size_t i = 0; i < n; i++) {
        double r = refd ? refd[i] : reff[i];
        if (!isfinite(h[i]) && bad == n) bad = i;
        double e = (double)h[i] - r;
        num += e * e;
        den += r * r;
        if (fabs(e) > maxabs) maxabs = fabs(e);
    }
    for (int i = 0; i < GUARD; i++) {
        uint32_t u;
        memcpy(&u, &h[n + i], 4);
        if (u != SENTINEL && guard_bad == GUARD) guard_bad = (size_t)i;
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    const int ok = bad == n && guard_bad == GUARD && rel <= tol;
    CHECK(ok, "%s: rel %.3g (tol %.1g) max|e| %.3g, first non-finite at %lld, guard overwritten at +%lld (-1: none)",
          what, rel, tol, maxabs, bad == n ? -1LL : (long long)bad, guard_bad == GUARD ? -1LL : (long long)guard_bad);
    if (ok) printf("ok   %-58s rel %.3g\n", what, rel);
    return h;
}
static void check(const char *what, const float *d, const float *ref, size_t n, double tol) {
    free(check_dev(what, d, NULL, ref, n, tol));
}
static void expect_same_bits(const char *what, const float *a, const float *b, size_t n) {
    size_t i = 0;
    while (i < n && !memcmp(&a[i], &b[i], 4)) i++;
    CHECK(i == n, "%s differs at %zu: %.9g vs %.9g", what, i, a[i], b[i]);
    if (i == n) printf("ok   %-58s bit-identical\n", what);
}

/* ---- dense matmul ---------------------------------------------------------------------------------- */

/* Tb > 0: also the cuBLASLt path called directly at T = Tb (BF16, F16, FP8), whatever the size. */
static void test_dense(qrt_wformat fmt, int64_t N, int64_t K, const int *Ts, int nT, int Tb, uint64_t seed) {
    size_t esize = fmt == QRT_WF_F32 ? 4 : fmt == QRT_WF_FP8B ? 1 : 2;
    uint8_t *wh = malloc((size_t)N * K * esize);
    /* FP8: random e4m3 codes (never NaN: 0x7f / 0xff), one scale per 128×128 block in [2^-8, 2^-6) */
    const size_t nscales = (size_t)QRT_CEIL_DIV(N, 128) * (size_t)QRT_CEIL_DIV(K, 128);
    float *sh = fmt == QRT_WF_FP8B ? host_rand(nscales, seed + 7, 1.0f / 256, 1.0f / 64) : NULL;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N * K; i++) {
        float v = urand(seed, (size_t)i, -1.0f, 1.0f);
        if (fmt == QRT_WF_FP8B) {
            uint8_t b = (uint8_t)(qrt_mix64(seed * 31 + (uint64_t)i) >> 24);
            wh[i] = (b & 0x7f) == 0x7f ? (uint8_t)(b ^ 1) : b;
        } else if (fmt == QRT_WF_F32) memcpy(wh + 4 * i, &v, 4);
        else if (fmt == QRT_WF_BF16) {
            uint16_t b = qrt_f32_to_bf16(v);
            memcpy(wh + 2 * i, &b, 2);
        } else {
            /* f16 of a value exactly representable in both: round through bf16 (8 bits of mantissa) */
            uint16_t b = qrt_f32_to_bf16(v);
            float f = qrt_bf16_to_f32(b);
            uint32_t u;
            memcpy(&u, &f, 4);
            int e = (int)((u >> 23) & 0xff) - 127;
            uint16_t h = 0;
            if (e >= -14) h = (uint16_t)(((u >> 16) & 0x8000) | ((e + 15) << 10) | ((u >> 13) & 0x3ff));
            memcpy(wh + 2 * i, &h, 2);
        }
    }
    qrt_linear wc = {.fmt = fmt, .n = N, .k = K, .data = wh, .scales = sh, .name = "test"};
    qrt_linear wg = wc;
    if (gpu->prepare_linear(&wg) != QRT_OK) {
        CHECK(0, "prepare_linear: %s", qrt_last_error());
        free(wh), free(sh);
        return;
    }
    int Tmax = Tb;
    for (int i = 0; i < nT; i++) Tmax = QRT_MAX(Tmax, Ts[i]);
    float *x = host_rand((size_t)Tmax * K, seed + 1, -1.0f, 1.0f);
    float *xd = dev_in(x, (size_t)Tmax * K);
    float *ref = malloc(sizeof(float) * (size_t)Tmax * N);
    cpu->matmul(&wc, x, Tmax, ref);
    /* row t alone (T = 1): the batch-invariance baseline */
    float *y1d = dev_out((size_t)N);
    gpu->matmul(&wg, xd + (size_t)(Tmax - 1) * K, 1, y1d);
    float *y1 = download(y1d, N);
    gpu->matmul(&wg, xd, 1, y1d);
    float *y0 = download(y1d, N);
    for (int i = 0; i < nT; i++) {
        int T = Ts[i];
        float *yd = dev_out((size_t)T * N);
        gpu->matmul(&wg, xd, T, yd);
        char what[128];
        snprintf(what, sizeof what, "matmul %s N=%lld K=%lld T=%d", qrt_wformat_name(fmt), (long long)N, (long long)K, T);
        const int blas = qrt_cuda_blas_takes(fmt, N * K, T);
        float *y = check_dev(what, yd, NULL, ref, (size_t)T * N, blas ? BLAS_TOL : 1e-5);
        if (blas) { /* the prefill path: no batch invariance */
            free(y);
            gpu->free(yd);
            continue;
        }
        if (fmt == QRT_WF_BF16 || fmt == QRT_WF_FP8B) /* every tensor-core variant: the pick's bits, guard included */
            for (int v = 0; v < qrt_dense_mma_variant_count(); v++) {
                float *vd = dev_out((size_t)T * N);
                qrt_dense_mma_variant(v, &wg, xd, T, vd);
                float *yv = download(vd, (size_t)T * N);
                snprintf(what, sizeof what, "  variant %s T=%d vs the pick", qrt_dense_mma_variant_name(v), T);
                expect_same_bits(what, yv, y, (size_t)T * N + GUARD);
                free(yv), gpu->free(vd);
            }
        snprintf(what, sizeof what, "  batch invariance T=%d row 0 vs T=1", T);
        expect_same_bits(what, y, y0, N);
        if (T == Tmax) {
            snprintf(what, sizeof what, "  batch invariance T=%d row %d vs T=1", T, T - 1);
            expect_same_bits(what, y + (size_t)(T - 1) * N, y1, N);
        }
        free(y);
        gpu->free(yd);
    }
    if (Tb && fmt != QRT_WF_F32) {
        float *yd = dev_out((size_t)Tb * N);
        qrt_cuda_matmul_blas(&wg, xd, Tb, yd);
        char what[128];
        snprintf(what, sizeof what, "matmul_blas %s N=%lld K=%lld T=%d", qrt_wformat_name(fmt), (long long)N,
                 (long long)K, Tb);
        free(check_dev(what, yd, NULL, ref, (size_t)Tb * N, BLAS_TOL));
        gpu->free(yd);
    }
    free(y0), free(y1), gpu->free(y1d), gpu->free(xd), free(x), free(ref), free(wh), free(sh);
    gpu->free((void *)wg.data), gpu->free((void *)wg.scales);
}

/* ---- NVFP4 ----------------------------------------------------------------------------------------- */

static const float e2m1_values[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};

/* Tb > 0: also the cuBLASLt path called directly at T = Tb. */
static void test_nvfp4(int64_t N, int64_t K, const int *Ts, int nT, int Tb, uint64_t seed) {
    uint8_t *codes = malloc((size_t)N * K / 2), *scales = malloc((size_t)N * K / 16);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N * K / 2; i++) codes[i] = (uint8_t)qrt_mix64(seed * 7 + (uint64_t)i);
    /* e4m3 scales in [2^-3, 2^3], either sign never negative (real checkpoints), no NaN */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N * K / 16; i++) {
        uint64_t r = qrt_mix64(seed * 13 + (uint64_t)i);
        scales[i] = (uint8_t)(((4 + r % 7) << 3) | ((r >> 8) & 7));
    }
    const float scale2 = 0.0123f;
    qrt_linear wg = {.fmt = QRT_WF_NVFP4, .n = N, .k = K, .data = codes, .scales = scales, .scale2 = scale2,
                     .name = "nvfp4 test"};
    if (gpu->prepare_linear(&wg) != QRT_OK) {
        CHECK(0, "prepare_linear nvfp4: %s", qrt_last_error());
        return;
    }
    int Tmax = Tb;
    for (int i = 0; i < nT; i++) Tmax = QRT_MAX(Tmax, Ts[i]);
    float *x = host_rand((size_t)Tmax * K, seed + 1, -1.0f, 1.0f);
    float *xd = dev_in(x, (size_t)Tmax * K);
    double *ref = malloc(sizeof(double) * (size_t)Tmax * N);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
        for (int t = 0; t < Tmax; t++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++) {
                uint8_t b = codes[r * K / 2 + k / 2];
                float w = e2m1_values[k & 1 ? b >> 4 : b & 15] * qrt_e4m3_lut[scales[r * K / 16 + k / 16]] * scale2;
                acc += (double)w * x[(size_t)t * K + k];
            }
            ref[(size_t)t * N + r] = acc;
        }
    }
    /* per reduction order: the first variant of the order at T = 1, token 0; every other result's row 0 of
     * that order must equal it (today every variant keeps order 0, so all of them must give the same bits) */
    float *base[2] = {NULL, NULL};
    for (int v = 0; v < qrt_nvfp4_variant_count(); v++) {
        const int order = qrt_nvfp4_variant_order(v);
        for (int i = 0; i < nT; i++) {
            int T = Ts[i];
            float *yd = dev_out((size_t)T * N);
            qrt_nvfp4_matmul_variant(v, &wg, xd, T, yd);
            char what[128];
            snprintf(what, sizeof what, "nvfp4 %-10s N=%lld K=%lld T=%d", qrt_nvfp4_variant_name(v), (long long)N,
                     (long long)K, T);
            float *y = check_dev(what, yd, ref, NULL, (size_t)T * N, 2e-6);
            if (!base[order]) {
                base[order] = malloc(sizeof(float) * N);
                memcpy(base[order], y, sizeof(float) * N);
            } else {
                snprintf(what, sizeof what, "  same bits as order %d's first variant at T=1 (row 0)", order);
                expect_same_bits(what, y, base[order], N);
            }
            if (T > 1) { /* the last token (another place in the mma's n8 tile) equals that token alone */
                float *y1d = dev_out(N);
                qrt_nvfp4_matmul_variant(v, &wg, xd + (size_t)(T - 1) * K, 1, y1d);
                float *y1 = download(y1d, N);
                snprintf(what, sizeof what, "  token %d of T=%d same bits as alone", T - 1, T);
                expect_same_bits(what, y + (size_t)(T - 1) * N, y1, N);
                free(y1);
                gpu->free(y1d);
            }
            free(y);
            gpu->free(yd);
        }
    }
    /* the op itself: autotuned pick */
    int T = Ts[nT - 1];
    float *yd = dev_out((size_t)T * N);
    int pick = qrt_nvfp4_pick(&wg, T);
    gpu->matmul(&wg, xd, T, yd);
    char what[128];
    snprintf(what, sizeof what, "nvfp4 op (autotune picked %s) T=%d", qrt_nvfp4_variant_name(pick), T);
    free(check_dev(what, yd, ref, NULL, (size_t)T * N, qrt_cuda_blas_takes(QRT_WF_NVFP4, N * K, T) ? BLAS_TOL : 2e-6));
    gpu->free(yd);
    if (Tb) {
        yd = dev_out((size_t)Tb * N);
        qrt_cuda_matmul_blas(&wg, xd, Tb, yd);
        snprintf(what, sizeof what, "matmul_blas nvfp4 N=%lld K=%lld T=%d", (long long)N, (long long)K, Tb);
        free(check_dev(what, yd, ref, NULL, (size_t)Tb * N, BLAS_TOL));
        gpu->free(yd);
    }
    free(base[0]), free(base[1]), free(ref), gpu->free(xd), free(x), free(codes), free(scales);
    gpu->free((void *)wg.data), gpu->free((void *)wg.scales);
}

/* ---- fused projection groups (matmul_group) --------------------------------------------------------- */

/* Part i of a test group: random NVFP4 codes and e4m3 scales in [2^-3, 2^3] (data and scales malloc'ed, the caller
 * frees them), and a different scale2 per part: a fused launch must keep each part's own. */
static qrt_linear nvfp4_test_part(int64_t N, int64_t K, uint64_t seed, int i, const char *name) {
    const size_t elems = (size_t)N * (size_t)K;
    uint8_t *codes = malloc(elems / 2), *scales = malloc(elems / 16);
    for (size_t j = 0; j < elems / 2; j++) codes[j] = (uint8_t)qrt_mix64(seed * 7 + (uint64_t)i * 1000003u + j);
    for (size_t j = 0; j < elems / 16; j++) {
        const uint64_t r = qrt_mix64(seed * 13 + (uint64_t)i * 1000003u + j);
        scales[j] = (uint8_t)(((4 + r % 7) << 3) | ((r >> 8) & 7));
    }
    return (qrt_linear){.fmt = QRT_WF_NVFP4, .n = N, .k = K, .data = codes, .scales = scales,
                        .scale2 = 0.0123f * (float)(i + 1), .name = name};
}

/* Two device copies of host part h (one run alone, one grouped), or a failure counted: 0. */
static int prepare_copies(const qrt_linear *h, qrt_linear *alone, qrt_linear *grouped, const char *what) {
    *alone = *grouped = *h;
    if (gpu->prepare_linear(alone) == QRT_OK && gpu->prepare_linear(grouped) == QRT_OK) return 1;
    CHECK(0, "prepare_linear %s: %s", what, qrt_last_error());
    return 0;
}
/* The same group prepared on the CPU (hg, host parts) and the GPU (g), or a failure counted: 0. */
static int prepare_groups(qrt_linear_group *hg, qrt_linear_group *g, const char *what) {
    if (cpu->prepare_group(hg) == QRT_OK && gpu->prepare_group(g) == QRT_OK) return 1;
    CHECK(0, "prepare_group (%s): %s", what, qrt_last_error());
    return 0;
}

/* mma_pf's ops in form pf_form with the signatures of the backend's, so the group tests can take them. */
static int pf_form;
static void pf_matmul(const qrt_linear *W, const float *x, int T, float *y) {
    if (W->fmt == QRT_WF_NVFP4) qrt_cuda_matmul_fp4_prefill(W, x, T, y, pf_form);
    else gpu->matmul(W, x, T, y);
}
static void pf_group(const qrt_linear_group *g, const float *x, int T, float *const *y) {
    qrt_cuda_matmul_group_fp4_prefill(g, x, T, y, pf_form);
}
static void pf_swiglu(const qrt_linear_group *g, const float *x, int T, float *y, float *up) {
    qrt_cuda_matmul_swiglu_fp4_prefill(g, x, T, y, up, pf_form);
}
static const char *mode_name(int blas, int pf) {
    return blas ? " blas" : pf == 1 ? " pf1" : pf == 2 ? " pf2" : pf == 3 ? " pf3" : "";
}

/* Part i of a dense test group in format fmt (BF16, or FP8 block-128 with random codes and block scales), data and
 * scales malloc'ed (the caller frees them). */
static qrt_linear dense_test_part(qrt_wformat fmt, int64_t N, int64_t K, uint64_t seed, int i, const char *name) {
    const size_t elems = (size_t)N * (size_t)K;
    qrt_linear w = {.fmt = fmt, .n = N, .k = K, .name = name};
    if (fmt == QRT_WF_BF16) {
        uint16_t *v = malloc(sizeof(uint16_t) * elems);
        for (size_t j = 0; j < elems; j++) v[j] = qrt_f32_to_bf16(urand(seed * 31 + (uint64_t)i, j, -0.1f, 0.1f));
        w.data = v;
        return w;
    }
    uint8_t *codes = malloc(elems);
    for (size_t j = 0; j < elems; j++) { /* e4m3 codes, never NaN (0x7f / 0xff) */
        const uint8_t b = (uint8_t)(qrt_mix64(seed * 31 + (uint64_t)i * 1000003u + j) >> 24);
        codes[j] = (b & 0x7f) == 0x7f ? (uint8_t)(b ^ 1) : b;
    }
    w.data = codes;
    w.scales = host_rand((size_t)QRT_CEIL_DIV(N, 128) * (size_t)QRT_CEIL_DIV(K, 128), seed + 7 + (uint64_t)i,
                         1.0f / 256, 1.0f / 64);
    return w;
}

/* Parts of N[i] rows over the same K, NVFP4 unless dense_mask has bit i, then in format dense (BF16 or FP8 block-128;
 * a mixed group: the NVFP4 parts fuse, the others run alone; all dense: one tensor-core launch). The group's outputs
 * must be bit-identical to matmul on each part prepared alone (and to matmul on the grouped parts, which now read the
 * fused allocation), and agree with the CPU's matmul_group. Tb > 0: once more at T = Tb with the cuBLASLt path's
 * group and matmul called directly. pf > 0: at every T through mma_pf's group and matmul in form pf instead (PF_TOL;
 * the bits of a part alone too, since the pf cases' K of at most 2048 allows at most 2 splits, and the group's grid
 * and each part's are both below the GPU's size, so they split alike). */
static void test_group(const int64_t *N, int n, int64_t K, unsigned dense_mask, qrt_wformat dense, const int *Ts,
                       int nT, int Tb, int pf, uint64_t seed) {
    pf_form = pf;
    qrt_linear host[QRT_GROUP_MAX], alone[QRT_GROUP_MAX], grouped[QRT_GROUP_MAX];
    void *mem[QRT_GROUP_MAX][2];
    char shape[96];
    int at = snprintf(shape, sizeof shape, "K=%lld N=", (long long)K);
    for (int i = 0; i < n; i++) {
        const int is_dense = (dense_mask >> i) & 1;
        at += snprintf(shape + at, sizeof shape - (size_t)at, "%s%lld%s%s%s", i ? "," : "", (long long)N[i],
                       is_dense ? "(" : "", is_dense ? qrt_wformat_name(dense) : "", is_dense ? ")" : "");
        host[i] = is_dense ? dense_test_part(dense, N[i], K, seed, i, "group dense part")
                           : nvfp4_test_part(N[i], K, seed, i, "group nvfp4 part");
        mem[i][0] = (void *)host[i].data, mem[i][1] = (void *)host[i].scales;
        if (!prepare_copies(&host[i], &alone[i], &grouped[i], "group part")) return;
    }
    qrt_linear_group hg = {n, {NULL}, NULL, 0, 0}, g = {n, {NULL}, NULL, 0, 0};
    for (int i = 0; i < n; i++) hg.part[i] = &host[i], g.part[i] = &grouped[i];
    if (!prepare_groups(&hg, &g, "group")) return;
    const int fused_expected = n - __builtin_popcount(dense_mask) >= 2;
    CHECK(!!g.fused == fused_expected, "group %s: fused is %s, expected %s", shape, g.fused ? "set" : "NULL",
          fused_expected ? "set" : "NULL");
    int64_t elems = 0;
    for (int i = 0; i < n; i++) elems += N[i] * K;
    for (int ti = 0; ti < nT + (Tb > 0); ti++) {
        const int blas = ti == nT, T = blas ? Tb : Ts[ti];
        void (*const group_op)(const qrt_linear_group *, const float *, int, float *const *) =
            blas ? qrt_cuda_matmul_group_blas : pf ? pf_group : gpu->matmul_group;
        void (*const matmul_op)(const qrt_linear *, const float *, int, float *) =
            blas ? qrt_cuda_matmul_blas : pf ? pf_matmul : gpu->matmul;
        const double tol = pf                                            ? pf_tol(pf)
                           : blas || qrt_cuda_blas_takes(host[0].fmt, elems, T) ? BLAS_TOL
                           : dense_mask && dense == QRT_WF_FP8B                 ? 1e-5
                                                                                : 5e-6;
        float *x = host_rand((size_t)T * K, seed + 100 + (uint64_t)T, -1.0f, 1.0f);
        float *xd = dev_in(x, (size_t)T * K);
        float *y_group[QRT_GROUP_MAX], *y_cpu[QRT_GROUP_MAX];
        for (int i = 0; i < n; i++) {
            y_group[i] = dev_out((size_t)T * N[i]);
            y_cpu[i] = malloc(sizeof(float) * (size_t)T * N[i]);
        }
        group_op(&g, xd, T, y_group);
        cpu->matmul_group(&hg, x, T, y_cpu);
        for (int i = 0; i < n; i++) {
            const size_t len = (size_t)T * N[i];
            char what[160];
            snprintf(what, sizeof what, "group%s %s T=%d part %d vs cpu", mode_name(blas, pf), shape, T, i);
            float *yg = check_dev(what, y_group[i], NULL, y_cpu[i], len, tol);
            float *yd = dev_out(len);
            matmul_op(&alone[i], xd, T, yd);
            float *ya = download(yd, len);
            snprintf(what, sizeof what, "  part %d same bits as matmul on it alone", i);
            expect_same_bits(what, yg, ya, len);
            matmul_op(&grouped[i], xd, T, yd);
            free(ya);
            ya = download(yd, len);
            snprintf(what, sizeof what, "  part %d same bits as matmul on the grouped part", i);
            expect_same_bits(what, yg, ya, len);
            free(ya), free(yg), gpu->free(yd), gpu->free(y_group[i]), free(y_cpu[i]);
        }
        gpu->free(xd), free(x);
    }
    for (int i = 0; i < n; i++) {
        gpu->free((void *)alone[i].data), gpu->free((void *)alone[i].scales);
        if (!g.fused || grouped[i].fmt != QRT_WF_NVFP4) gpu->free((void *)grouped[i].data), gpu->free((void *)grouped[i].scales);
        free(mem[i][0]), free(mem[i][1]);
    }
    gpu->free(g.fused);
}

/* ---- a paired gate|up group (matmul_swiglu) --------------------------------------------------------- */

/* NVFP4 gate and up of N rows over K, laid out in pairs by prepare_group (swiglu set): matmul_group must give each
 * part's bits of matmul on it alone, matmul_swiglu (and every variant of it) the bits of swiglu on those, and both
 * agree with the CPU. Tb > 0: once more at T = Tb with the cuBLASLt path's group and matmul called directly (its
 * reading of the pair layout: each part the bits of the part alone), matmul_swiglu where the path takes it; the CPU
 * comparison only where it is cheap (2·N·K·Tb ≤ 4e9). pf > 0: at every T through mma_pf's group, matmul and
 * matmul_swiglu in form pf instead (PF_TOL). */
static void test_pair(int64_t N, int64_t K, const int *Ts, int nT, int Tb, int pf, uint64_t seed) {
    pf_form = pf;
    qrt_linear host[2], alone[2], paired[2];
    for (int i = 0; i < 2; i++) {
        host[i] = nvfp4_test_part(N, K, seed, i, i ? "pair up" : "pair gate");
        if (!prepare_copies(&host[i], &alone[i], &paired[i], "pair part")) return;
    }
    qrt_linear_group hg = {2, {&host[0], &host[1]}, NULL, 1, 0}, g = {2, {&paired[0], &paired[1]}, NULL, 1, 0};
    if (!prepare_groups(&hg, &g, "pair")) return;
    CHECK(g.paired, "pair N=%lld K=%lld: prepare_group did not pair gate|up", (long long)N, (long long)K);
    for (int ti = 0; ti < nT + (Tb > 0) && g.paired; ti++) {
        const int blas = ti == nT, T = blas ? Tb : Ts[ti];
        void (*const group_op)(const qrt_linear_group *, const float *, int, float *const *) =
            blas ? qrt_cuda_matmul_group_blas : pf ? pf_group : gpu->matmul_group;
        void (*const matmul_op)(const qrt_linear *, const float *, int, float *) =
            blas ? qrt_cuda_matmul_blas : pf ? pf_matmul : gpu->matmul;
        const int swiglu_op = !blas || qrt_cuda_blas_takes(QRT_WF_NVFP4, 2 * N * K, T);
        const int on_cpu = !blas || 2.0 * (double)N * (double)K * T <= 4e9;
        const size_t len = (size_t)T * N;
        float *x = host_rand((size_t)T * K, seed + 200 + (uint64_t)T, -1.0f, 1.0f);
        float *xd = dev_in(x, (size_t)T * K);
        float *ya[2], *yp[2], *yad[2], *ypd[2];
        for (int i = 0; i < 2; i++) {
            yad[i] = dev_out(len), ypd[i] = dev_out(len);
            matmul_op(&alone[i], xd, T, yad[i]);
        }
        group_op(&g, xd, T, ypd);
        char what[160];
        for (int i = 0; i < 2; i++) {
            ya[i] = download(yad[i], len), yp[i] = download(ypd[i], len);
            snprintf(what, sizeof what, "pair%s N=%lld K=%lld T=%d part %d same bits as matmul on it alone",
                     mode_name(blas, pf), (long long)N, (long long)K, T, i);
            expect_same_bits(what, yp[i], ya[i], len);
        }
        /* reference: swiglu of the parts run alone (on the GPU for the bits, on the CPU for the values) */
        float *refd = dev_out(len), *cpu_y[2] = {malloc(sizeof(float) * len), malloc(sizeof(float) * len)};
        gpu->swiglu(yad[0], yad[1], len, refd);
        float *ref = download(refd, len);
        if (on_cpu) {
            cpu->matmul_group(&hg, x, T, cpu_y);
            cpu->swiglu(cpu_y[0], cpu_y[1], len, cpu_y[0]);
            snprintf(what, sizeof what, "pair%s N=%lld K=%lld T=%d swiglu of the parts vs cpu", mode_name(blas, pf),
                     (long long)N, (long long)K, T);
            free(check_dev(what, refd, NULL, cpu_y[0], len, blas ? 2 * BLAS_TOL : pf ? 2 * pf_tol(pf) : 5e-6));
        }
        float *sd = dev_out(len), *scratch = dev_out(len);
        if (swiglu_op) {
            (pf ? pf_swiglu : gpu->matmul_swiglu)(&g, xd, T, sd, scratch);
            float *sy = download(sd, len);
            snprintf(what, sizeof what, "  matmul_swiglu T=%d same bits as swiglu on the parts alone", T);
            expect_same_bits(what, sy, ref, len);
            free(sy);
        }
        for (int v = 0; v < qrt_nvfp4_variant_count() && !blas && !pf; v++) {
            qrt_nvfp4_matmul_swiglu_variant(v, &g, xd, T, sd);
            float *vy = download(sd, len);
            snprintf(what, sizeof what, "  %s same bits", qrt_nvfp4_variant_name(v));
            expect_same_bits(what, vy, ref, len);
            free(vy);
        }
        for (int i = 0; i < 2; i++) free(ya[i]), free(yp[i]), gpu->free(yad[i]), gpu->free(ypd[i]), free(cpu_y[i]);
        free(ref), gpu->free(refd), gpu->free(sd), gpu->free(scratch), gpu->free(xd), free(x);
    }
    for (int i = 0; i < 2; i++) {
        gpu->free((void *)alone[i].data), gpu->free((void *)alone[i].scales);
        free((void *)host[i].data), free((void *)host[i].scales);
    }
    gpu->free(g.fused);
}

/* ---- the NVFP4 prefill kernel (mma_pf) ------------------------------------------------------------ */

/* An N x K NVFP4 linear through mma_pf in both forms at each T of Ts against the CPU backend's matmul (PF_TOL), and
 * with x's tokens rotated by one every row bit for bit the row of its token in the first run (a D column is one token:
 * at one T, so one split of K, the place never changes a result; every token moves to another column, the first and
 * last of each 64-token block to another block); Tb > 0: also at T = Tb against the cuBLASLt path (BLAS_TOL: its own
 * error dominates), for the shapes whose CPU reference at that T would take too long. */
static void test_fp4_prefill(int64_t N, int64_t K, const int *Ts, int nT, int Tb, uint64_t seed) {
    qrt_linear host = nvfp4_test_part(N, K, seed, 0, "prefill nvfp4"), dev = host;
    if (gpu->prepare_linear(&dev) != QRT_OK) {
        CHECK(0, "prepare_linear (prefill): %s", qrt_last_error());
        free((void *)host.data), free((void *)host.scales);
        return;
    }
    for (int ti = 0; ti < nT + (Tb > 0); ti++) {
        const int blas = ti == nT, T = blas ? Tb : Ts[ti];
        const size_t len = (size_t)T * N;
        float *x = host_rand((size_t)T * K, seed + 400 + (uint64_t)T, -1.0f, 1.0f);
        float *xr = malloc(sizeof(float) * (size_t)T * K); /* token t of xr is token (t + 1) % T of x */
        memcpy(xr, x + K, sizeof(float) * (size_t)(T - 1) * K);
        memcpy(xr + (size_t)(T - 1) * K, x, sizeof(float) * K);
        float *xd = dev_in(x, (size_t)T * K), *xrd = dev_in(xr, (size_t)T * K), *refd = NULL, *ref = NULL;
        if (blas) {
            refd = dev_out(len);
            qrt_cuda_matmul_blas(&dev, xd, T, refd);
            ref = download(refd, len);
        } else {
            ref = malloc(sizeof(float) * len);
            cpu->matmul(&host, x, T, ref);
        }
        for (int form = 1; form <= PF_FORMS; form++) {
            char what[128];
            float *yd = dev_out(len), *yrd = dev_out(len);
            qrt_cuda_matmul_fp4_prefill(&dev, xd, T, yd, form);
            snprintf(what, sizeof what, "fp4 prefill form %d N=%lld K=%lld T=%d vs %s", form, (long long)N,
                     (long long)K, T, blas ? "cublasLt" : "cpu");
            float *y = check_dev(what, yd, NULL, ref, len, blas ? BLAS_TOL : pf_tol(form));
            qrt_cuda_matmul_fp4_prefill(&dev, xrd, T, yrd, form);
            float *yr = download(yrd, len);
            snprintf(what, sizeof what, "  tokens rotated by one: same bits");
            expect_same_bits(what, yr, y + N, (size_t)(T - 1) * N);
            expect_same_bits(what, yr + (size_t)(T - 1) * N, y, (size_t)N);
            free(y), free(yr), gpu->free(yd), gpu->free(yrd);
        }
        free(ref), free(x), free(xr), gpu->free(xd), gpu->free(xrd);
        if (refd) gpu->free(refd);
    }
    gpu->free((void *)dev.data), gpu->free((void *)dev.scales);
    free((void *)host.data), free((void *)host.scales);
}

/* A NaN in one element of token tn: mma_pf gives NaN in every row of that token, in either form, and the other tokens'
 * rows finite and within PF_TOL of the CPU's (whose rows of tn are NaN too). */
static void test_fp4_prefill_nan(int64_t N, int64_t K, int T, int tn, uint64_t seed) {
    qrt_linear host = nvfp4_test_part(N, K, seed, 0, "prefill nvfp4 nan"), dev = host;
    if (gpu->prepare_linear(&dev) != QRT_OK) {
        CHECK(0, "prepare_linear (prefill nan): %s", qrt_last_error());
        free((void *)host.data), free((void *)host.scales);
        return;
    }
    float *x = host_rand((size_t)T * K, seed + 1, -1.0f, 1.0f);
    x[(size_t)tn * K + K / 2] = NAN;
    float *xd = dev_in(x, (size_t)T * K), *ref = malloc(sizeof(float) * (size_t)T * N);
    cpu->matmul(&host, x, T, ref);
    for (int form = 1; form <= PF_FORMS; form++) {
        float *yd = dev_out((size_t)T * N);
        qrt_cuda_matmul_fp4_prefill(&dev, xd, T, yd, form);
        float *y = download(yd, (size_t)T * N);
        int64_t not_nan = -1;
        double num = 0, den = 0;
        for (int64_t i = 0; i < N; i++)
            if (!isnan(y[(size_t)tn * N + i]) && not_nan < 0) not_nan = i;
        int finite = 1;
        for (int t = 0; t < T; t++)
            for (int64_t i = 0; i < N && t != tn; i++) {
                const double r = ref[(size_t)t * N + i], e = y[(size_t)t * N + i] - r;
                finite &= isfinite(y[(size_t)t * N + i]);
                num += e * e, den += r * r;
            }
        const double rel = sqrt(num / den);
        CHECK(not_nan < 0 && finite && rel <= pf_tol(form),
              "fp4 prefill form %d NaN in token %d of %d: row %lld of it not NaN (-1: none), other tokens %s, rel %.3g",
              form, tn, T, (long long)not_nan, finite ? "finite" : "not all finite", rel);
        if (not_nan < 0 && finite && rel <= pf_tol(form))
            printf("ok   fp4 prefill form %d: NaN in token %d of %d stays in its rows rel %.3g\n", form, tn, T,
                   rel);
        free(y), gpu->free(yd);
    }
    free(ref), free(x), gpu->free(xd);
    gpu->free((void *)dev.data), gpu->free((void *)dev.scales);
    free((void *)host.data), free((void *)host.scales);
}

/* ---- the other ops ------------------------------------------------------------------------------- */

static void test_rmsnorm(int rows, int n, uint64_t seed) {
    float *x = host_rand((size_t)rows * n, seed, -2, 2), *w = host_rand(n, seed + 1, 0.5f, 1.5f);
    float *ref = malloc(sizeof(float) * rows * n);
    float *xd = dev_in(x, (size_t)rows * n), *wd = dev_in(w, n);
    float *yd = dev_out((size_t)rows * n);
    char what[128];
    cpu->rmsnorm(x, w, rows, n, 1e-6f, ref);
    gpu->rmsnorm(xd, wd, rows, n, 1e-6f, yd);
    snprintf(what, sizeof what, "rmsnorm rows=%d n=%d", rows, n);
    check(what, yd, ref, (size_t)rows * n, 1e-6);
    gpu->rmsnorm(xd, wd, rows, n, 1e-6f, xd); /* in place, as model/forward.c calls it */
    snprintf(what, sizeof what, "rmsnorm in place rows=%d n=%d", rows, n);
    check(what, xd, ref, (size_t)rows * n, 1e-6);
    free(x), free(w), free(ref);
    gpu->free(xd), gpu->free(wd), gpu->free(yd);
}

/* h += y then x = rmsnorm(h)·w: the sum must equal the CPU's bit for bit, the norm within f32 rounding, and a row
 * computed alone must equal the same row inside the batch. */
static void test_add_rmsnorm(int rows, int n, uint64_t seed) {
    const size_t len = (size_t)rows * n;
    float *h = host_rand(len, seed, -2, 2), *y = host_rand(len, seed + 1, -2, 2);
    float *w = host_rand(n, seed + 2, 0.5f, 1.5f);
    float *hd = dev_in(h, len), *yd = dev_in(y, len), *wd = dev_in(w, n), *xd = dev_out(len);
    float *ref = malloc(sizeof(float) * len);
    char what[128];
    /* the last row alone first, from a copy of the inputs (the op advances h) */
    float *h1d = dev_in(h + len - n, n), *x1d = dev_out(n);
    gpu->add_rmsnorm(h1d, yd + len - n, wd, 1, n, 1e-6f, x1d);
    cpu->add_rmsnorm(h, y, w, rows, n, 1e-6f, ref);
    gpu->add_rmsnorm(hd, yd, wd, rows, n, 1e-6f, xd);
    snprintf(what, sizeof what, "add_rmsnorm rows=%d n=%d: h", rows, n);
    check(what, hd, h, len, 0);
    snprintf(what, sizeof what, "add_rmsnorm rows=%d n=%d: x", rows, n);
    float *x = check_dev(what, xd, NULL, ref, len, 1e-6);
    float *x1 = download(x1d, n);
    snprintf(what, sizeof what, "  last row alone same bits as in the batch of %d", rows);
    expect_same_bits(what, x + len - n, x1, (size_t)n);
    free(x), free(x1), free(h), free(y), free(w), free(ref);
    gpu->free(hd), gpu->free(yd), gpu->free(wd), gpu->free(xd), gpu->free(h1d), gpu->free(x1d);
}

static void test_conv1d(int T, int ch, int Ck, uint64_t seed) {
    float *x = host_rand((size_t)T * ch, seed, -2, 2), *w = host_rand((size_t)ch * Ck, seed + 1, -1, 1);
    float *st = host_rand((size_t)(Ck - 1) * ch, seed + 2, -2, 2);
    float *xd = dev_in(x, (size_t)T * ch), *wd = dev_in(w, (size_t)ch * Ck), *sd = dev_in(st, (size_t)(Ck - 1) * ch);
    float *yd = dev_out((size_t)T * ch), *ref = malloc(sizeof(float) * T * ch);
    cpu->conv1d_silu(x, st, w, T, ch, Ck, ref);
    gpu->conv1d_silu(xd, sd, wd, T, ch, Ck, yd);
    char what[128];
    snprintf(what, sizeof what, "conv1d_silu T=%d ch=%d Ck=%d", T, ch, Ck);
    check(what, yd, ref, (size_t)T * ch, 1e-6);
    snprintf(what, sizeof what, "conv1d_silu state T=%d ch=%d Ck=%d", T, ch, Ck);
    check(what, sd, st, (size_t)(Ck - 1) * ch, 0);
    free(x), free(w), free(st), free(ref);
    gpu->free(xd), gpu->free(wd), gpu->free(sd), gpu->free(yd);
}

/* The chunked form's variants, as QRT_GDN_VARIANT names them (gdn.cu): NULL the default (variant 2 at the launcher's
 * slice width), variant 1, then variant 2 at each slice width (where the device cannot give 64 columns their shared
 * memory, 2:64 runs the fallback, which must give the same results), then variant 2 with its products in 3xBF16 */
static const char *const gdn_variants[] = {NULL, "1", "2:32", "2:64", "2b", "2b:32"};
#define GDN_VARIANTS 6

/* One GPU run of the op under QRT_GDN_VARIANT = variant (NULL: unset) */
static void gdn_run(const char *variant, const float *qkv, const float *a, const float *b, const float *A_log,
                    const float *dt_bias, const float *S_in, float *S, int T, int Hk, int Hv, int Dk, int Dv,
                    int chunked, const float *z, const float *w, float eps, float *o) {
    if (variant) setenv("QRT_GDN_VARIANT", variant, 1);
    else unsetenv("QRT_GDN_VARIANT");
    gpu->gdn(qkv, a, b, A_log, dt_bias, S_in, S, T, Hk, Hv, Dk, Dv, chunked, z, w, eps, o);
    unsetenv("QRT_GDN_VARIANT");
}

/* The recurrence and its gated output norm against the CPU, the GPU reading its start state from a separate buffer
 * (S_in, which must stay as it was: a verify keeps its start state so) into a poisoned S; then the same T tokens
 * from the same start state in place (S_in = S): the recurrent form one call per token, which must give the same
 * output and state bits (rollback relies on it), the chunked form one call, the same bits as from a separate S_in.
 * The chunked form runs each variant of gdn_variants. */
static void test_gdn(int T, int Hk, int Hv, int Dk, int Dv, int chunked, uint64_t seed) {
    size_t row = 2 * (size_t)Hk * Dk + (size_t)Hv * Dv, ns = (size_t)Hv * Dk * Dv, no = (size_t)T * Hv * Dv;
    float *qkv = host_rand(T * row, seed, -1, 1), *a = host_rand((size_t)T * Hv, seed + 1, -2, 2);
    float *b = host_rand((size_t)T * Hv, seed + 2, -2, 2), *Al = host_rand(Hv, seed + 3, -1, 1);
    float *dtb = host_rand(Hv, seed + 4, -1, 1), *S = host_rand(ns, seed + 5, -0.1f, 0.1f);
    float *z = host_rand(no, seed + 6, -3, 3), *w = host_rand(Dv, seed + 7, 0.5f, 1.5f);
    float *o = malloc(sizeof(float) * no), *S_start = malloc(sizeof(float) * ns);
    memcpy(S_start, S, sizeof(float) * ns);
    float *qd = dev_in(qkv, T * row), *ad = dev_in(a, (size_t)T * Hv), *bd = dev_in(b, (size_t)T * Hv);
    float *Ad = dev_in(Al, Hv), *dd = dev_in(dtb, Hv), *zd = dev_in(z, no), *wd = dev_in(w, Dv);
    const float eps = 1e-6f;
    cpu->gdn(qkv, a, b, Al, dtb, S, S, T, Hk, Hv, Dk, Dv, chunked, z, w, eps, o);
    const double tol = chunked ? 1e-4 : 1e-5;
    const char *form = chunked ? " (chunked)" : "";
    for (int vi = 0; vi < (chunked ? GDN_VARIANTS : 1); vi++) {
        const char *variant = chunked ? gdn_variants[vi] : NULL;
        char what[160], var[32] = "";
        if (variant) snprintf(var, sizeof var, " QRT_GDN_VARIANT=%s", variant);
        float *Sd = dev_out(ns), *od = dev_out(no), *S0d = dev_in(S_start, ns), *S1d = dev_in(S_start, ns);
        float *o1d = dev_out(no);
        gdn_run(variant, qd, ad, bd, Ad, dd, S0d, Sd, T, Hk, Hv, Dk, Dv, chunked, zd, wd, eps, od);
        snprintf(what, sizeof what, "gdn%s%s T=%d Hk=%d Hv=%d Dk=%d Dv=%d: o", form, var, T, Hk, Hv, Dk, Dv);
        float *oh = check_dev(what, od, NULL, o, no, tol);
        snprintf(what, sizeof what, "gdn%s%s T=%d Hk=%d Hv=%d Dk=%d Dv=%d: state", form, var, T, Hk, Hv, Dk, Dv);
        float *Sh = check_dev(what, Sd, NULL, S, ns, tol);
        float *S0h = download(S0d, ns);
        snprintf(what, sizeof what, "  gdn%s T=%d: S_in unchanged", var, T);
        expect_same_bits(what, S0h, S_start, ns);
        const size_t vo = (size_t)Hv * Dv;
        if (chunked) gdn_run(variant, qd, ad, bd, Ad, dd, S1d, S1d, T, Hk, Hv, Dk, Dv, 1, zd, wd, eps, o1d);
        else
            for (int t = 0; t < T; t++)
                gpu->gdn(qd + t * row, ad + (size_t)t * Hv, bd + (size_t)t * Hv, Ad, dd, S1d, S1d, 1, Hk, Hv, Dk, Dv,
                         0, zd + t * vo, wd, eps, o1d + t * vo);
        float *o1 = download(o1d, no), *S1 = download(S1d, ns);
        const char *how = chunked ? "in place" : "token by token";
        snprintf(what, sizeof what, "  gdn%s T=%d %s: same output bits", var, T, how);
        expect_same_bits(what, o1, oh, no);
        snprintf(what, sizeof what, "  gdn%s T=%d %s: same state bits", var, T, how);
        expect_same_bits(what, S1, Sh, ns);
        free(o1), free(S1), free(S0h), free(oh), free(Sh);
        gpu->free(Sd), gpu->free(od), gpu->free(S0d), gpu->free(S1d), gpu->free(o1d);
    }
    free(qkv), free(a), free(b), free(Al), free(dtb), free(S), free(S_start), free(o), free(z), free(w);
    gpu->free(qd), gpu->free(ad), gpu->free(bd), gpu->free(Ad), gpu->free(dd), gpu->free(zd), gpu->free(wd);
}

/* ---- attention: preparation (q/k norm, RoPE, cache store) and gated attention ---------------------------- */

/* Element i of a cache piece in format fmt widened to f32 (scale: the row's fp8 scale). */
static float kv_elem(int fmt, const uint8_t *p, size_t i, float scale) {
    if (fmt == QRT_KV_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    if (fmt == QRT_KV_BF16) {
        uint16_t b;
        memcpy(&b, p + 2 * i, 2);
        return qrt_bf16_to_f32(b);
    }
    return qrt_e4m3_lut[p[i]] * scale;
}

/* A device KV cache of `rows` (C·Hkv) rows of Dh: every byte poisoned (0xff is NaN in f32, bf16 and e4m3) and a
 * guard band of sentinels after each piece. */
static void *dev_poisoned_bytes(size_t n) {
    uint8_t *h = malloc(n + 4 * GUARD);
    memset(h, 0xff, n);
    for (int i = 0; i < GUARD; i++) memcpy(h + n + 4 * i, &SENTINEL, 4);
    void *d = gpu->alloc(n + 4 * GUARD);
    gpu->upload(d, h, n + 4 * GUARD);
    free(h);
    return d;
}
static qrt_kv dev_cache(int fmt, size_t rows, int Dh) {
    const size_t bytes = rows * Dh * qrt_kv_elem_bytes(fmt);
    qrt_kv kv = {fmt, dev_poisoned_bytes(bytes), dev_poisoned_bytes(bytes), NULL, NULL};
    if (fmt == QRT_KV_FP8) kv.ks = dev_poisoned_bytes(4 * rows), kv.vs = dev_poisoned_bytes(4 * rows);
    return kv;
}
static qrt_kv host_cache(int fmt, size_t rows, int Dh) {
    const size_t bytes = rows * Dh * qrt_kv_elem_bytes(fmt);
    qrt_kv kv = {fmt, malloc(bytes), malloc(bytes), NULL, NULL};
    if (fmt == QRT_KV_FP8) kv.ks = malloc(4 * rows), kv.vs = malloc(4 * rows);
    return kv;
}
static void cache_free(const qrt_backend *be, qrt_kv *kv) {
    be->free(kv->k), be->free(kv->v);
    if (kv->ks) be->free(kv->ks), be->free(kv->vs);
}

/* One cache piece (keys or values) of the device against the CPU's: values must be byte-identical (stored as they
 * came), keys (normed and rotated first, in another order) equal within tol after widening; no NaN, guard intact. */
static void check_cache_piece(const char *what, int fmt, const void *dev, const float *dev_scales_h, const void *host,
                              const float *host_scales, size_t rows, int Dh, int exact, double tol) {
    const size_t bytes = rows * Dh * qrt_kv_elem_bytes(fmt);
    uint8_t *back = malloc(bytes + 4 * GUARD);
    gpu->download(back, dev, bytes + 4 * GUARD);
    int guard_ok = 1;
    for (int i = 0; i < GUARD; i++) guard_ok &= !memcmp(back + bytes + 4 * i, &SENTINEL, 4);
    double num = 0, den = 0;
    size_t bad = SIZE_MAX;
    for (size_t i = 0; i < rows * Dh; i++) {
        const float a = kv_elem(fmt, back, i, dev_scales_h ? dev_scales_h[i / Dh] : 1.0f);
        const float b = kv_elem(fmt, host, i, host_scales ? host_scales[i / Dh] : 1.0f);
        if (!isfinite(a) && bad == SIZE_MAX) bad = i;
        num += ((double)a - b) * ((double)a - b), den += (double)b * b;
    }
    const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    const int same = !memcmp(back, host, bytes);
    const int ok = guard_ok && bad == SIZE_MAX && (exact ? same : rel <= tol);
    CHECK(ok, "%s: %s rel %.3g%s%s", what, exact && !same ? "bytes differ," : "", rel,
          bad != SIZE_MAX ? " non-finite" : "", guard_ok ? "" : " guard overwritten");
    if (ok) printf("ok   %-58s %s rel %.3g\n", what, same ? "byte-identical," : "", rel);
    free(back);
}

/* Both caches after the preparation of the same inputs. The fp8 scales come back first (they widen the codes). */
static void check_caches(const char *shape, const qrt_kv *dkv, const qrt_kv *hkv, size_t rows, int Dh) {
    const int fmt = hkv->fmt;
    float *dks = NULL, *dvs = NULL;
    char what[300];
    if (fmt == QRT_KV_FP8) {
        float *hks = malloc(sizeof(float) * rows);
        memcpy(hks, hkv->ks, sizeof(float) * rows);
        snprintf(what, sizeof what, "%s: key scales", shape);
        dks = check_dev(what, dkv->ks, NULL, hks, rows, 1e-5);
        snprintf(what, sizeof what, "%s: value scales", shape);
        dvs = check_dev(what, dkv->vs, NULL, hkv->vs, rows, 0);
        free(hks);
    }
    const double key_tol = fmt == QRT_KV_F32 ? 2e-6 : fmt == QRT_KV_BF16 ? 1e-4 : 1e-3; /* rare rounding flips */
    snprintf(what, sizeof what, "%s: stored keys", shape);
    check_cache_piece(what, fmt, dkv->k, dks, hkv->k, hkv->ks, rows, Dh, 0, key_tol);
    snprintf(what, sizeof what, "%s: stored values", shape);
    check_cache_piece(what, fmt, dkv->v, dvs, hkv->v, hkv->vs, rows, Dh, 1, 0);
    free(dks), free(dvs);
}

/* attn_prep of pos0 history tokens then of T tokens at pos0 on each backend, compared (queries, both caches); then
 * attention over identical inputs (the CPU's cache and queries uploaded), compared; then tokens of the batch
 * computed alone, which must give the same bits (prep and attention; attention only up to QRT_ATTN_SPLIT_MAX_T tokens on
 * the tensor-core path, whose prefill pieces fold keys in another order). */
static void test_attention(int fmt, int T, int pos0, int Hq, int Hkv, int Dh, int R, double theta, uint64_t seed) {
    const int C = pos0 + T;
    const size_t qrow = (size_t)Hq * 2 * Dh, kvrow = (size_t)Hkv * Dh, rows = (size_t)C * Hkv;
    const size_t es = qrt_kv_elem_bytes(fmt), nq = (size_t)T * qrow, no = (size_t)T * Hq * Dh;
    const float eps = 1e-6f;
    float *qn = host_rand(Dh, seed, 0.8f, 2.0f), *kn = host_rand(Dh, seed + 1, 0.8f, 2.0f);
    float *qnd = dev_in(qn, Dh), *knd = dev_in(kn, Dh);
    qrt_kv hkv = host_cache(fmt, rows, Dh), dkv = dev_cache(fmt, rows, Dh);
    /* the history: C - T earlier tokens, prepared the same way */
    if (pos0 > 0) {
        float *hq = host_rand((size_t)pos0 * qrow, seed + 2, -1, 1);
        float *hk = host_rand((size_t)pos0 * kvrow, seed + 3, -1, 1);
        float *hv = host_rand((size_t)pos0 * kvrow, seed + 4, -1, 1);
        float *hqd = dev_in(hq, (size_t)pos0 * qrow), *hkd = dev_in(hk, (size_t)pos0 * kvrow);
        float *hvd = dev_in(hv, (size_t)pos0 * kvrow);
        for (int p = 0; p < pos0; p += 4096) { /* in prefill-sized pieces (a launch takes at most 65535 tokens) */
            const int n = QRT_MIN(4096, pos0 - p);
            cpu->attn_prep(hq + p * qrow, hk + p * kvrow, hv + p * kvrow, qn, kn, eps, &hkv, n, p, Hq, Hkv, Dh, R, theta);
            gpu->attn_prep(hqd + p * qrow, hkd + p * kvrow, hvd + p * kvrow, qnd, knd, eps, &dkv, n, p, Hq, Hkv, Dh, R,
                           theta);
        }
        free(hq), free(hk), free(hv), gpu->free(hqd), gpu->free(hkd), gpu->free(hvd);
    }
    float *q0 = host_rand(nq, seed + 5, -1, 1), *k = host_rand((size_t)T * kvrow, seed + 6, -1, 1);
    float *v = host_rand((size_t)T * kvrow, seed + 7, -1, 1), *qg = malloc(sizeof(float) * nq);
    memcpy(qg, q0, sizeof(float) * nq);
    float *qgd = dev_in(q0, nq), *kd = dev_in(k, (size_t)T * kvrow), *vd = dev_in(v, (size_t)T * kvrow);
    cpu->attn_prep(qg, k, v, qn, kn, eps, &hkv, T, pos0, Hq, Hkv, Dh, R, theta);
    gpu->attn_prep(qgd, kd, vd, qnd, knd, eps, &dkv, T, pos0, Hq, Hkv, Dh, R, theta);
    char shape[120], what[200];
    snprintf(shape, sizeof shape, "fmt=%d T=%d pos0=%d Hq=%d Hkv=%d Dh=%d R=%d theta=%g", fmt, T, pos0, Hq, Hkv, Dh, R,
             theta);
    snprintf(what, sizeof what, "attn_prep %s: [query | gate]", shape);
    float *qg_dev = check_dev(what, qgd, NULL, qg, nq, 2e-6);
    snprintf(what, sizeof what, "attn_prep %s", shape);
    check_caches(what, &dkv, &hkv, rows, Dh);
    const int ts[3] = {0, T / 2, T - 1};
    for (int i = 0; i < 3; i++) { /* a token prepared alone: same query bits as in the batch */
        const int t = ts[i];
        if (i && t == ts[i - 1]) continue;
        float *q1d = dev_in(q0 + t * qrow, qrow);
        gpu->attn_prep(q1d, kd + t * kvrow, vd + t * kvrow, qnd, knd, eps, &dkv, 1, pos0 + t, Hq, Hkv, Dh, R, theta);
        float *q1 = download(q1d, qrow);
        snprintf(what, sizeof what, "  attn_prep token %d alone same bits as in the batch", t);
        expect_same_bits(what, q1, qg_dev + t * qrow, qrow);
        free(q1), gpu->free(q1d);
    }
    /* attention on identical inputs: the CPU's prepared queries and cache bytes */
    gpu->upload(qgd, qg, sizeof(float) * nq);
    gpu->upload(dkv.k, hkv.k, rows * Dh * es), gpu->upload(dkv.v, hkv.v, rows * Dh * es);
    if (fmt == QRT_KV_FP8) gpu->upload(dkv.ks, hkv.ks, 4 * rows), gpu->upload(dkv.vs, hkv.vs, 4 * rows);
    float *ref = malloc(sizeof(float) * no), *od = dev_out(no);
    cpu->attention(qg, &hkv, T, pos0, Hq, Hkv, Dh, ref);
    gpu->attention(qgd, &dkv, T, pos0, Hq, Hkv, Dh, od);
    snprintf(what, sizeof what, "attention %s", shape);
    /* the tensor-core kernel (bf16 and fp8 caches at Dh 32/64/128/256) takes q and p as two bf16 terms each, 16
     * significant bits: within 5e-5; in a prefill of QRT_CUDA_ATTN_FAST_MIN_T tokens or more at Dh 256 as one term
     * each, within BLAS_TOL's bound; the f32 path within 1e-5 */
    const int tc = fmt != QRT_KV_F32 && (Dh == 32 || Dh == 64 || Dh == 128 || Dh == 256);
    const int prefill = tc && T > QRT_ATTN_SPLIT_MAX_T;
    const int one_term = prefill && T >= QRT_CUDA_ATTN_FAST_MIN_T && Dh == 256;
    float *o = check_dev(what, od, NULL, ref, no, one_term ? BLAS_TOL : tc ? 5e-5 : 1e-5);
    if (prefill) { /* the other tiling (QRT_ATTN_PREFILL_TWO=1: two terms at every length; 0: one term at Dh 256) */
        float *o2d = dev_out(no);
        setenv("QRT_ATTN_PREFILL_TWO", one_term ? "1" : "0", 1);
        gpu->attention(qgd, &dkv, T, pos0, Hq, Hkv, Dh, o2d);
        unsetenv("QRT_ATTN_PREFILL_TWO");
        snprintf(what, sizeof what, "attention %s QRT_ATTN_PREFILL_TWO=%d", shape, one_term);
        free(check_dev(what, o2d, NULL, ref, no, one_term || Dh != 256 ? 5e-5 : BLAS_TOL));
        gpu->free(o2d);
    }
    const size_t orow = (size_t)Hq * Dh;
    for (int i = 0; i < 3; i++) { /* batch invariance: a token alone (its own chunks, its own merge) */
        const int t = ts[i];
        if (i && t == ts[i - 1]) continue;
        if (prefill) break; /* a prefill piece: another key order, not the same bits */
        float *o1d = dev_out(orow);
        gpu->attention(qgd + t * qrow, &dkv, 1, pos0 + t, Hq, Hkv, Dh, o1d);
        float *o1 = download(o1d, orow);
        snprintf(what, sizeof what, "  attention token %d alone same bits as in the batch", t);
        expect_same_bits(what, o1, o + t * orow, orow);
        free(o1), gpu->free(o1d);
    }
    free(qn), free(kn), free(q0), free(k), free(v), free(qg), free(qg_dev), free(ref), free(o);
    gpu->free(qnd), gpu->free(knd), gpu->free(qgd), gpu->free(kd), gpu->free(vd), gpu->free(od);
    cache_free(cpu, &hkv), cache_free(gpu, &dkv);
}

static void test_elementwise(size_t n, uint64_t seed) {
    float *a = host_rand(n, seed, -4, 4), *b = host_rand(n, seed + 1, -4, 4), *ref = malloc(sizeof(float) * n);
    float *ad = dev_in(a, n), *bd = dev_in(b, n), *yd = dev_out(n);
    char what[128];
    cpu->swiglu(a, b, n, ref);
    gpu->swiglu(ad, bd, n, yd);
    snprintf(what, sizeof what, "swiglu n=%zu", n);
    check(what, yd, ref, n, 1e-6);
    free(a), free(b), free(ref);
    gpu->free(ad), gpu->free(bd), gpu->free(yd);
}

/* argmax against the CPU's, exactly: random rows and rows built for the rules (ties of the max: the first wins; a
 * NaN first or elsewhere, all -inf, +inf: QRT_PICK_NONFINITE), at the 27B vocabulary and odd lengths; the
 * output poisoned with a guard band after it; the last row alone gives the same pick. */
static void test_argmax(int rows, int n, uint64_t seed) {
    const size_t len = (size_t)rows * n;
    float *x = host_rand(len, seed, -8, 8);
    for (int r = 0; r < rows; r++) {
        float *xr = x + (size_t)r * n;
        switch (r % 6) {
        case 1: xr[n / 3] = xr[n - 1] = 100.0f; break;
        case 2: xr[0] = NAN, xr[n - 1] = 50.0f; break;
        case 3: xr[n / 2] = NAN, xr[n / 4] = 30.0f; break; /* n / 4 wins unless it is n / 2 */
        case 4:
            for (int i = 0; i < n; i++) xr[i] = -INFINITY;
            break;
        case 5: xr[n - 1] = INFINITY, xr[(n - 2 + n) % n] = INFINITY; break;
        default: break;
        }
    }
    int32_t *ref = malloc(sizeof(int32_t) * rows), *got = malloc(sizeof(int32_t) * (rows + GUARD));
    cpu->argmax(x, rows, n, ref);
    float *xd = dev_in(x, len), *od = dev_out((size_t)rows), *o1d = dev_out(1);
    gpu->argmax(xd, rows, n, (int32_t *)od);
    gpu->argmax(xd + len - n, 1, n, (int32_t *)o1d);
    gpu->download(got, od, sizeof(int32_t) * (rows + GUARD));
    int32_t alone;
    gpu->download(&alone, o1d, sizeof alone);
    int bad = -1, guard_ok = 1;
    for (int r = 0; r < rows && bad < 0; r++)
        if (got[r] != ref[r]) bad = r;
    for (int i = 0; i < GUARD; i++) guard_ok &= !memcmp(&got[rows + i], &SENTINEL, 4);
    const int ok = bad < 0 && guard_ok && alone == got[rows - 1];
    CHECK(ok, "argmax rows=%d n=%d: first differing row %d (picks %d, the CPU %d),%s last row alone picks %d, in the "
          "batch %d", rows, n, bad, bad >= 0 ? got[bad] : -1, bad >= 0 ? ref[bad] : -1,
          guard_ok ? "" : " guard overwritten,", alone, got[rows - 1]);
    if (ok) printf("ok   argmax rows=%-3d n=%-48d identical\n", rows, n);
    free(x), free(ref), free(got), gpu->free(xd), gpu->free(od), gpu->free(o1d);
}

static void test_embed(qrt_wformat fmt, int64_t V, int64_t D, uint64_t seed) {
    size_t esize = fmt == QRT_WF_F32 ? 4 : 2;
    uint8_t *e = malloc((size_t)V * D * esize);
    for (int64_t i = 0; i < V * D; i++) {
        float f = urand(seed, (size_t)i, -1, 1);
        if (fmt == QRT_WF_F32) memcpy(e + 4 * i, &f, 4);
        else {
            uint16_t h = fmt == QRT_WF_BF16 ? qrt_f32_to_bf16(f) : (uint16_t)(0x3c00 | (qrt_mix64(i) & 0x3ff)); /* f16 1..2 */
            memcpy(e + 2 * i, &h, 2);
        }
    }
    qrt_linear ec = {.fmt = fmt, .n = V, .k = D, .data = e, .name = "embed"}, eg = ec;
    if (gpu->prepare_linear(&eg) != QRT_OK) {
        CHECK(0, "prepare_linear embed: %s", qrt_last_error());
        return;
    }
    enum { T = 9 };
    int32_t ids[T] = {0, (int32_t)V - 1, 1, 7 % (int32_t)V, (int32_t)V / 2, 3 % (int32_t)V, (int32_t)V - 1, 0, 5 % (int32_t)V};
    float *ref = malloc(sizeof(float) * T * D), *yd = dev_out((size_t)T * D);
    cpu->embed(&ec, ids, T, ref);
    gpu->embed(&eg, ids, T, yd);
    char what[128];
    snprintf(what, sizeof what, "embed %s V=%lld D=%lld T=%d", qrt_wformat_name(fmt), (long long)V, (long long)D, T);
    check(what, yd, ref, (size_t)T * D, 0);
    free(e), free(ref), gpu->free(yd), gpu->free((void *)eg.data);
}

/* GDN: the recurrence (27B heads, fixture heads, dk != dv); the chunked form (prefill), each variant: one token,
 * either side of a chunk of 64, several chunks with a partial last one, a whole prefill piece of 2048 (its scratch
 * grown past the smaller calls'), longer calls, every T below one chunk, Dk and Dv not multiples of 32 (padded
 * columns) */
static void test_gdn_cases(void) {
    test_gdn(1, 16, 48, 128, 128, 0, 91);
    test_gdn(7, 16, 48, 128, 128, 0, 92);
    test_gdn(17, 16, 48, 128, 128, 0, 98);
    test_gdn(5, 2, 6, 32, 32, 0, 94);
    test_gdn(9, 2, 4, 32, 48, 0, 96);
    test_gdn(3, 1, 2, 64, 40, 0, 97);
    const int chunked_T[] = {1, 63, 65, 100, 200, 517};
    for (int i = 0; i < 6; i++) {
        const int T = chunked_T[i];
        test_gdn(T, 16, 48, 128, 128, 1, 200 + i);
        test_gdn(T, 2, 6, 32, 32, 1, 210 + i);
        test_gdn(T, 2, 4, 32, 48, 1, 220 + i);
        test_gdn(T, 1, 2, 32, 32, 1, 230 + i);
        test_gdn(T, 1, 2, 64, 40, 1, 240 + i);
        test_gdn(T, 2, 6, 48, 72, 1, 250 + i);
    }
    test_gdn(2048, 16, 48, 128, 128, 1, 260);
    test_gdn(1000, 4, 8, 128, 128, 1, 261);
    test_gdn(2148, 16, 48, 128, 128, 1, 262); /* variant 2 in two segments (gdn.cu GDN_SEG_TOKENS) */
    test_gdn(4100, 2, 4, 128, 128, 1, 263);   /* three, the last of 4 tokens */
    for (int T = 2; T < 64; T++) test_gdn(T, 2, 4, 128, 128, 1, 300 + T);
}

/* attention preparation and attention in every cache format */
static void test_attention_cases(void) {
    /* attention preparation and attention: decode and prefill, GQA 6:1 at Dh 256 (27B); contexts of one chunk, of
     * many (up to 64 at 8K), calls mixing one-chunk and many-chunk tokens, a call across the point where the chunk
     * length grows (n = 2049), several 16-token slices; the fixture shapes and odd head sizes */
    for (int fmt = QRT_KV_F32; fmt <= QRT_KV_FP8; fmt++) {
        test_attention(fmt, 1, 300, 24, 4, 256, 64, 1e7, 111);
        test_attention(fmt, 1, 0, 24, 4, 256, 64, 1e7, 112);
        test_attention(fmt, 33, 0, 24, 4, 256, 64, 1e7, 113);
        test_attention(fmt, 7, 129, 24, 4, 256, 64, 1e7, 114);
        test_attention(fmt, 1, 8191, 24, 4, 256, 64, 1e7, 115);
        test_attention(fmt, 9, 4000, 24, 4, 256, 64, 1e7, 116);
        test_attention(fmt, 17, 2040, 24, 4, 256, 64, 1e7, 117);
        test_attention(fmt, 5, 3, 4, 2, 32, 8, 1e7, 118);
        test_attention(fmt, 130, 0, 4, 1, 64, 16, 1e4, 119);
        test_attention(fmt, 2, 40, 2, 2, 48, 16, 1e4, 120);
        test_attention(fmt, 20, 100, 6, 2, 40, 8, 1e6, 121);
        /* the tensor-core kernel's chunks: a verify across the first 64-key boundary (tokens with one chunk and with
         * two) and across the change to 256-key chunks at 1024; G = 8 at Dh 128 in two 8-token slices; G = 12 (two
         * row tiles per slice); a context crossing the change to 4096-key chunks at 74752; prefill pieces at odd
         * contexts (200 tokens after 37, a partial last row tile; Dh 32 after 5) */
        test_attention(fmt, 7, 60, 24, 4, 256, 64, 1e7, 131);
        test_attention(fmt, 7, 1020, 24, 4, 256, 64, 1e7, 132);
        test_attention(fmt, 16, 300, 16, 2, 128, 32, 1e6, 133);
        test_attention(fmt, 9, 50, 12, 1, 64, 16, 1e4, 134);
        test_attention(fmt, 3, 74750, 2, 1, 64, 16, 1e7, 135);
        test_attention(fmt, 200, 37, 24, 4, 256, 64, 1e7, 136);
        test_attention(fmt, 33, 5, 4, 2, 32, 8, 1e4, 137);
        /* a prefill piece long enough for the fast tiling (q and p as one term; a partial last 128-row tile) */
        test_attention(fmt, QRT_CUDA_ATTN_FAST_MIN_T + 6, 3, 12, 2, 256, 64, 1e7, 138);
    }
}

int main(int argc, char **argv) {
    int quick = 0, attention_only = 0, gdn_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1; /* skip the 27B-shape lm_head cases */
        else if (!strcmp(argv[i], "--attention")) attention_only = 1; /* only the attention cases */
        else if (!strcmp(argv[i], "--gdn")) gdn_only = 1;             /* only the GDN cases */
        else {
            fprintf(stderr, "usage: test_cuda_ops [--quick] [--attention] [--gdn]\n");
            return 2;
        }
    }
    if (qrt_cuda_device_count() < 1) {
        printf("SKIP: no CUDA device (no GPU or no driver); the gpu tests need one\n");
        return 77;
    }
    qrt_dtype_init();
    cpu = qrt_backend_cpu();
    gpu = qrt_backend_cuda();
    if (!gpu) {
        printf("SKIP: %s\n", qrt_last_error());
        return 77;
    }
    char dev[256];
    qrt_cuda_describe(dev, sizeof dev);
    printf("device: %s\n", dev);
    double t0 = qrt_now_ms();

    if (attention_only || gdn_only) {
        if (attention_only) test_attention_cases();
        if (gdn_only) test_gdn_cases();
        printf("(%.1f s)\n", (qrt_now_ms() - t0) / 1e3);
        return test_exit("cuda_ops");
    }
    const int Ts_small[] = {1, 2, 7, 16, 17, 64};
    const int Ts_real[] = {1, 7, 64};
    /* dense matmul: 27B shapes (BF16, as stored) and odd ones in every format */
    test_dense(QRT_WF_BF16, 17408, 5120, Ts_real, 3, 0, 11);
    test_dense(QRT_WF_BF16, 5120, 17408, Ts_real, 3, 0, 12);
    test_dense(QRT_WF_BF16, 10240, 5120, Ts_real, 3, 0, 13);
    test_dense(QRT_WF_BF16, 48, 5120, Ts_small, 6, 300, 14);
    /* FP8 block-128 (the MTP head of the NVFP4 checkpoints): its shapes, and N, K not multiples of 128 */
    test_dense(QRT_WF_FP8B, 5120, 10240, Ts_real, 3, 0, 16);
    test_dense(QRT_WF_FP8B, 14336, 5120, Ts_real, 3, 0, 17);
    for (int f = 0; f < 4; f++) {
        qrt_wformat fmt = f == 0 ? QRT_WF_BF16 : f == 1 ? QRT_WF_F16 : f == 2 ? QRT_WF_F32 : QRT_WF_FP8B;
        test_dense(fmt, 1000, 130, Ts_small, 6, 300, 20 + f);
        test_dense(fmt, 37, 72, Ts_small, 6, 131, 30 + f);
        test_dense(fmt, 3, 5, Ts_small, 6, 64, 40 + f);
        test_dense(fmt, 513, 1024, Ts_small, 6, 77, 50 + f);
    }
    /* BF16 and FP8 on the tensor cores at every decode and verify size (row 0 bit-identical at each T), past one
     * 16-token group, on the stored layout's shapes (GDN in_proj qkv, out_proj, MTP fc) and odd ones (K % 32 != 0,
     * K % 8 != 0, N % 16 != 0, N and K not multiples of 128) */
    const int Ts_all[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 33};
    const int nT_all = (int)(sizeof Ts_all / sizeof Ts_all[0]);
    test_dense(QRT_WF_BF16, 10240, 5120, Ts_all, nT_all, 0, 70);
    test_dense(QRT_WF_BF16, 5120, 6144, Ts_all, nT_all, 0, 71);
    test_dense(QRT_WF_BF16, 5120, 10240, Ts_all, nT_all, 0, 72);
    test_dense(QRT_WF_BF16, 1000, 130, Ts_all, nT_all, 0, 73);
    test_dense(QRT_WF_BF16, 37, 72, Ts_all, nT_all, 0, 74);
    test_dense(QRT_WF_BF16, 3, 5, Ts_all, nT_all, 0, 75);
    test_dense(QRT_WF_BF16, 129, 1000, Ts_all, nT_all, 0, 76);
    test_dense(QRT_WF_FP8B, 1000, 130, Ts_all, nT_all, 0, 77);
    test_dense(QRT_WF_FP8B, 300, 1000, Ts_all, nT_all, 0, 78);
    test_dense(QRT_WF_FP8B, 5120, 10240, Ts_all, nT_all, 0, 79);
    if (!quick) {
        const int Tl[] = {1, 7};
        test_dense(QRT_WF_BF16, 248320, 5120, Tl, 2, 0, 15);
    }
    /* NVFP4: every variant; the 27B shapes and odd ones (K % 32 == 16 exercises the padded tail); T = 37 takes a
     * second 32-token pass with a partial group of 8, T = 20 a partial 16-token pass (mma_k4) */
    const int Tf[] = {1, 2, 7, 9, 16, 20, 37};
    const int Tf_real[] = {1, 7, 37};
    test_nvfp4(2 * 17408, 5120, Tf_real, 3, 0, 61);
    test_nvfp4(5120, 17408, Tf_real, 3, 0, 62);
    if (!quick) test_nvfp4(248320, 5120, Tf_real, 2, 0, 63);
    test_nvfp4(1000, 176, Tf, 7, 300, 64);
    test_nvfp4(37, 48, Tf, 7, 131, 65);
    test_nvfp4(5, 16, Tf, 7, 64, 66);
    test_nvfp4(130, 1024, Tf, 7, 77, 67);
    /* fused projection groups: the 27B's GDN in_proj qkv|z|b|a, attention q|k|v, MLP gate|up; odd shapes (rows
     * not multiples of 16, K % 32 == 16); a mixed group (the BF16 part runs alone); a single NVFP4 part */
    {
        const int Tg[] = {1, 7};
        const int64_t gdn[] = {10240, 6144, 48, 48}, attn[] = {12288, 1024, 1024}, mlp[] = {17408, 17408};
        const int64_t odd[] = {37, 5, 130, 16}, odd2[] = {1000, 17}, mixed[] = {100, 33, 50}, one[] = {21, 9};
        test_group(gdn, 4, 5120, 0, QRT_WF_BF16, Tg, 2, 64, 0, 141);
        test_group(attn, 3, 5120, 0, QRT_WF_BF16, Tg, 2, 0, 0, 142);
        test_group(mlp, 2, 5120, 0, QRT_WF_BF16, Tg, 2, 0, 0, 143);
        test_group(odd, 4, 176, 0, QRT_WF_BF16, Tf, 5, 300, 0, 144);
        test_group(odd2, 2, 48, 0, QRT_WF_BF16, Tf, 5, 65, 0, 145);
        test_group(mixed, 3, 1024, 2, QRT_WF_BF16, Tf, 5, 131, 0, 146);
        test_group(one, 2, 512, 1, QRT_WF_BF16, Tg, 2, 64, 0, 147);
        /* all dense: one tensor-core launch (the stored layout's GDN in_proj in BF16; an FP8 block-128 group with
         * rows not multiples of 16 or 128 and K not of 128) */
        const int64_t fp8[] = {200, 37, 130};
        test_group(gdn, 4, 5120, 0xf, QRT_WF_BF16, Tg, 2, 64, 0, 154);
        test_group(odd, 4, 176, 0xf, QRT_WF_BF16, Tf, 7, 0, 0, 155);
        test_group(fp8, 3, 408, 0x7, QRT_WF_FP8B, Tf, 7, 0, 0, 156);
        test_pair(17408, 5120, Tg, 2, 64, 0, 148); /* Qwen3.6-27B's gate|up */
        test_pair(200, 176, Tf, 5, 131, 0, 149);    /* rows not a multiple of 16 (a last pair tile past N) */
        test_pair(40, 48, Tf, 5, 300, 0, 150);
    }
    /* the NVFP4 prefill kernel mma_pf, both forms: odd shapes (N not a multiple of the block's 128 rows or of 16,
     * K = 176 below one slice and not a multiple of the 64-element step, K = 512, 1536, 5120) on every token count
     * around its 64-token blocks; Qwen3.6-27B's down_proj (CPU at 17, cuBLASLt at 2048) and gate|up stacked
     * (cuBLASLt at 128); fused groups (a mixed one: its BF16 part runs alone) and gate|up pairs. K is split (its
     * partial sums added by fp4_pf_sum) where the grid is small and K has 32 steps of 64 or more: N=300 K=5120,
     * down_proj at 17 (10 splits), the groups and pairs at K = 2048 */
    {
        const int Tp[] = {17, 33, 64, 100, 128, 257, 2048}, Tp3[] = {17, 100, 257}, Tp_small[] = {33, 64, 128};
        const int T17[] = {17}, Tpg[] = {17, 64, 100, 257};
        test_fp4_prefill(1000, 176, Tp, 7, 0, 160);
        test_fp4_prefill(130, 1536, Tp3, 3, 0, 161);
        test_fp4_prefill(37, 512, Tp_small, 3, 0, 162);
        test_fp4_prefill(300, 5120, Tp3, 3, 0, 163);
        test_fp4_prefill(5120, 17408, T17, 1, 2048, 164);
        test_fp4_prefill(2 * 17408, 5120, NULL, 0, 128, 165);
        test_fp4_prefill_nan(130, 1536, 40, 5, 166);
        const int64_t odd[] = {37, 5, 130, 16}, mixed[] = {100, 33, 50};
        for (int pf = 1; pf <= PF_FORMS; pf++) {
            test_group(odd, 4, 176, 0, QRT_WF_BF16, Tpg, 4, 0, pf, 167);
            test_group(odd, 4, 2048, 0, QRT_WF_BF16, Tp3, 3, 0, pf, 171); /* K split in 2 (32 steps over a 2-block grid) */
            test_group(mixed, 3, 1024, 2, QRT_WF_BF16, Tp3, 3, 0, pf, 168);
            test_pair(200, 176, Tpg, 4, 0, pf, 169);
            test_pair(200, 2048, Tp3, 3, 0, pf, 172); /* split K */
            test_pair(40, 48, Tp_small, 3, 0, pf, 170);
        }
    }
    /* norms */
    test_rmsnorm(7, 5120, 71);
    test_rmsnorm(7 * 24, 256, 72);
    test_rmsnorm(7 * 48, 128, 73);
    test_rmsnorm(5, 130, 74);
    test_rmsnorm(3, 4096, 75);
    test_rmsnorm(2, 9000, 85); /* more than 32 per thread: the loop form */
    test_add_rmsnorm(1, 5120, 76);
    test_add_rmsnorm(7, 5120, 77);
    test_add_rmsnorm(17, 5120, 78);
    test_add_rmsnorm(5, 130, 79);
    test_add_rmsnorm(3, 2500, 80);
    test_add_rmsnorm(2, 9000, 86); /* more than 8 per thread at 1024: the loop form */
    /* conv */
    test_conv1d(1, 10240, 4, 81);
    test_conv1d(7, 10240, 4, 82);
    test_conv1d(130, 10240, 4, 83);
    test_conv1d(5, 1000, 3, 84);
    test_conv1d(2, 1000, 4, 85);     /* T < Ck - 1: the new state keeps part of the old */
    test_conv1d(33, 999, 4, 86);     /* one token past the first segment */
    test_conv1d(100, 1000, 3, 87);   /* segments of the generic-Ck kernel */
    test_conv1d(8192, 10240, 4, 88); /* a prefill piece of the 27B shape */
    test_gdn_cases();
    test_attention_cases();
    /* greedy argmax: one decode row and a verify's K+1 = 7 and 17 rows of the 27B vocabulary; odd lengths, more
     * rows than one launch pair takes (64) */
    test_argmax(1, 248320, 125);
    test_argmax(7, 248320, 126);
    test_argmax(17, 248320, 127);
    test_argmax(6, 5, 128);
    test_argmax(130, 1001, 129);
    test_argmax(12, 8191, 130);
    /* elementwise and embedding */
    test_elementwise((size_t)7 * 17408, 121);
    test_elementwise(1001, 122);
    test_embed(QRT_WF_BF16, 1000, 130, 131);
    test_embed(QRT_WF_F16, 1000, 130, 132);
    test_embed(QRT_WF_F32, 1000, 130, 133);
    test_embed(QRT_WF_BF16, 4096, 5120, 134);

    printf("(%.1f s)\n", (qrt_now_ms() - t0) / 1e3);
    return test_exit("cuda_ops");
}
