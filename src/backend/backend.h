/* The backend interface: one function pointer per op, explicit pointers and dimensions, no graph.
 * model.c writes the forward pass once against this table; the CPU backend is the reference and the
 * CUDA backend implements the same ops. Pointers are backend memory (host memory on the CPU).
 * Activations are f32. Shapes use the letters of util/common.h. */
#ifndef QRT_BACKEND_H
#define QRT_BACKEND_H
#include "model/weights.h"

typedef struct qrt_backend {
    const char *name;
    void *(*alloc)(size_t bytes); /* zeroed; NULL + qrt_fail on failure */
    void (*free)(void *p);
    void (*copy)(void *dst, const void *src, size_t bytes); /* within backend memory */
    void (*zero)(void *p, size_t bytes);
    void (*upload)(void *dst, const void *host_src, size_t bytes);   /* host → backend memory */
    void (*download)(void *host_dst, const void *src, size_t bytes); /* backend memory → host */
    /* Called once per weight at load: move it into backend memory in the layout the backend's matmul wants
     * (the CPU reads the checkpoint's mapping in place and does nothing). */
    qrt_status (*prepare_linear)(qrt_linear *w);

    /* out[t] = f32(E[ids[t]]) for a [V][D] embedding table; ids is host memory. */
    void (*embed)(const qrt_linear *E, const int32_t *ids, int T, float *out /* [T][D] */);
    /* y = x · Wᵀ */
    void (*matmul)(const qrt_linear *W, const float *x /* [T][K] */, int T, float *y /* [T][N] */);
    /* y = x · rsqrt(mean(x²) + eps) · w, per row of n; w already holds (1 + w) for zero-centred norms. */
    void (*rmsnorm)(const float *x, const float *w /* [n] */, int rows, int n, float eps, float *y);
    /* Gated DeltaNet output norm: y = w · (x · rsqrt(mean(x²) + eps)) · silu(z), per row of n. */
    void (*rmsnorm_gated)(const float *x, const float *z, const float *w /* [n] */, int rows, int n, float eps,
                          float *y);
    /* Causal depthwise conv over Ck taps then SiLU. state holds the Ck-1 previous raw inputs (oldest first)
     * and is advanced by the T new ones. */
    void (*conv1d_silu)(const float *x /* [T][ch] */, float *state /* [Ck-1][ch] */, const float *w /* [ch][Ck] */,
                        int T, int ch, int Ck, float *y /* [T][ch] */);
    /* Gated DeltaNet core for T tokens from state S. qkv: [T][Hk·Dk | Hk·Dk | Hv·Dv] the conv output, q and k
     * raw (l2-normalised, q scaled, inside); a, b: [T][Hv] raw projections; A_log, dt_bias: [Hv]. Writes
     * o [T][Hv][Dv] and advances S [Hv][Dk][Dv]. chunked selects the chunked (prefill) form. */
    void (*gdn)(const float *qkv, const float *a, const float *b, const float *A_log, const float *dt_bias, float *S,
                int T, int Hk, int Hv, int Dk, int Dv, int chunked, float *o);
    /* Rotate-half RoPE on the first R dims of each head, token t at position pos0 + t. */
    void (*rope)(float *x /* [T][H][Dh] */, int T, int H, int Dh, int R, double theta, int pos0);
    /* Causal GQA attention of T queries at positions pos0.. over a cache holding pos0 + T entries.
     * q: [T][Hq][Dh]; cache k, v: [C][Hkv][Dh]; out [T][Hq][Dh]. */
    void (*attention)(const float *q, const float *kc, const float *vc, int T, int pos0, int Hq, int Hkv, int Dh,
                      float *out);
    /* y = silu(g) · u */
    void (*swiglu)(const float *g, const float *u, size_t n, float *y);
    /* y = x · sigmoid(g) */
    void (*sigmoid_mul)(const float *x, const float *g, size_t n, float *y);
    /* y += x */
    void (*add)(float *y, const float *x, size_t n);
    /* Split rows of two halves: a[r] = x[r][0], b[r] = x[r][1] (e.g. q_proj's per-head [query | gate]). */
    void (*split_halves)(const float *x /* [R][2][n] */, size_t R, size_t n, float *a /* [R][n] */,
                         float *b /* [R][n] */);
} qrt_backend;

const qrt_backend *qrt_backend_cpu(void);
void qrt_cpu_set_threads(int n);
#endif
