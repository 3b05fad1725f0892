/* The backend interface: one function pointer per op, explicit pointers and dimensions.
 * model/forward.c writes the forward pass once against this table; the CPU backend is the reference and the
 * CUDA backend implements the same ops. Pointers are backend memory (host memory on the CPU).
 * Activations are f32. Shapes use the letters of util/common.h. A backend may also record a run of ops
 * as a graph and replay it (the graph_* hooks at the end; CUDA graphs on the GPU, none on the CPU). */
#ifndef QRT_BACKEND_H
#define QRT_BACKEND_H
#include <stddef.h>

#include "backend/linear.h"
#include "qwenrt.h"

/* One attention layer's KV cache in backend memory. k and v hold C·Hkv·Dh elements of fmt (f32, bf16 or
 * e4m3); for QRT_KV_FP8, ks and vs hold one f32 scale per (position, kv head): x ≈ e4m3 · scale. */
typedef struct {
    int fmt;         /* QRT_KV_* */
    void *k, *v;     /* [C][Hkv][Dh] */
    float *ks, *vs;  /* [C][Hkv], FP8 only */
} qrt_kv;

/* Projections that read the same input x (GDN in_proj qkv|z|b|a, attention q|k|v, MLP gate|up), run as one op
 * so a backend can make them one launch. The parts stay ordinary linears, usable alone with matmul, except in a
 * gate|up group that prepare_group laid out in pairs (paired): then only matmul_group and matmul_swiglu read them. */
#define QRT_GROUP_MAX 4
typedef struct {
    int n;                          /* parts, 1..QRT_GROUP_MAX, all with the same K */
    qrt_linear *part[QRT_GROUP_MAX];
    void *fused; /* backend memory holding every part's rows when prepare_group laid them out together; NULL
                  * when the parts run one by one (the CPU, mixed formats) */
    int swiglu;  /* set before prepare_group: part 0 is an MLP's gate, part 1 its up (matmul_swiglu's input) */
    int paired;  /* set by prepare_group: gate and up rows interleaved for matmul_swiglu's one launch */
} qrt_linear_group;

/* Bytes per cached element of a QRT_KV_* format. */
static inline size_t qrt_kv_elem_bytes(int fmt) { return fmt == QRT_KV_F32 ? 4 : fmt == QRT_KV_BF16 ? 2 : 1; }

typedef struct qrt_backend {
    const char *name;
    void *(*alloc)(size_t bytes); /* zeroed; NULL + qrt_fail on failure */
    void (*free)(void *p);
    void (*copy)(void *dst, const void *src, size_t bytes); /* within backend memory */
    void (*zero)(void *p, size_t bytes);
    void (*upload)(void *dst, const void *host_src, size_t bytes);   /* host → backend memory */
    void (*download)(void *host_dst, const void *src, size_t bytes); /* backend memory → host */
    /* Bytes alloc could still hand out now: free device memory, or the host's available memory on the CPU. */
    size_t (*mem_available)(void);
    /* Tokens per forward piece of a long input (a multiple of 64, at most QRT_MAX_T): the CPU's matmul gains nothing
     * past a few hundred tokens, while a GPU's prefill matmuls through cuBLASLt (a weight dequantized once per piece)
     * reach the tensor cores' rate only at thousands. The piece is also the unit a prefill is cancelled at. */
    int prefill_piece;
    /* Called once per weight at load: move it into backend memory in the layout the backend's matmul wants
     * (the CPU reads the checkpoint's mapping in place and does nothing). */
    qrt_status (*prepare_linear)(qrt_linear *w);
    /* Called once per group at load, after prepare_linear of each part: may move the parts' rows into one
     * allocation (repointing each part's data and scales into it). */
    qrt_status (*prepare_group)(qrt_linear_group *g);

    /* out[t] = f32(E[ids[t]]) for a [V][D] embedding table; ids is host memory. */
    void (*embed)(const qrt_linear *E, const int32_t *ids, int T, float *out /* [T][D] */);
    /* y = x · Wᵀ */
    void (*matmul)(const qrt_linear *W, const float *x /* [T][K] */, int T, float *y /* [T][N] */);
    /* y[i] = x · part[i]ᵀ for every part, bit-identical to matmul on each part (y: host array of n pointers). */
    void (*matmul_group)(const qrt_linear_group *g, const float *x /* [T][K] */, int T,
                         float *const *y /* y[i]: [T][N_i] */);
    /* y = silu(x · gateᵀ) · (x · upᵀ) for a swiglu group {gate, up}, bit-identical to matmul_group then swiglu; up
     * [T][N] is scratch the op may use. NULL: the model calls those two. */
    void (*matmul_swiglu)(const qrt_linear_group *g, const float *x /* [T][K] */, int T, float *y /* [T][N] */,
                          float *up /* [T][N] */);
    /* y = x · rsqrt(mean(x²) + eps) · w, per row of n; w already holds (1 + w) for zero-centred norms. */
    void (*rmsnorm)(const float *x, const float *w /* [n] */, int rows, int n, float eps, float *y);
    /* The residual add and the next norm in one pass: h += y, then x = rmsnorm(h) · w, per row of n. Bit-identical
     * to add followed by rmsnorm (each element of h is summed once, the norm reads the sum as stored). */
    void (*add_rmsnorm)(float *h /* [rows][n] */, const float *y /* [rows][n] */, const float *w /* [n] */, int rows,
                        int n, float eps, float *x /* [rows][n] */);
    /* Causal depthwise conv over Ck taps then SiLU. state holds the Ck-1 previous raw inputs (oldest first)
     * and is advanced by the T new ones. y is not x (the GPU reads a token's inputs after others' outputs are out). */
    void (*conv1d_silu)(const float *x /* [T][ch] */, float *state /* [Ck-1][ch] */, const float *w /* [ch][Ck] */,
                        int T, int ch, int Ck, float *y /* [T][ch] */);
    /* Gated DeltaNet core for T tokens from state S_in, then its output norm. qkv: [T][Hk·Dk | Hk·Dk | Hv·Dv] the conv
     * output, q and k raw (l2-normalised, q scaled, inside); a, b: [T][Hv] raw projections; A_log, dt_bias: [Hv].
     * Writes the advanced state to S [Hv][Dk][Dv] (S_in is S itself, or another state left as it was: a verify keeps
     * its start state that way, for the rollback) and o [T][Hv][Dv] = norm_w · (r · rsqrt(mean(r²) + eps)) · silu(z)
     * per head, r the recurrence's output. chunked selects the chunked (prefill) form. A token's arithmetic does not depend on T
     * (in the recurrent form): rollback re-runs the kept tokens and gets the same state bits. */
    void (*gdn)(const float *qkv, const float *a, const float *b, const float *A_log, const float *dt_bias,
                const float *S_in, float *S, int T, int Hk, int Hv, int Dk, int Dv, int chunked,
                const float *z /* [T][Hv][Dv] */, const float *norm_w /* [Dv] */, float eps, float *o);
    /* Attention's per-token preparation, one op. Per query head, the query half of q_proj's per-head
     * [query | gate] row is RMS-normed with q_norm and rotated in place (the gate half is left as it is); each key
     * row is RMS-normed with k_norm and rotated, and stored with its value row into the cache at positions
     * pos0.. (bf16 and e4m3 round to nearest even; FP8 scale = amax over Dh / 448, 1 for an all-zero row). RoPE is
     * rotate-half on the first R dims, token t at position pos0 + t, inv_freq = 1 / theta^(2i/R) in f32. */
    void (*attn_prep)(float *qg /* [T][Hq][2·Dh] */, const float *k /* [T][Hkv][Dh] */,
                      const float *v /* [T][Hkv][Dh] */, const float *q_norm /* [Dh] */, const float *k_norm /* [Dh] */,
                      float eps, const qrt_kv *kv, int T, int pos0, int Hq, int Hkv, int Dh, int R, double theta);
    /* Causal GQA attention of T queries at positions pos0.. over a cache holding pos0 + T entries, gated:
     * out = softmax(q·Kᵀ/√Dh)·V · sigmoid(gate), with q and gate the halves of qg's rows as attn_prep left them.
     * For T ≤ QRT_ATTN_SPLIT_MAX_T (decode, a verify) a token's result depends only on its position, never on T:
     * the same bits alone or in a batch. Longer calls (prefill pieces) may differ from those in the last bits. */
    void (*attention)(const float *qg /* [T][Hq][2·Dh] */, const qrt_kv *kv, int T, int pos0, int Hq, int Hkv, int Dh,
                      float *out /* [T][Hq][Dh] */);
    /* y = silu(g) · u */
    void (*swiglu)(const float *g, const float *u, size_t n, float *y);
    /* The greedy choice per row, on the backend so only 4 bytes per row need to come back: out[r] = qrt_argmax of row
     * r, the first index of its largest value; QRT_PICK_NONFINITE (-1) when the row holds a NaN or an infinity, so
     * that broken weights stop generation instead of emitting an arbitrary token. */
    void (*argmax)(const float *x /* [rows][n] */, int rows, int n, int32_t *out /* [rows] */);

    /* Graphs (NULL on backends without them). Between graph_begin and graph_end the ops are recorded, not run,
     * and while recording the two per-step inputs are read from the backend's step slot instead of the
     * arguments: embed's token ids (the host ids are not read; T must be ≤ QRT_GRAPH_MAX_T) and the position
     * pos0 of attn_prep and attention, whose grids are then sized for every position below max_pos. graph_launch
     * writes (pos, ids) into the slot and replays the graph, so one graph serves every position. Everything
     * else a recorded op is given (pointers, T, shapes) is baked into the graph: the caller keys its graphs on
     * those. Recording must not allocate or synchronize: run the same ops once unrecorded first (the NVFP4
     * autotuner and the grow-on-demand scratch buffers do their work on a shape's first call). Downloads go
     * after the replay, never inside. */
    int (*graph_begin)(int max_pos);  /* 1: recording; 0: cannot (error cleared), run the ops plainly */
    void *(*graph_end)(void);         /* the graph, ready to launch; NULL when recording failed */
    void (*graph_launch)(void *graph, int pos, const int32_t *ids, int T); /* T = 0: no step inputs */
    void (*graph_free)(void *graph);
    /* Changes whenever a device buffer that a recorded op may have baked in has moved (a grow-on-demand
     * scratch buffer reallocated): graphs recorded under another value must not be launched. */
    unsigned (*graph_epoch)(void);
} qrt_backend;

/* argmax's answer for a row whose logits hold a NaN or an infinity: no token is right then. */
#define QRT_PICK_NONFINITE (-1)

/* Most token ids a recorded forward reads from the step slot (decode T = 1, a verify T = K + 1 ≤ 17). */
#define QRT_GRAPH_MAX_T 32
/* The longest call whose attention is batch-invariant (see attention); at least QRT_GRAPH_MAX_T. */
#define QRT_ATTN_SPLIT_MAX_T 32

const qrt_backend *qrt_backend_cpu(void);
void qrt_cpu_set_threads(int n);
#endif
