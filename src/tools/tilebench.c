/* qwenrt tilebench: every matmul kernel on every matmul shape of a model, at decode and prefill token counts,
 * against the read bandwidth measured in the same run, and which kernel the autotuner picks.
 *
 * Shapes come from a config (a preset or DIR/config.json), not a hard-coded list: the grouped projections the
 * model runs as one launch (GDN in_proj q|k|v|z|b|a, attention q|k|v, MLP gate|up) are timed as one matrix of
 * their stacked rows, the others (GDN out, attention o, MLP down, lm_head, MTP fc) alone.
 *
 * Method (docs/benchmarks.md): weights are random (finite values of the format) made on the host and
 * handed to the backend's prepare_linear, so every kernel reads the layout the model's weights have. Each shape
 * gets enough copies that one pass over them is at least 4x the last-level cache (L2 on the GPU, L3 on the
 * CPU), and the launches rotate over the copies, so no launch reads a weight the last one left in cache. On the
 * GPU, after the warmups, TB_GRAPH_LAUNCHES or more launches (one pass over the copies at least) are recorded
 * back to back in one CUDA graph, as the decode loop runs them, and each replay is timed with CUDA events: a
 * launch's time is the replay's over the launches, the median of the replays is reported. (Timed one at a time,
 * a launch also pays the host's launch gap, in which the GPU idles: 3-8 µs, a third of a 20 µs kernel; the decode
 * loop never pays it. --timing launch measures that way.) On the CPU each launch is timed alone (the monotonic
 * clock) after warmups; the median is reported. A cell (shape, format, M, kernel) gets reps = clamp(--cell-ms / first
 * time, 3, --reps), which keeps the slow cells (prefill sizes) from dominating the run. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model/model.h"
#include "tools/membw.h"
#include "tools/synthetic.h"
#include "tools/tools.h"
#include "util/mix64.h"
#ifdef QRT_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "tools/tilebench.h"
#endif

static const char *usage =
    "usage: qwenrt tilebench [--device auto|cpu|cuda] [--preset tiny|qwen3.6-27b | -m DIR] [--shapes LIST]\n"
    "                        [--formats nvfp4,bf16,fp8] [--m 1,2,4,7,8,16,64,256 | --full-m] [--reps 20]\n"
    "                        [--variants LIST] [--cell-ms 20] [--timing graph|launch] [--threads N]\n"
    "                        [--json FILE]\n"
    "\n"
    "Times every matmul kernel on every matmul shape of a model at M tokens per call, against the read\n"
    "bandwidth measured in the same run. Weights are random; only their shapes and formats matter.\n"
    "  --device D     cuda, cpu, or auto (default: cuda when this build has CUDA and a GPU is present)\n"
    "  --preset P     the shapes of a preset model (default: qwen3.6-27b on the GPU, tiny on the CPU)\n"
    "  -m DIR         the shapes of DIR/config.json instead (no weights are read)\n"
    "  --shapes LIST  only these shapes: gdn_in (GDN in_proj q|k|v|z|b|a stacked), gdn_out, attn_qkv\n"
    "                 (q|k|v stacked), attn_o, mlp_gate_up (gate|up stacked), mlp_down, lm_head, mtp_fc\n"
    "  --formats LIST weight formats to time (default: nvfp4,bf16 on the GPU, the formats of the NVFP4\n"
    "                 checkpoints' main layers (add fp8 for their MTP head); bf16,nvfp4,fp8 on the CPU).\n"
    "                 NVFP4 on the GPU: every variant of the CUDA backend that runs its own kernel at\n"
    "                 that M (not those that would run mma_w1 in its place), the autotuner's pick marked;\n"
    "                 otherwise the backend's matmul (one kernel per format). On the GPU also, from M = 33,\n"
    "                 'cublasLt' (the prefill path, matmul_blas.cu: x to bf16, the weight dequantized to\n"
    "                 bf16 unless it is BF16, the library GEMM; timed launch by launch), for NVFP4 from\n"
    "                 M = 17 'fp4pf', 'fp4pf_f16' and 'fp4pf3' (the prefill kernel mma_pf, matmul_fp4_prefill.cu,\n"
    "                 x as f16 hi + lo, as f16, as f16 in 128-token pipelined blocks: what QRT_FP4_PREFILL=1, 2\n"
    "                 or 3 runs), and for BF16/FP8\n"
    "                 every tensor-core variant (F16: 'hand', the decode kernel at any M); 'pick' marks\n"
    "                 what the model runs at that M.\n"
    "  --variants LIST GPU, NVFP4: time only these variants (names as listed, e.g. mma_cl12x2,mma_ck8x2e); the\n"
    "                 pick is still the autotuner's, '-' in the summary where it is not named. Under a profiler,\n"
    "                 set QRT_NVFP4_VARIANT too (or keep a tune cache), so the tuner launches nothing else\n"
    "  --m LIST       tokens per call (1..8192; default 1,2,4,7,8,16,64,256: decode, the verify of K = 6 at\n"
    "                 7, and prefill pieces)\n"
    "  --full-m       M = 1..16 (every speculative verify size) plus 64 and 256\n"
    "  --reps N       at most N timed launches per cell (3..1000, default 20) after the warmups (3 on the\n"
    "                 GPU, 1 on the CPU); on the GPU a rep is one replay of the cell's graph\n"
    "  --cell-ms MS   time budget per cell: reps = clamp(MS / first rep's time, 3, N) (default 20)\n"
    "  --timing T     GPU: graph (default: the launches back to back in a CUDA graph, as decode runs them;\n"
    "                 ms = replay time / launches) or launch (each launch alone between two events, which\n"
    "                 adds the host's launch gap)\n"
    "  --threads N    CPU threads (default: OpenMP's)\n"
    "  --json FILE    every cell as JSON (docs/bench-schema.md)\n"
    "columns: ms = median time of one launch (see --timing); GB/s = weight bytes (codes + scales, FP8 scales as f32) / ms,\n"
    "  the effective bandwidth of docs/benchmarks.md (activations not counted: at prefill sizes the kernels are\n"
    "  compute-bound and this is a lower bound); %read = GB/s as a percentage of the read bandwidth measured\n"
    "  at the start (a streaming read of 2 GiB on the GPU, 256 MiB on the host); GFLOP/s = 2·N·K·M / ms;\n"
    "  'pick' = the kernel the model runs for this shape and M (the NVFP4 autotuner's choice on the GPU).\n"
    "Before the run it prints an estimate of the run time; exit status 0, 1 (error), 2 (bad arguments).\n";

#define TB_MAX_M 32
#define TB_MAX_SHAPES 8
#define TB_MAX_COPIES 32
#define TB_MAX_KERNELS 64
#define TB_MAX_T 8192 /* the largest prefill piece a model may be configured for */
#define TB_GRAPH_LAUNCHES 8 /* at least this many launches per recorded graph */

static const char *const format_words[] = {"bf16", "nvfp4", "fp8"};
static const qrt_wformat format_of_word[] = {QRT_WF_BF16, QRT_WF_NVFP4, QRT_WF_FP8B};
static const char *const shape_words[] = {"gdn_in", "gdn_out", "attn_qkv", "attn_o", "mlp_gate_up", "mlp_down",
                                          "lm_head", "mtp_fc"};

typedef struct {
    int id;                /* index into shape_words */
    const char *parts;     /* what the rows are */
    int64_t n, k;
    int per_token;         /* matmuls of this shape per token of the main model */
    int per_mtp_step;      /* ... per MTP draft step */
} tb_shape;

typedef struct {
    /* options */
    const char *device, *preset, *dir, *json_path;
    int shape_on[TB_MAX_SHAPES], shapes_given;
    int fmt[3], n_fmt;
    int m[TB_MAX_M], n_m, reps, threads;
    double cell_ms;
    int launch_timing; /* --timing launch */
    /* state */
    int gpu, warmups;
    const char *variants; /* --variants, checked once the device is known */
    int variant_on[TB_MAX_KERNELS];
    const qrt_backend *be;
    qrt_config cfg;
    tb_shape shapes[TB_MAX_SHAPES];
    int n_shapes;
    size_t cache_bytes;
    double peak_gbs;
    json_t *results, *skipped;
} tilebench;

/* ---- options ------------------------------------------------------------------------------------- */

/* A comma-separated list of words into on[] (1 for each word named); 0 after a message. */
static int parse_words(const char *flag, const char *s, const char *const *words, int n_words, int *on) {
    char buf[256];
    if (strlen(s) >= sizeof buf || !*s) {
        fprintf(stderr, "qwenrt tilebench: %s expects a comma-separated list, got '%s'\n", flag, s);
        return 0;
    }
    snprintf(buf, sizeof buf, "%s", s);
    int n = 0;
    for (char *save = NULL, *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save), n++) {
        int i = qrt_tool_word("tilebench", flag, w, words, n_words);
        if (i < 0) return 0;
        on[i] = 1;
    }
    if (!n) fprintf(stderr, "qwenrt tilebench: %s names nothing, got '%s'\n", flag, s);
    return n > 0;
}

static int set_full_m(tilebench *b) {
    b->n_m = 0;
    for (int m = 1; m <= 16; m++) b->m[b->n_m++] = m;
    b->m[b->n_m++] = 64;
    b->m[b->n_m++] = 256;
    return 1;
}

static int parse_value(tilebench *b, const char *a, const char *v) {
    if (!strcmp(a, "--device")) return b->device = v, 1;
    if (!strcmp(a, "--preset")) return b->preset = v, 1;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) return b->dir = v, 1;
    if (!strcmp(a, "--json")) return b->json_path = v, 1;
    if (!strcmp(a, "--variants")) return b->variants = v, 1;
    if (!strcmp(a, "--shapes")) return b->shapes_given = 1, parse_words(a, v, shape_words, TB_MAX_SHAPES, b->shape_on);
    if (!strcmp(a, "--m")) return qrt_tool_int_list("tilebench", a, v, 1, TB_MAX_T, TB_MAX_M, b->m, &b->n_m);
    if (!strcmp(a, "--reps")) return qrt_tool_int("tilebench", a, v, 3, 1000, &b->reps);
    if (!strcmp(a, "--threads")) return qrt_tool_int("tilebench", a, v, 1, 4096, &b->threads);
    if (!strcmp(a, "--cell-ms")) return qrt_tool_number("tilebench", a, v, 0, 60000, &b->cell_ms);
    if (!strcmp(a, "--timing")) {
        static const char *const timing_words[] = {"graph", "launch"};
        const int i = qrt_tool_word("tilebench", a, v, timing_words, 2);
        return i < 0 ? 0 : (b->launch_timing = i, 1);
    }
    if (!strcmp(a, "--formats")) {
        int on[3] = {0};
        if (!parse_words(a, v, format_words, 3, on)) return 0;
        b->n_fmt = 0;
        for (int i = 0; i < 3; i++)
            if (on[i]) b->fmt[b->n_fmt++] = i;
        return 1;
    }
    fprintf(stderr, "qwenrt tilebench: unknown option '%s' (see qwenrt tilebench --help)\n", a);
    return 0;
}

static int parse(int argc, char **argv, tilebench *b) {
    static const int default_m[] = {1, 2, 4, 7, 8, 16, 64, 256};
    b->n_m = (int)(sizeof default_m / sizeof default_m[0]);
    memcpy(b->m, default_m, sizeof default_m);
    b->reps = 20, b->cell_ms = 20, b->device = "auto";
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--full-m")) set_full_m(b);
        else if (!v) return fprintf(stderr, "qwenrt tilebench: unknown option or missing value: '%s' (see --help)\n", a), 0;
        else if (!parse_value(b, a, argv[++i])) return 0;
    }
    if (b->dir && b->preset)
        return fprintf(stderr, "qwenrt tilebench: give --preset P or -m DIR, not both\n"), 0;
    return 1;
}

/* ---- shapes -------------------------------------------------------------------------------------- */

static void add_shape(tilebench *b, int id, const char *parts, int64_t n, int64_t k, int per_token, int per_mtp) {
    if (b->shapes_given && !b->shape_on[id]) return;
    if (n <= 0 || k <= 0) return; /* a config without that kind of layer */
    b->shapes[b->n_shapes++] = (tb_shape){id, parts, n, k, per_token, per_mtp};
}

/* Every matmul shape the forward pass (and the MTP head, one full-attention layer) runs. */
static void shapes_of_config(tilebench *b) {
    const qrt_config *c = &b->cfg;
    const int64_t D = c->hidden, F = c->intermediate, Hv = c->gdn_v_heads, vdim = Hv * c->gdn_dv;
    const int64_t conv = 2 * (int64_t)c->gdn_k_heads * c->gdn_dk + vdim;
    const int64_t Dh = c->head_dim, Hq = c->n_heads, Hkv = c->n_kv_heads;
    const int n_lin = c->n_layers - c->n_full, mtp = c->mtp_layers > 0;
    if (n_lin) {
        add_shape(b, 0, "in_proj_qkv | z | b | a", conv + vdim + 2 * Hv, D, n_lin, 0);
        add_shape(b, 1, "linear_attn.out_proj", D, vdim, n_lin, 0);
    }
    add_shape(b, 2, "q_proj (query | gate) | k_proj | v_proj", Hq * 2 * Dh + 2 * Hkv * Dh, D, c->n_full, mtp);
    add_shape(b, 3, "self_attn.o_proj", D, Hq * Dh, c->n_full, mtp);
    add_shape(b, 4, "gate_proj | up_proj", 2 * F, D, c->n_layers, mtp);
    add_shape(b, 5, "down_proj", D, F, c->n_layers, mtp);
    add_shape(b, 6, "lm_head", c->vocab, D, 1, mtp);
    if (mtp) add_shape(b, 7, "mtp.fc", D, 2 * D, 0, 1);
}

/* ---- random weights ------------------------------------------------------------------------------ */

typedef enum { FILL_BYTES, FILL_FP8, FILL_BF16 } fill_kind;

/* words 64-bit words of finite values: any byte (E2M1 codes: every nibble is a number), e4m3 with exponents
 * 2^-3..2^0 (never NaN), or BF16 in ±[2^-7, 2) (never NaN or subnormal: the CPU would slow down on those). */
static void fill_words(uint64_t *p, size_t words, fill_kind kind, uint64_t seed) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < words; i++) {
        uint64_t z = qrt_mix64(seed + (i + 1) * QRT_MIX64_STEP);
        if (kind == FILL_FP8) z = (z & 0x8080808080808080ull) | ((z & 0x1f1f1f1f1f1f1f1full) + 0x2020202020202020ull);
        else if (kind == FILL_BF16)
            z = (z & 0x807f807f807f807full) | ((((z >> 7) & 0x0007000700070007ull) << 7) + 0x3c003c003c003c00ull);
        p[i] = z;
    }
}

static void *alloc_filled(size_t bytes, fill_kind kind, uint64_t seed) {
    const size_t words = (bytes + 7) / 8;
    uint64_t *p = qrt_alloc_aligned(words * 8);
    if (p) fill_words(p, words, kind, seed);
    return p;
}

/* The copies of one shape in one format, each through prepare_linear. host[c] is the host buffer copy c
 * reads when the backend reads weights in place (the CPU), NULL when the backend took its own copy. */
typedef struct {
    qrt_linear w[TB_MAX_COPIES];
    void *host_data[TB_MAX_COPIES], *host_scales[TB_MAX_COPIES];
    int copies;
    uint64_t bytes; /* of one copy, as the matmul reads it */
} tb_weights;

static void free_weights(const tilebench *b, tb_weights *W) {
    for (int c = 0; c < W->copies; c++) {
        if (W->host_data[c]) free(W->host_data[c]), free(W->host_scales[c]);
        else b->be->free((void *)W->w[c].data), b->be->free((void *)W->w[c].scales);
    }
    W->copies = 0;
}

/* Host buffers of one [n, k] weight in fmt. */
static int host_weight(qrt_linear *w, uint64_t seed) {
    const size_t n = (size_t)w->n, k = (size_t)w->k;
    float *fs = NULL;
    if (w->fmt == QRT_WF_NVFP4) {
        w->data = alloc_filled(n * k / 2, FILL_BYTES, seed);
        w->scales = qrt_alloc_aligned(n * k / 16);
        if (w->scales) memset((void *)w->scales, 0x38, n * k / 16); /* e4m3 1.0 */
        w->scale2 = 1.0f / 448.0f;
    } else if (w->fmt == QRT_WF_FP8B) {
        const size_t blocks = (size_t)QRT_CEIL_DIV(w->n, 128) * (size_t)QRT_CEIL_DIV(w->k, 128);
        w->data = alloc_filled(n * k, FILL_FP8, seed);
        w->scales = fs = qrt_alloc_aligned(sizeof(float) * blocks);
        for (size_t i = 0; fs && i < blocks; i++) fs[i] = 1.0f / (float)k;
    } else w->data = alloc_filled(n * k * 2, FILL_BF16, seed);
    return w->data && (w->fmt == QRT_WF_BF16 || w->scales);
}

/* Enough copies that a pass over them is ≥ 4x the cache; on failure the status of qrt_last_error(). */
static qrt_status make_weights(const tilebench *b, const tb_shape *s, qrt_wformat fmt, tb_weights *W) {
    memset(W, 0, sizeof *W);
    qrt_linear proto = {.fmt = fmt, .n = s->n, .k = s->k, .name = shape_words[s->id]};
    W->bytes = qrt_linear_bytes(&proto);
    int copies = (int)((4 * b->cache_bytes + W->bytes - 1) / W->bytes);
    copies = copies < 1 ? 1 : copies > TB_MAX_COPIES ? TB_MAX_COPIES : copies;
    qrt_linear host = proto;
    for (int c = 0; c < copies; c++) {
        if (!host.data && !host_weight(&host, 1000 + (uint64_t)c)) {
            free((void *)host.data), free((void *)host.scales);
            free_weights(b, W);
            return qrt_fail(QRT_ERR_MEMORY, "cannot allocate %.1f MB of host memory for %s", W->bytes / 1e6,
                            proto.name);
        }
        W->w[c] = host;
        qrt_status st = b->be->prepare_linear(&W->w[c]);
        if (st != QRT_OK) {
            free((void *)host.data), free((void *)host.scales);
            free_weights(b, W);
            return st;
        }
        W->copies = c + 1;
        if (W->w[c].data == host.data) { /* read in place: this copy keeps the buffer, the next draws its own */
            W->host_data[c] = (void *)host.data, W->host_scales[c] = (void *)host.scales;
            host.data = host.scales = NULL;
        }
    }
    free((void *)host.data), free((void *)host.scales); /* the backend copied it: the host buffer is done */
    return QRT_OK;
}

/* ---- timing -------------------------------------------------------------------------------------- */

/* Kernels besides the NVFP4 variants (>= 0): the backend's matmul, and on the GPU the cuBLASLt path and the hand
 * kernels called directly. */
#define TB_MATMUL (-1)
#define TB_BLAS (-2)
#define TB_HAND (-3)
#define TB_BLAS_MIN_M 33 /* QRT_GRAPH_MAX_T + 1: the path never runs below */
#define TB_PF(form) (-3 - (form)) /* NVFP4 prefill kernel mma_pf in form 1..3 (what QRT_FP4_PREFILL=form runs): */
#define TB_PF_HILO TB_PF(1)       /* x as f16 hi + lo */
#define TB_PF_F16 TB_PF(2)        /* x as f16 */
#define TB_PF3 TB_PF(3)           /* the same arithmetic in 128-token blocks, pipelined */
#define TB_PF_MIN_M 17            /* timed from here, past mma_gemm's first 16-token pass (the model runs it from 33) */

/* A kernel: an NVFP4 or BF16/FP8 tensor-core variant of the CUDA backend (>= 0, by the weight's format), or one of the
 * TB_ kernels above. */
typedef struct {
    const qrt_backend *be;
    int variant;
    const qrt_linear *w;
    const float *x;
    int T;
    float *y;
} tb_launch;

#ifdef QRT_HAVE_CUDA
/* The mma_pf form kernel v runs (1..3), or 0 where v is not a TB_PF kernel. */
static int tb_pf_form(int v) { return v <= TB_PF(1) && v >= TB_PF(3) ? -3 - v : 0; }
#endif

static void launch(void *p) {
    const tb_launch *l = p;
#ifdef QRT_HAVE_CUDA
    if (l->variant >= 0 && l->w->fmt != QRT_WF_NVFP4) {
        qrt_dense_mma_variant(l->variant, l->w, l->x, l->T, l->y);
        return;
    }
    if (l->variant >= 0) {
        qrt_nvfp4_matmul_variant(l->variant, l->w, l->x, l->T, l->y);
        return;
    }
    if (l->variant == TB_BLAS) {
        qrt_cuda_matmul_blas(l->w, l->x, l->T, l->y);
        return;
    }
    if (l->variant == TB_HAND) {
        qrt_cuda_matmul_hand(l->w, l->x, l->T, l->y);
        return;
    }
    if (tb_pf_form(l->variant)) {
        qrt_cuda_matmul_fp4_prefill(l->w, l->x, l->T, l->y, tb_pf_form(l->variant));
        return;
    }
#endif
    l->be->matmul(l->w, l->x, l->T, l->y);
}

static int time_launch(const tilebench *b, tb_launch *l, double *ms) {
#ifdef QRT_HAVE_CUDA
    if (b->gpu) return qrt_tilebench_cuda_time(launch, l, ms);
#endif
    double t0 = qrt_now_ms();
    launch(l);
    *ms = qrt_now_ms() - t0;
    return 0;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, c = *(const double *)y;
    return a < c ? -1 : a > c;
}

/* The cell's launches over the copies, recorded into one graph: n of them, at least one pass over the copies.
 * NULL when the backend cannot record (the caller times launches alone). */
typedef struct {
    const qrt_backend *be;
    void *graph;
} tb_replay;


static void *record_cell(const tilebench *b, tb_weights *W, tb_launch *l, int *n) {
    if (!b->be->graph_begin || !b->be->graph_begin(0)) return NULL;
    *n = QRT_MAX(TB_GRAPH_LAUNCHES, W->copies);
    for (int i = 0; i < *n; i++) {
        l->w = &W->w[i % W->copies];
        launch(l);
    }
    return b->be->graph_end();
}

#ifdef QRT_HAVE_CUDA
static void replay(void *p) {
    const tb_replay *r = p;
    r->be->graph_launch(r->graph, 0, NULL, 0);
}
#endif

/* One rep: a replay of the graph (ms per launch), or one launch alone. */
static int time_rep(const tilebench *b, tb_launch *l, tb_replay *rp, int n, double *ms) {
#ifdef QRT_HAVE_CUDA
    if (rp->graph) {
        if (qrt_tilebench_cuda_time(replay, rp, ms)) return 1;
        *ms /= n;
        return 0;
    }
#endif
    (void)rp, (void)n;
    return time_launch(b, l, ms);
}

/* Median ms of one kernel at T tokens, rotating over the copies; reps as the header comment says. */
static int time_cell(const tilebench *b, tb_weights *W, int variant, const float *x, float *y, int T, double *med,
                     int *reps_out) {
    tb_launch l = {b->be, variant, NULL, x, T, y};
    double ms[1000];
    int launches = 0;
    for (int i = 0; i < b->warmups; i++, launches++) { /* plain: the backend's first calls allocate and tune */
        l.w = &W->w[launches % W->copies];
        if (time_launch(b, &l, &ms[0])) return 0;
    }
    int n = 1;
    /* the cuBLASLt path is timed launch by launch: recording library calls into a graph is not what the model does
     * (prefill is never recorded), and at the M it runs at, a launch's host gap is a few % of its time */
    const int graph = b->gpu && !b->launch_timing && variant != TB_BLAS;
    tb_replay rp = {b->be, graph ? record_cell(b, W, &l, &n) : NULL};
    if (graph && !rp.graph)
        return fprintf(stderr, "qwenrt tilebench: recording the launches into a CUDA graph failed (try --timing "
                               "launch)\n"), 0;
    int reps = b->reps;
    for (int r = 0; r < reps; r++, launches++) {
        l.w = &W->w[launches % W->copies];
        if (time_rep(b, &l, &rp, n, &ms[r])) {
            if (rp.graph) b->be->graph_free(rp.graph);
            return 0;
        }
        if (r == 0 && ms[0] > 0 && b->cell_ms / (ms[0] * n) < reps) reps = QRT_MAX(3, (int)(b->cell_ms / (ms[0] * n)));
    }
    if (rp.graph) b->be->graph_free(rp.graph);
    qsort(ms, (size_t)reps, sizeof ms[0], cmp_double);
    *med = reps % 2 ? ms[reps / 2] : (ms[reps / 2 - 1] + ms[reps / 2]) / 2;
    *reps_out = reps;
    return 1;
}

/* ---- one shape in one format --------------------------------------------------------------------- */

/* The kernels to time (variant indices or TB_ kernels) and the one the model runs at T. */
static int kernels_of(const tilebench *b, qrt_wformat fmt, int *v) {
#ifdef QRT_HAVE_CUDA
    if (b->gpu) {
        int k = 0;
        if (fmt == QRT_WF_NVFP4) {
            const int n = QRT_MIN(qrt_nvfp4_variant_count(), TB_MAX_KERNELS - 4);
            for (int i = 0; i < n; i++)
                if (!b->variants || b->variant_on[i]) v[k++] = i;
            v[k++] = TB_PF_HILO;
            v[k++] = TB_PF_F16;
            v[k++] = TB_PF3;
        } else if (fmt == QRT_WF_BF16 || fmt == QRT_WF_FP8B) {
            const int n = QRT_MIN(qrt_dense_mma_variant_count(), TB_MAX_KERNELS - 1);
            for (int i = 0; i < n; i++) v[k++] = i;
        } else v[k++] = TB_HAND;
        v[k++] = TB_BLAS;
        return k;
    }
#endif
    v[0] = TB_MATMUL;
    return 1;
}

static int picked_kernel(const tilebench *b, const tb_weights *W, int T) {
#ifdef QRT_HAVE_CUDA
    const qrt_linear *w = &W->w[0];
    if (b->gpu && qrt_cuda_blas_takes(w->fmt, w->n * w->k, T)) return TB_BLAS;
    const int pf = b->gpu && w->fmt == QRT_WF_NVFP4 ? qrt_cuda_fp4_prefill_at(T) : 0;
    if (pf) return TB_PF(pf);
    if (b->gpu && w->fmt == QRT_WF_NVFP4) return qrt_nvfp4_pick(w, T);
    if (b->gpu && (w->fmt == QRT_WF_BF16 || w->fmt == QRT_WF_FP8B)) return qrt_dense_mma_pick(w->n, T);
    if (b->gpu) return TB_HAND;
#endif
    return TB_MATMUL;
}

/* Whether kernel v runs its own code at T on weight w (where it cannot, mma_w1 runs in its place: timing it would
 * list mma_w1's time under its name). */
static int kernel_runs(int v, int T, const qrt_linear *w) {
#ifdef QRT_HAVE_CUDA
    if (v >= 0 && w->fmt == QRT_WF_NVFP4) return qrt_nvfp4_variant_runs(v, T, w->n, w->k);
    if (v == TB_BLAS) return T >= TB_BLAS_MIN_M;
    if (tb_pf_form(v)) return T >= TB_PF_MIN_M;
#endif
    (void)T, (void)w;
    return 1;
}

static const char *kernel_name(qrt_wformat fmt, int v) {
#ifdef QRT_HAVE_CUDA
    if (v >= 0) return fmt == QRT_WF_NVFP4 ? qrt_nvfp4_variant_name(v) : qrt_dense_mma_variant_name(v);
#endif
    return v == TB_BLAS      ? "cublasLt"
           : v == TB_HAND    ? "hand"
           : v == TB_PF_HILO ? "fp4pf"
           : v == TB_PF_F16  ? "fp4pf_f16"
           : v == TB_PF3     ? "fp4pf3"
                             : "matmul";
}

typedef struct {
    double pick_pct[TB_MAX_M];    /* % of read of the picked kernel at each M, for the summary */
    double pick_tflops[TB_MAX_M]; /* and its TFLOP/s */
} tb_summary;

static void record(tilebench *b, const tb_shape *s, const char *fmt, const char *kernel, int T, double ms, int reps,
                   const tb_weights *W, int picked) {
    const double gbs = W->bytes / (ms * 1e-3) / 1e9, pct = 100 * gbs / b->peak_gbs;
    const double gflops = 2.0 * (double)s->n * (double)s->k * T / (ms * 1e-3) / 1e9;
    printf("%-12s %-6s %4d %-14s %10.4f %8.2f %6.1f%% %9.1f %4d%s\n", shape_words[s->id], fmt, T, kernel, ms, gbs, pct,
           gflops, reps, picked ? "  pick" : "");
    json_array_append_new(b->results,
                          json_pack("{s:s, s:s, s:s, s:i, s:o, s:o, s:o, s:o, s:I, s:i, s:i, s:b}", "shape",
                                    shape_words[s->id], "format", fmt, "kernel", kernel, "m", T, "ms",
                                    qrt_json_real(ms), "gbs", qrt_json_real(gbs), "pct_of_read", qrt_json_real(pct),
                                    "gflops", qrt_json_real(gflops), "weight_bytes", (json_int_t)W->bytes, "copies",
                                    W->copies, "reps", reps, "picked", picked));
}

/* Activations x [maxT][K] (random in [-1, 1)) and outputs y [maxT][N] in backend memory. */
static int make_io(const tilebench *b, const tb_shape *s, int maxT, float **x, float **y) {
    const size_t nx = (size_t)maxT * (size_t)s->k;
    float *hx = qrt_alloc_aligned(sizeof(float) * nx);
    *x = b->be->alloc(sizeof(float) * nx);
    *y = b->be->alloc(sizeof(float) * (size_t)maxT * (size_t)s->n);
    if (hx) {
        for (size_t i = 0; i < nx; i++) hx[i] = (float)(qrt_mix64(i + 77) >> 40) / 8388608.0f - 1.0f;
        if (*x) b->be->upload(*x, hx, sizeof(float) * nx);
    }
    free(hx);
    if (hx && *x && *y) return 1;
    b->be->free(*x), b->be->free(*y);
    return 0;
}

static int max_m(const tilebench *b) {
    int m = 1;
    for (int i = 0; i < b->n_m; i++) m = QRT_MAX(m, b->m[i]);
    return m;
}

/* Every kernel at every M on one shape in one format; 0 on an error (printed), 1 when done or skipped. */
static int run_shape_format(tilebench *b, const tb_shape *s, int fi, tb_summary *sum) {
    const char *fmt = format_words[fi];
    const qrt_wformat wf = format_of_word[fi];
    if (wf == QRT_WF_NVFP4 && s->k % 16) {
        json_array_append_new(b->skipped, json_pack("{s:s, s:s, s:s}", "shape", shape_words[s->id], "format", fmt,
                                                    "why", "NVFP4 needs K divisible by 16"));
        return 1;
    }
    tb_weights W;
    qrt_status st = make_weights(b, s, wf, &W);
    if (st != QRT_OK) {
        /* a format the backend has no matmul for is a skip (said once per shape), anything else an error */
        const int unsupported = st == QRT_ERR_UNSUPPORTED;
        fprintf(unsupported ? stdout : stderr, "%-12s %-6s %s: %s\n", shape_words[s->id], fmt,
                unsupported ? "skipped" : "error", qrt_last_error());
        json_array_append_new(b->skipped, json_pack("{s:s, s:s, s:s}", "shape", shape_words[s->id], "format", fmt,
                                                    "why", qrt_last_error()));
        return unsupported;
    }
    float *x = NULL, *y = NULL;
    int ok = make_io(b, s, max_m(b), &x, &y);
    if (!ok) fprintf(stderr, "qwenrt tilebench: %s: cannot allocate activations: %s\n", shape_words[s->id], qrt_last_error());
    int v[TB_MAX_KERNELS];
    const int nk = kernels_of(b, wf, v);
    for (int mi = 0; mi < b->n_m && ok; mi++) {
        const int T = b->m[mi], pick = picked_kernel(b, &W, T);
        for (int k = 0; k < nk && ok; k++) {
            if (!kernel_runs(v[k], T, &W.w[0])) continue;
            double ms;
            int reps;
            ok = time_cell(b, &W, v[k], x, y, T, &ms, &reps);
            if (!ok) break;
            record(b, s, fmt, kernel_name(wf, v[k]), T, ms, reps, &W, v[k] == pick);
            if (v[k] == pick) {
                sum->pick_pct[mi] = 100 * (W.bytes / (ms * 1e-3) / 1e9) / b->peak_gbs;
                sum->pick_tflops[mi] = 2.0 * (double)s->n * (double)s->k * T / (ms * 1e-3) / 1e12;
            }
        }
        fflush(stdout);
    }
    b->be->free(x), b->be->free(y);
    free_weights(b, &W);
    return ok;
}

/* ---- the run ------------------------------------------------------------------------------------- */

/* How a kernel's time grows with M, for the estimate: the tensor-core and dense kernels share each weight load
 * over 8+ tokens. */
static double growth(int M) { return QRT_MAX(1.0, M / 8.0); }

/* A rough a-priori run time: every kernel reads its weights at half the measured bandwidth (5 µs at least
 * on the GPU: launch and tail), slower with M as growth() says; plus the host fill and upload of the copies
 * at 5 GB/s. Printed so a run on a remote machine can be given a time limit. */
static double estimate_s(const tilebench *b) {
    double s_total = 0;
    for (int si = 0; si < b->n_shapes; si++) {
        const tb_shape *s = &b->shapes[si];
        for (int f = 0; f < b->n_fmt; f++) {
            const qrt_linear proto = {.fmt = format_of_word[b->fmt[f]], .n = s->n, .k = s->k};
            const double bytes = (double)qrt_linear_bytes(&proto);
            int v[TB_MAX_KERNELS];
            const int nk = kernels_of(b, proto.fmt, v);
            s_total += QRT_MAX(bytes, 4.0 * b->cache_bytes) / 5e9;
            for (int mi = 0; mi < b->n_m; mi++) { /* every kernel of the format alike */
                double t = bytes / (0.5 * b->peak_gbs * 1e9) * 1e3 * growth(b->m[mi]);
                t = QRT_MAX(t, b->gpu ? 0.005 : 0.0);
                const double reps = QRT_MAX(3.0, QRT_MIN((double)b->reps, b->cell_ms / t));
                s_total += nk * (b->warmups + reps) * t / 1e3;
            }
        }
    }
    return s_total;
}

/* --variants against the CUDA backend's NVFP4 variant names (they exist only there). 0 after a message. */
static int variants_of(tilebench *b) {
#ifdef QRT_HAVE_CUDA
    if (b->gpu) {
        const char *names[TB_MAX_KERNELS];
        const int n = QRT_MIN(qrt_nvfp4_variant_count(), TB_MAX_KERNELS);
        for (int i = 0; i < n; i++) names[i] = qrt_nvfp4_variant_name(i);
        return parse_words("--variants", b->variants, names, n, b->variant_on);
    }
#endif
    fprintf(stderr, "qwenrt tilebench: --variants names NVFP4 kernels of the CUDA backend; this run is on the CPU\n");
    return 0;
}

static int setup(tilebench *b) {
    b->gpu = qrt_tool_pick_gpu("tilebench", b->device);
    if (b->gpu < 0) return 2;
#ifdef QRT_HAVE_CUDA
    b->be = b->gpu ? qrt_backend_cuda() : qrt_backend_cpu();
#else
    b->be = qrt_backend_cpu();
#endif
    if (!b->be) return fprintf(stderr, "qwenrt tilebench: %s\n", qrt_last_error()), 1;
    if (b->threads) qrt_cpu_set_threads(b->threads);
    b->warmups = b->gpu ? 3 : 1;
    if (!b->preset && !b->dir) b->preset = b->gpu ? "qwen3.6-27b" : "tiny";
    qrt_status st = b->dir ? qrt_config_load(b->dir, &b->cfg) : qrt_config_preset(b->preset, &b->cfg);
    if (st != QRT_OK) return fprintf(stderr, "qwenrt tilebench: %s\n", qrt_last_error()), st == QRT_ERR_ARG ? 2 : 1;
    if (!b->n_fmt) { /* the default formats: what the main layers of the NVFP4 checkpoints use on a GPU */
        b->fmt[b->n_fmt++] = b->gpu ? 1 : 0;
        b->fmt[b->n_fmt++] = b->gpu ? 0 : 1;
        if (!b->gpu) b->fmt[b->n_fmt++] = 2;
    }
    shapes_of_config(b);
    if (!b->n_shapes) return fprintf(stderr, "qwenrt tilebench: --shapes selects no shape of this model\n"), 2;
    if (b->variants && !variants_of(b)) return 2;
#ifdef QRT_HAVE_CUDA
    b->cache_bytes = b->gpu ? qrt_tilebench_cuda_l2() : 0;
#endif
    if (!b->gpu) {
        long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
        b->cache_bytes = l3 > 0 ? (size_t)l3 : l2 > 0 ? (size_t)l2 : (size_t)32 << 20;
    }
    if (!b->cache_bytes) b->cache_bytes = (size_t)64 << 20;
    const size_t probe = b->gpu ? (size_t)2 << 30 : (size_t)256 << 20;
    if (qrt_membw_read(b->gpu, probe, &b->peak_gbs)) return 1;
    printf("read bandwidth: %.1f GB/s (streaming read of %zu MiB, median of 5 batches)\n", b->peak_gbs, probe >> 20);
    return 0;
}

static void print_summary(const tilebench *b, tb_summary sum[TB_MAX_SHAPES][3]) {
    for (int table = 0; table < 2; table++) {
        printf(table ? "\nTFLOP/s of the kernel the model runs ('pick'), by M:\n%-12s %-6s"
                     : "\n%% of read bandwidth of the kernel the model runs ('pick'), by M:\n%-12s %-6s",
               "shape", "format");
        for (int mi = 0; mi < b->n_m; mi++) printf(" %6d", b->m[mi]);
        printf("\n");
        for (int si = 0; si < b->n_shapes; si++)
            for (int f = 0; f < b->n_fmt; f++) {
                printf("%-12s %-6s", shape_words[b->shapes[si].id], format_words[b->fmt[f]]);
                for (int mi = 0; mi < b->n_m; mi++) {
                    const double p = table ? sum[si][f].pick_tflops[mi] : sum[si][f].pick_pct[mi];
                    if (p > 0) printf(table ? " %6.3g" : " %5.1f%%", p);
                    else printf(" %6s", "-");
                }
                printf("\n");
            }
    }
}

static json_t *shapes_json(const tilebench *b) {
    json_t *a = json_array();
    for (int i = 0; i < b->n_shapes; i++) {
        const tb_shape *s = &b->shapes[i];
        json_array_append_new(a, json_pack("{s:s, s:s, s:I, s:I, s:i, s:i}", "name", shape_words[s->id], "parts",
                                           s->parts, "n", (json_int_t)s->n, "k", (json_int_t)s->k, "per_token",
                                           s->per_token, "per_mtp_step", s->per_mtp_step));
    }
    return a;
}

static int write_json(const tilebench *b, const qrt_devinfo *d, const char *date, double est, double elapsed) {
    json_t *ms = json_array(), *fmts = json_array();
    for (int i = 0; i < b->n_m; i++) json_array_append_new(ms, json_integer(b->m[i]));
    for (int i = 0; i < b->n_fmt; i++) json_array_append_new(fmts, json_string(format_words[b->fmt[i]]));
    json_t *j = json_pack(
        "{s:s, s:i, s:s, s:s, s:o, s:{s:s, s:s}, s:{s:o, s:o, s:i, s:i, s:s, s:o, s:I}, s:o, s:o, s:O, "
        "s:O, s:o, s:o}",
        "tool", "tilebench", "schema_version", 1, "date", date, "backend", b->be->name, "device", qrt_devinfo_json(d),
        "model", "source", b->dir ? "config" : "preset", "name", b->dir ? b->dir : b->preset, "settings", "m", ms,
        "formats", fmts, "reps", b->reps, "warmups", b->warmups, "timing",
        b->gpu && !b->launch_timing ? "graph" : "launch", "cell_ms", qrt_json_real(b->cell_ms), "cache_bytes",
        (json_int_t)b->cache_bytes, "read_gbs", qrt_json_real(b->peak_gbs), "shapes", shapes_json(b), "results",
        b->results, "skipped", b->skipped, "estimate_s", qrt_json_real(est), "elapsed_s", qrt_json_real(elapsed));
    int rc = qrt_write_json(j, b->json_path);
    json_decref(j);
    return rc;
}

static int run(tilebench *b) {
    const double t0 = qrt_now_ms();
    int rc = setup(b);
    if (rc) return rc;
    qrt_devinfo d;
    qrt_devinfo_get(&d, b->gpu);
    char line[512], date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%MZ", gmtime(&now));
    qrt_devinfo_line(&d, line, sizeof line);
    printf("# qwenrt tilebench, %s\n# device: %s\n# shapes of %s %s; backend %s; %zu MB cache (copies rotate over "
           "4x that); timing: %s\n", date, line, b->dir ? "config" : "preset", b->dir ? b->dir : b->preset,
           b->be->name, b->cache_bytes >> 20,
           !b->gpu ? "each launch alone" : b->launch_timing ? "each launch alone (CUDA events, host launch gap included)"
                                                            : "launches back to back in a CUDA graph (replay / launches)");
    const double est = estimate_s(b);
    printf("# estimated run time: about %.0f s (rough: kernels at half the read bandwidth, slower with M)\n\n", est);
    printf("%-12s %-6s %4s %-14s %10s %8s %7s %9s %4s\n", "shape", "format", "M", "kernel", "ms", "GB/s", "%read",
           "GFLOP/s", "reps");
    tb_summary sum[TB_MAX_SHAPES][3];
    memset(sum, 0, sizeof sum);
    int ok = 1;
    for (int si = 0; si < b->n_shapes && ok; si++)
        for (int f = 0; f < b->n_fmt && ok; f++) ok = run_shape_format(b, &b->shapes[si], b->fmt[f], &sum[si][f]);
    if (!ok) return 1;
    print_summary(b, sum);
    const double elapsed = (qrt_now_ms() - t0) / 1e3;
    printf("elapsed %.1f s (estimate was %.0f s)\n", elapsed, est);
    return b->json_path ? write_json(b, &d, date, est, elapsed) : 0;
}

int qrt_tool_tilebench(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return fputs(usage, stdout), 0;
    tilebench b;
    memset(&b, 0, sizeof b);
    if (!parse(argc, argv, &b)) return 2;
    b.results = json_array(), b.skipped = json_array();
    int rc = run(&b);
    json_decref(b.results), json_decref(b.skipped);
    return rc;
}
