/* Matmul y [T][N] = x [T][K] · Wᵀ, the op the model calls: at prefill sizes (qrt_cuda_blas_takes) on the tensor
 * cores through cuBLASLt (matmul_blas.cu); below, by weight format, dense (matmul_dense.cu) or NVFP4 (the autotuner's
 * variant, matmul_fp4.cu), one linear or a group of linears that share x (q|k|v, gate|up) in one launch.
 *
 * Between QRT_GRAPH_MAX_T and the cuBLASLt threshold, NVFP4 calls take the prefill kernel mma_pf
 * (matmul_fp4_prefill.cu) instead of the autotuned variant when QRT_FP4_PREFILL asks for it (until its crossover
 * against mma_gemm and cuBLASLt is measured); like the cuBLASLt path it is never taken at decode or verify sizes or
 * inside a recorded graph.
 *
 * Batch invariance (outside those two paths, so at every decode and verify size): every kernel of a format
 * reduces a row in one fixed order, so a row's result does not depend on T, on the token's place in the batch, or on
 * the variant (test_cuda_ops checks this bit for bit); the autotuner's choice
 * never changes a result. The CPU backend uses another (also fixed) order, so CPU and GPU agree to rounding. */
#include <string.h>

#include "backend/cuda/matmul_fp4.cuh"

extern "C" void qrt_cuda_matmul_hand(const qrt_linear *W, const float *x, int T, float *y) {
    switch (W->fmt) {
    case QRT_WF_BF16:
    case QRT_WF_F16:
    case QRT_WF_F32:
    case QRT_WF_FP8B: qrt_cuda_matmul_dense(W, x, T, y); break;
    case QRT_WF_NVFP4:
        /* a part of a paired gate|up group (scales set to the pair layout) runs only through its group */
        QRT_ASSERT(W->scales == NULL);
        qrt_nvfp4_matmul_variant(qrt_nvfp4_pick(W, T), W, x, T, y);
        break;
    default: QRT_ASSERT(!"weight format without a CUDA matmul (prepare_linear refuses it)");
    }
}

extern "C" int qrt_cuda_fp4_prefill_at(int T) {
    int max_pos;
    if (T <= QRT_GRAPH_MAX_T || T >= qrt_cuda_blas_min_t(QRT_WF_NVFP4) || qrt_cuda_graph_pos(&max_pos)) return 0;
    return qrt_cuda_fp4_prefill_form();
}

/* One linear off the cuBLASLt path: an NVFP4 one through the prefill kernel in form `form` (> 0), else the hand
 * kernels. */
static void matmul_off_blas(int form, const qrt_linear *W, const float *x, int T, float *y) {
    if (W->fmt == QRT_WF_NVFP4 && form > 0) {
        QRT_ASSERT(W->scales == NULL); /* not a part of a pair */
        fp4_run_prefill((const uint8_t *)W->data, fp4_one_segment(W, y), W->k, x, T, form);
    } else {
        qrt_cuda_matmul_hand(W, x, T, y);
    }
}

/* One linear: through cuBLASLt where that path takes it, else as matmul_off_blas. */
static void matmul_with(int form, const qrt_linear *W, const float *x, int T, float *y) {
    if (qrt_cuda_blas_takes(W->fmt, W->n * W->k, T)) qrt_cuda_matmul_blas(W, x, T, y);
    else matmul_off_blas(form, W, x, T, y);
}

void qrt_cuda_matmul(const qrt_linear *W, const float *x, int T, float *y) {
    matmul_with(qrt_cuda_fp4_prefill_at(T), W, x, T, y);
}

extern "C" void qrt_cuda_matmul_fp4_prefill(const qrt_linear *W, const float *x, int T, float *y, int form) {
    QRT_ASSERT(W->fmt == QRT_WF_NVFP4 && form >= 1 && form <= 3);
    matmul_off_blas(form, W, x, T, y);
}

/* Whether a group runs through cuBLASLt at T: decided on all its rows, by its first part's format. */
static bool group_takes_blas(const qrt_linear_group *g, int T) {
    int64_t elems = 0;
    for (int i = 0; i < g->n; i++) elems += g->part[i]->n * g->part[i]->k;
    return qrt_cuda_blas_takes(g->part[0]->fmt, elems, T);
}

/* The NVFP4 launch over seg: the prefill kernel in form `form` (> 0), else variant v, or the autotuner's pick for
 * the shape `all` (v < 0). */
static void fp4_launch(int form, int v, const qrt_linear *all, const uint8_t *blocks, const fp4_segments &seg,
                       int64_t K, const float *x, int T) {
    if (form > 0) fp4_run_prefill(blocks, seg, K, x, T, form);
    else fp4_launch_variant(v >= 0 ? v : qrt_nvfp4_pick(all, T), blocks, seg, K, x, T);
}

/* A paired group's launch: gate and up into y0 and y1 (FP4_PAIR), or silu(gate) · up into y0 (FP4_PAIR_SWIGLU). The
 * variant is picked for the shape of both parts' rows, as for any fused group. */
static void fp4_pair_launch(int form, int v /* -1: the autotuner's */, const qrt_linear_group *g, const float *x,
                            int T, int pair, float *y0, float *y1) {
    const qrt_linear *gate = g->part[0], *up = g->part[1];
    qrt_linear all;
    memset(&all, 0, sizeof all);
    all.fmt = QRT_WF_NVFP4, all.n = 2 * ((gate->n + 15) / 16) * 16, all.k = gate->k, all.data = g->fused;
    all.scale2 = 1.0f, all.name = "fused group";
    fp4_segments seg;
    memset(&seg, 0, sizeof seg);
    seg.count = 1, seg.pair = pair;
    seg.tile_begin[1] = all.n / 16;
    seg.rows[0] = seg.rows[1] = gate->n;
    seg.scale2[0] = gate->scale2, seg.scale2[1] = up->scale2;
    seg.y[0] = y0, seg.y[1] = y1;
    fp4_launch(form, v, &all, (const uint8_t *)g->fused, seg, gate->k, x, T);
}

extern "C" void qrt_nvfp4_matmul_swiglu_variant(int v, const qrt_linear_group *g, const float *x, int T, float *y) {
    QRT_ASSERT(g->paired && v >= 0 && v < FP4_VARIANTS && T >= 1);
    fp4_pair_launch(0, v, g, x, T, FP4_PAIR_SWIGLU, y, NULL);
}

/* A group off the cuBLASLt path, its NVFP4 parts in prefill form `form` (0: the autotuned variants). */
static void group_off_blas(int form, const qrt_linear_group *g, const float *x, int T, float *const *y);

/* matmul_swiglu off the cuBLASLt path: a paired group in one launch, any other as its group then swiglu. */
static void swiglu_off_blas(int form, const qrt_linear_group *g, const float *x, int T, float *y, float *up) {
    if (g->paired) {
        fp4_pair_launch(form, -1, g, x, T, FP4_PAIR_SWIGLU, y, NULL);
        return;
    }
    float *const outs[2] = {y, up};
    group_off_blas(form, g, x, T, outs);
    qrt_cuda_swiglu(y, up, (size_t)T * g->part[0]->n, y);
}

void qrt_cuda_matmul_swiglu(const qrt_linear_group *g, const float *x, int T, float *y, float *up) {
    if (group_takes_blas(g, T)) {
        float *const outs[2] = {y, up};
        qrt_cuda_matmul_group_blas(g, x, T, outs);
        qrt_cuda_swiglu(y, up, (size_t)T * g->part[0]->n, y);
        return;
    }
    swiglu_off_blas(qrt_cuda_fp4_prefill_at(T), g, x, T, y, up);
}

extern "C" void qrt_cuda_matmul_swiglu_fp4_prefill(const qrt_linear_group *g, const float *x, int T, float *y,
                                                   float *up, int form) {
    QRT_ASSERT(form >= 1 && form <= 3);
    swiglu_off_blas(form, g, x, T, y, up);
}

void qrt_cuda_matmul_group(const qrt_linear_group *g, const float *x, int T, float *const *y) {
    if (group_takes_blas(g, T)) qrt_cuda_matmul_group_blas(g, x, T, y);
    else group_off_blas(qrt_cuda_fp4_prefill_at(T), g, x, T, y);
}

extern "C" void qrt_cuda_matmul_group_fp4_prefill(const qrt_linear_group *g, const float *x, int T, float *const *y,
                                                  int form) {
    QRT_ASSERT(form >= 1 && form <= 3);
    group_off_blas(form, g, x, T, y);
}

static void group_off_blas(int form, const qrt_linear_group *g, const float *x, int T, float *const *y) {
    if (g->paired) {
        fp4_pair_launch(form, -1, g, x, T, FP4_PAIR, y[0], y[1]);
        return;
    }
    if (!g->fused) { /* not laid out together: all BF16 / FP8 (one launch), mixed, or fewer than two NVFP4 parts */
        if (qrt_cuda_dense_mma_group_fits(g)) {
            qrt_cuda_matmul_dense_mma_group(g, x, T, y);
            return;
        }
        for (int i = 0; i < g->n; i++) matmul_with(form, g->part[i], x, T, y[i]);
        return;
    }
    int in_fused[QRT_GROUP_MAX];
    int64_t tile_begin[QRT_GROUP_MAX + 1], K;
    const int count = fp4_group_layout(g, in_fused, tile_begin, &K);
    /* The variant is picked for the fused shape (all rows); the autotuner and the forcing work on it as on a
     * linear. */
    qrt_linear all;
    memset(&all, 0, sizeof all);
    all.fmt = QRT_WF_NVFP4, all.n = tile_begin[count] * 16, all.k = K, all.data = g->fused, all.scale2 = 1.0f;
    all.name = "fused group";
    fp4_segments seg;
    memset(&seg, 0, sizeof seg);
    for (int i = 0; i < g->n; i++) {
        if (!in_fused[i]) {
            matmul_with(form, g->part[i], x, T, y[i]);
            continue;
        }
        const int j = seg.count++;
        seg.tile_begin[j] = tile_begin[j];
        seg.rows[j] = g->part[i]->n;
        seg.scale2[j] = g->part[i]->scale2;
        seg.y[j] = y[i];
    }
    seg.tile_begin[seg.count] = tile_begin[count];
    fp4_launch(form, -1, &all, (const uint8_t *)g->fused, seg, K, x, T);
}
