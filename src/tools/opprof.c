/* The timed op table (opprof.h). Every wrapper calls the real op between begin() and end(category); while
 * recording is off it calls straight through. Function pointers carry no context, so the real table and the
 * totals are file-level state: one profiled backend per process, which is all qwenrt bench needs. */
#include "tools/opprof.h"

#include <string.h>

#include "util/common.h"

static const qrt_backend *real;
static qrt_backend timed;
static int recording, on_cuda;
static double host_t0;
static qrt_opprof_result totals;

static const char *const cat_names[QRT_OPCAT_COUNT] = {"W4A16 GEMM", "BF16 GEMV", "FP8 GEMM", "GDN",
                                                      "conv1d", "attention", "other"};
const char *qrt_opcat_name(int cat) { return cat >= 0 && cat < QRT_OPCAT_COUNT ? cat_names[cat] : "?"; }

static void begin(void) {
#ifdef QRT_HAVE_CUDA
    if (on_cuda) {
        qrt_opprof_cuda_begin();
        return;
    }
#endif
    host_t0 = qrt_now_ms();
}

static void end(int cat, uint64_t bytes) {
#ifdef QRT_HAVE_CUDA
    if (on_cuda) qrt_opprof_cuda_end(cat);
    else
#endif
        totals.ms[cat] += qrt_now_ms() - host_t0;
    totals.calls[cat]++;
    totals.bytes[cat] += bytes;
}

/* Run `call` timed as category cat (with bytes) when recording, plainly otherwise. */
#define TIMED(cat, bytes, call)     \
    do {                            \
        if (!recording) {           \
            call;                   \
            return;                 \
        }                           \
        begin();                    \
        call;                       \
        end((cat), (bytes));        \
    } while (0)

static int matmul_cat(const qrt_linear *W) {
    switch (W->fmt) {
    case QRT_WF_NVFP4: return QRT_OPCAT_W4A16;
    case QRT_WF_FP8B: return QRT_OPCAT_FP8;
    default: return QRT_OPCAT_DENSE;
    }
}

static void t_copy(void *d, const void *s, size_t n) { TIMED(QRT_OPCAT_OTHER, 0, real->copy(d, s, n)); }
static void t_zero(void *p, size_t n) { TIMED(QRT_OPCAT_OTHER, 0, real->zero(p, n)); }
static void t_upload(void *d, const void *s, size_t n) { TIMED(QRT_OPCAT_OTHER, 0, real->upload(d, s, n)); }
static void t_download(void *d, const void *s, size_t n) { TIMED(QRT_OPCAT_OTHER, 0, real->download(d, s, n)); }
static void t_embed(const qrt_linear *E, const int32_t *ids, int T, float *out) {
    TIMED(QRT_OPCAT_OTHER, 0, real->embed(E, ids, T, out));
}
static void t_matmul(const qrt_linear *W, const float *x, int T, float *y) {
    TIMED(matmul_cat(W), qrt_linear_bytes(W), real->matmul(W, x, T, y));
}
/* A group is one op on the GPU (one launch for its NVFP4 parts): timed as one, in its first part's category. */
static uint64_t group_bytes(const qrt_linear_group *g) {
    uint64_t bytes = 0;
    for (int i = 0; i < g->n; i++) bytes += qrt_linear_bytes(g->part[i]);
    return bytes;
}
static void t_matmul_group(const qrt_linear_group *g, const float *x, int T, float *const *y) {
    TIMED(matmul_cat(g->part[0]), group_bytes(g), real->matmul_group(g, x, T, y));
}
static void t_matmul_swiglu(const qrt_linear_group *g, const float *x, int T, float *y, float *up) {
    TIMED(matmul_cat(g->part[0]), group_bytes(g), real->matmul_swiglu(g, x, T, y, up));
}
static void t_rmsnorm(const float *x, const float *w, int rows, int n, float eps, float *y) {
    TIMED(QRT_OPCAT_OTHER, 0, real->rmsnorm(x, w, rows, n, eps, y));
}
static void t_add_rmsnorm(float *h, const float *y, const float *w, int rows, int n, float eps, float *x) {
    TIMED(QRT_OPCAT_OTHER, 0, real->add_rmsnorm(h, y, w, rows, n, eps, x));
}
static void t_conv1d_silu(const float *x, float *state, const float *w, int T, int ch, int Ck, float *y) {
    TIMED(QRT_OPCAT_CONV, 0, real->conv1d_silu(x, state, w, T, ch, Ck, y));
}
static void t_gdn(const float *qkv, const float *a, const float *b, const float *A_log, const float *dt_bias,
                  const float *S_in, float *S, int T, int Hk, int Hv, int Dk, int Dv, int chunked, const float *z,
                  const float *norm_w, float eps, float *o) {
    TIMED(QRT_OPCAT_GDN, 0,
          real->gdn(qkv, a, b, A_log, dt_bias, S_in, S, T, Hk, Hv, Dk, Dv, chunked, z, norm_w, eps, o));
}
static void t_attn_prep(float *qg, const float *k, const float *v, const float *q_norm, const float *k_norm, float eps,
                        const qrt_kv *kv, int T, int pos0, int Hq, int Hkv, int Dh, int R, double theta) {
    TIMED(QRT_OPCAT_ATTN, 0, real->attn_prep(qg, k, v, q_norm, k_norm, eps, kv, T, pos0, Hq, Hkv, Dh, R, theta));
}
static void t_attention(const float *qg, const qrt_kv *kv, int T, int pos0, int Hq, int Hkv, int Dh, float *out) {
    TIMED(QRT_OPCAT_ATTN, 0, real->attention(qg, kv, T, pos0, Hq, Hkv, Dh, out));
}
static void t_swiglu(const float *g, const float *u, size_t n, float *y) {
    TIMED(QRT_OPCAT_OTHER, 0, real->swiglu(g, u, n, y));
}
static void t_argmax(const float *x, int rows, int n, int32_t *out) {
    TIMED(QRT_OPCAT_OTHER, 0, real->argmax(x, rows, n, out));
}

const qrt_backend *qrt_opprof_backend(const qrt_backend *r) {
    real = r;
    on_cuda = !strcmp(r->name, "cuda");
    timed = *r; /* alloc, free, prepare_linear and prepare_group pass through untimed */
    timed.copy = t_copy, timed.zero = t_zero, timed.upload = t_upload, timed.download = t_download;
    timed.embed = t_embed, timed.matmul = t_matmul, timed.rmsnorm = t_rmsnorm;
    timed.conv1d_silu = t_conv1d_silu, timed.gdn = t_gdn, timed.attn_prep = t_attn_prep, timed.attention = t_attention;
    if (r->matmul_group) timed.matmul_group = t_matmul_group; /* model/forward.c loops over the parts without it */
    if (r->matmul_swiglu) timed.matmul_swiglu = t_matmul_swiglu; /* ... and calls matmul_group, swiglu */
    timed.swiglu = t_swiglu, timed.add_rmsnorm = t_add_rmsnorm, timed.argmax = t_argmax;
    /* each op is timed on its own: no graphs (a replay would run the ops without calling these wrappers) */
    timed.graph_begin = NULL, timed.graph_end = NULL, timed.graph_launch = NULL, timed.graph_free = NULL;
    timed.graph_epoch = NULL;
    return &timed;
}

void qrt_opprof_start(void) {
    memset(&totals, 0, sizeof totals);
    recording = 1;
}

void qrt_opprof_stop(qrt_opprof_result *r) {
    recording = 0;
#ifdef QRT_HAVE_CUDA
    if (on_cuda) qrt_opprof_cuda_collect(totals.ms);
#endif
    *r = totals;
}
