/* qwenrt bench: the decode benchmark of docs/benchmarks.md in one command.
 *
 * For each context length and each K: one warmup generation, --reps timed ones, each rep printed with a hash
 * of its output tokens (they must agree) and the median in the seed thread's table
 * (ctx K TTFT_ms dec_ms tok/s AL att acc) plus chain/verify ms per cycle; then one extra generation with
 * every backend op timed by category (the kernel breakdown of its prefill and decode window; kept out of the timed reps
 * because timing each op costs time), and with --parity the K=1 vs K greedy check. Without -m it runs a
 * synthetic model made in memory (tiny on the CPU, the Qwen3.6-27B shape on a GPU), and says so on every
 * line. Random weights cannot measure acceptance: --sim-al A forces the accept count per cycle so that the
 * average is A (simulation, said on every line). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "model/model.h"
#include "tokenizer/chat.h"
#include "tools/membw.h"
#include "tools/opprof.h"
#include "tools/synthetic.h"
#include "tools/tools.h"

static const char *usage =
    "usage: qwenrt bench [-m DIR [--mtp DIR] | --synthetic tiny|qwen3.6-27b] [--format nvfp4|stored|bf16|fp8]\n"
    "                    [--ctx 128,2048] [-K 6] [-n 64] [--reps 3] [--parity] [--prompt repeat|chat]\n"
    "                    [--sim-al A] [--kv f32|bf16|fp8] [--no-breakdown] [--json FILE]\n"
    "                    [--device auto|cpu|cuda] [--threads N]\n"
    "\n"
    "Decode benchmark: for each ctx and each K, one warmup generation and --reps timed ones (greedy, eos\n"
    "ignored), each rep with a hash of its output tokens, then the median in the table\n"
    "ctx K TTFT_ms dec_ms tok/s AL att acc (+ chain/verify ms per cycle), a kernel breakdown, and the parity line.\n"
    "  -m DIR         a Hugging Face checkpoint folder (its tokenizer.json, when present, makes the prompts)\n"
    "  --mtp DIR      a folder holding mtp.safetensors (the MTP head shipped separately)\n"
    "  --synthetic P  without -m: random weights made in memory in the shape of preset P (default: tiny on the\n"
    "                 CPU, qwen3.6-27b on a GPU), with an MTP head; labelled synthetic on every line\n"
    "  --format F     of the synthetic model's linears: nvfp4 (default: every linear, GDN projections and\n"
    "                 lm_head too), stored (the published NVFP4 checkpoints' layout: MLP and attention NVFP4,\n"
    "                 GDN projections, lm_head and mtp.fc BF16), bf16, or fp8 (CPU only); the embedding stays BF16\n"
    "  --ctx L        prompt lengths, comma-separated (default 128,2048)\n"
    "  -K L           draft tokens per speculative cycle, comma-separated (0 = no MTP; default 6)\n"
    "  -n N           new tokens per generation (default 64)\n"
    "  --reps R       timed repetitions after one warmup (default 3; the median is shown)\n"
    "  --prompt P     repeat: a fixed English text repeated and tokenized to exactly ctx tokens (a fixed\n"
    "                 token-id pattern when the model has no tokenizer.json, e.g. synthetic); chat: three\n"
    "                 chat-templated prompts (code, prose, JSON), ctx = their lengths (needs a tokenizer)\n"
    "  --sim-al A     simulate acceptance: accept floor((c+1)A) - floor(cA) drafts in cycle c (mean A), the\n"
    "                 drafts as proposed; output then differs from plain decoding (rows say 'simulated AL')\n"
    "  --parity       per ctx: greedy outputs of K=0, K=1 and the largest K (no simulation) must be identical\n"
    "  --kv F         KV cache format: f32 (exact; the default on the CPU), bf16 (the default on a GPU), or fp8\n"
    "                 (e4m3, one scale per token and head)\n"
    "  --no-breakdown skip the extra profiled generation per row (the kernel-category breakdown)\n"
    "  --json FILE    everything below as JSON (docs/bench-schema.md)\n"
    "  --device D     cuda, cpu, or auto (default: cuda when this build has CUDA and a GPU is present)\n"
    "  --threads N    CPU threads (default: OpenMP's)\n"
    "metrics: TTFT_ms = prefill up to the first token's logits; dec_ms = first to last new token;\n"
    "  tok/s = (n - 1) / dec_ms * 1000; att = speculative cycles, acc = accepted drafts, AL = acc / att (the\n"
    "  bonus token not counted; tokens per cycle = AL + 1); full accept = cycles that accepted all K drafts;\n"
    "  chain_ms = K MTP draft steps (+ the catch-up on accepted tokens), verify_ms = K+1 tokens through the\n"
    "  main model, both per cycle; cycle_ms = chain_ms + verify_ms. Timing: monotonic host clock; every phase\n"
    "  ends in a blocking logits download, so the GPU's work is inside it.\n"
    "  Kernel breakdown: one extra generation with each backend op bracketed by CUDA events (host clock on\n"
    "  the CPU), for the prefill and for the decode window: W4A16 GEMM, BF16 GEMV, FP8 GEMM, GDN, conv1d,\n"
    "  attention, other, as ms, % of the op total and GB/s (weight bytes / ms) of the matmul categories.\n"
    "  Byte floors: per row, the least a token, the verify and the chain can take at the read bandwidth\n"
    "  measured at the start (every byte they must move, read once), and each as % of the measured time.\n"
    "  Device memory (GPU): the model's, the session's (KV cache, one prefill piece's scratch) and what the ops\n"
    "  grew on demand during the rows, from the device's free memory before and after each.\n"
    "exit status: 0, 1 (error), 2 (bad arguments), 3 (output hashes differed between reps).\n";

/* The seed text of the repeat prompt (any fixed English works; this one is ordinary prose). */
static const char *seed_text =
    "The quick brown fox jumps over the lazy dog while the evening train pulls slowly out of the station. "
    "Along the river, people walk their dogs, talk about the weather, and watch the lights come on in the "
    "old houses on the hill. ";

static const struct {
    const char *name, *text;
} chat_prompts[] = {
    {"code", "Write a C function that reverses a singly linked list in place and explain how it works."},
    {"prose", "Describe a quiet morning in a small coastal town in about two hundred words."},
    {"json", "Return a JSON object describing three fictional books, each with title, author, year and tags."},
};

#define MAX_LIST 16
#define MAX_REPS 64

typedef struct {
    /* options */
    const char *dir, *mtp_dir, *synthetic, *format, *prompt, *json_path, *device;
    int ctx[MAX_LIST], n_ctx, ks[MAX_LIST], n_k, n_new, reps, parity, breakdown, threads, kv /* QRT_KV_* */;
    double sim_al;
    /* state */
    qrt_model *m;
    const qrt_backend *real_be;
    qrt_session *s;
    qrt_tokenizer *tok;
    int32_t *out;
    const char *tags; /* appended to every result line: "[synthetic, simulated AL]" */
    int sim_cycle, profiling_armed;
    qrt_opprof_result prefill_prof; /* the profiled generation's prefill, until first_token hands it over */
    qrt_cli_ticker *ticker;         /* the prefill line of a long prompt, until the first token */
} bench;

typedef struct {
    qrt_gen_stats st;
    uint64_t hash;
} rep_result;

/* ---- parsing ------------------------------------------------------------------------------------- */

static const char *const kv_words[] = {"f32", "bf16", "fp8"}; /* indexed by QRT_KV_* */

static int parse(int argc, char **argv, bench *b) {
    b->n_new = 64, b->reps = 3, b->breakdown = 1, b->prompt = "repeat", b->device = "auto", b->kv = QRT_KV_DEFAULT;
    b->ctx[0] = 128, b->ctx[1] = 2048, b->n_ctx = 2;
    b->ks[0] = 6, b->n_k = 1;
    b->sim_al = -1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--parity")) b->parity = 1;
        else if (!strcmp(a, "--no-breakdown")) b->breakdown = 0;
        else if (!v) return fprintf(stderr, "qwenrt bench: unknown or incomplete option '%s' (see --help)\n", a), 0;
        else {
            i++;
            if (!strcmp(a, "-m") || !strcmp(a, "--model")) b->dir = v;
            else if (!strcmp(a, "--mtp")) b->mtp_dir = v;
            else if (!strcmp(a, "--synthetic")) b->synthetic = v;
            else if (!strcmp(a, "--format")) b->format = v;
            else if (!strcmp(a, "--prompt")) b->prompt = v;
            else if (!strcmp(a, "--json")) b->json_path = v;
            else if (!strcmp(a, "--device")) b->device = v;
            else if (!strcmp(a, "--ctx")) {
                if (!qrt_tool_int_list("bench", a, v, 1, 1 << 20, MAX_LIST, b->ctx, &b->n_ctx)) return 0;
            } else if (!strcmp(a, "-K")) {
                if (!qrt_tool_int_list("bench", a, v, 0, QRT_SPEC_MAX_K, MAX_LIST, b->ks, &b->n_k)) return 0;
            } else if (!strcmp(a, "-n")) {
                if (!qrt_tool_int("bench", a, v, 2, 1 << 16, &b->n_new)) return 0;
            } else if (!strcmp(a, "--reps")) {
                if (!qrt_tool_int("bench", a, v, 1, MAX_REPS, &b->reps)) return 0;
            } else if (!strcmp(a, "--threads")) {
                if (!qrt_tool_int("bench", a, v, 1, 4096, &b->threads)) return 0;
            } else if (!strcmp(a, "--sim-al")) {
                if (!qrt_tool_number("bench", a, v, 0, QRT_SPEC_MAX_K, &b->sim_al)) return 0;
            } else if (!strcmp(a, "--kv")) {
                if ((b->kv = qrt_tool_word("bench", a, v, kv_words, 3)) < 0) return 0;
            } else return fprintf(stderr, "qwenrt bench: unknown option '%s' (see qwenrt bench --help)\n", a), 0;
        }
    }
    if (b->dir && b->synthetic)
        return fprintf(stderr, "qwenrt bench: give -m DIR or --synthetic PRESET, not both\n"), 0;
    if (strcmp(b->prompt, "repeat") && strcmp(b->prompt, "chat"))
        return fprintf(stderr, "qwenrt bench: --prompt is '%s'; expected repeat or chat\n", b->prompt), 0;
    return 1;
}

/* ---- the model and the prompts ------------------------------------------------------------------- */

static int load(bench *b, int gpu, double *build_s) {
    qrt_load_opts opts = {.n_threads = b->threads, .show_progress = 1, .mtp_dir = b->mtp_dir,
                          .device = gpu ? QRT_DEVICE_CUDA : QRT_DEVICE_CPU, .kv_format = b->kv};
    double t0 = qrt_now_ms();
    qrt_status st;
    if (b->dir) st = qrt_model_load(b->dir, &opts, &b->m);
    else {
        if (!b->synthetic) b->synthetic = gpu ? "qwen3.6-27b" : "tiny";
        if (!b->format) b->format = "nvfp4";
        fprintf(stderr, "building synthetic %s (%s, random weights in memory)...\n", b->synthetic, b->format);
        st = qrt_model_synthetic(b->synthetic, b->format, 1, &opts, &b->m);
    }
    *build_s = (qrt_now_ms() - t0) / 1e3;
    if (st != QRT_OK) {
        fprintf(stderr, "qwenrt bench: %s\n", qrt_last_error());
        return 0;
    }
    b->real_be = b->m->be;
    b->kv = b->m->kv_format; /* QRT_KV_DEFAULT resolved by the device */
    if (b->dir) {
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof path, "%s/tokenizer.json", b->dir);
        if (stat(path, &sb) == 0 &&
            (qrt_tokenizer_load(path, &b->tok) != QRT_OK || qrt_tokenizer_check_model(b->tok, b->m, b->dir) != QRT_OK)) {
            fprintf(stderr, "qwenrt bench: %s\n", qrt_last_error());
            return 0;
        }
    }
    return 1;
}

/* Exactly ctx ids: the seed text's tokens repeated, or without a tokenizer a fixed id pattern (a 61-token
 * cycle of ids spread over the vocabulary, so embeddings differ but every run sees the same ids). */
static int32_t *repeat_prompt(const bench *b, int ctx) {
    int32_t *ids = qrt_calloc((size_t)ctx, sizeof *ids);
    if (!ids) return NULL;
    const int32_t V = qrt_model_vocab(b->m);
    int32_t *seed_ids = NULL;
    size_t n_seed = 0;
    if (b->tok && qrt_tokenize(b->tok, seed_text, strlen(seed_text), &seed_ids, &n_seed) == QRT_OK && n_seed)
        for (int i = 0; i < ctx; i++) ids[i] = seed_ids[i % n_seed];
    else
        for (int i = 0; i < ctx; i++) ids[i] = (int32_t)(((int64_t)(i % 61) * 7919 + 17) % (V > 2 ? V - 1 : 1));
    free(seed_ids);
    return ids;
}

static int32_t *chat_prompt(const bench *b, int which, int *n) {
    qrt_chat_message msg = {.role = "user", .content = chat_prompts[which].text};
    qrt_chat_opts co = {.dialect = QRT_CHAT_QWEN36, .add_generation_prompt = 1, .enable_thinking = 0};
    char *text = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (qrt_chat_render(&msg, 1, &co, &text) != QRT_OK ||
        qrt_tokenize(b->tok, text, strlen(text), &ids, &n_ids) != QRT_OK) {
        fprintf(stderr, "qwenrt bench: chat prompt: %s\n", qrt_last_error());
        free(text);
        return NULL;
    }
    free(text);
    *n = (int)n_ids;
    return ids;
}

/* ---- one generation ------------------------------------------------------------------------------ */

/* Simulated acceptance: cycle c accepts floor((c+1)·A) − floor(c·A) drafts, so any run of cycles averages A
 * (capped at K) and every run accepts the same counts (identical output hashes across reps). */
static int sim_accept(int K, int j, void *user) {
    bench *b = user;
    int c = b->sim_cycle++;
    int want = (int)(floor((c + 1) * b->sim_al) - floor(c * b->sim_al));
    return want < K ? want : K;
}

/* The first token's callback ends the prefill line, closes the prefill's op timing and starts the decode window's. */
static int first_token(int32_t id, void *user) {
    bench *b = user;
    qrt_cli_ticker_stop(&b->ticker);
    if (b->profiling_armed) {
        b->profiling_armed = 0;
        qrt_opprof_stop(&b->prefill_prof);
        qrt_opprof_start();
    }
    return 0;
}

/* The cancel hook, called between prefill pieces: never cancels, moves the prefill line on. */
static int show_prefill_progress(void *user) {
    const bench *b = user;
    qrt_cli_ticker_progress(b->ticker, qrt_session_pos(b->s));
    return 0;
}

static uint64_t hash_tokens(const int32_t *ids, int n) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) h = (h ^ (uint8_t)((uint32_t)ids[i] >> (8 * k))) * 1099511628211ull;
    return h;
}

static int generate(bench *b, const int32_t *ids, int n, int K, int simulate, int profile, rep_result *r,
                    qrt_opprof_result *prof) {
    qrt_session_reset(b->s);
    b->sim_cycle = 0;
    qrt_gen_opts go = {.max_new = b->n_new, .stop_eos = 0, .spec_k = K, .on_token = first_token, .user = b};
    if (simulate) go.accept_hook = sim_accept, go.accept_user = b;
    b->ticker = qrt_cli_ticker_start(n);
    if (b->ticker) go.cancel = show_prefill_progress;
    if (profile) {
        b->m->be = qrt_opprof_backend(b->real_be);
        b->profiling_armed = 1;
        qrt_opprof_start();
    }
    qrt_status st = qrt_generate(b->s, ids, n, &go, b->out, &r->st);
    qrt_cli_ticker_stop(&b->ticker);
    if (profile) {
        qrt_opprof_stop(prof);
        b->m->be = b->real_be;
    }
    if (st != QRT_OK) {
        fprintf(stderr, "qwenrt bench: ctx %d K %d: %s\n", n, K, qrt_last_error());
        return 0;
    }
    r->hash = hash_tokens(b->out, r->st.n_new);
    return 1;
}

/* ---- one row: warmup, reps, median, breakdown ---------------------------------------------------- */

static double tok_s(const qrt_gen_stats *g) { return g->n_new > 1 && g->decode_ms > 0 ? (g->n_new - 1) / g->decode_ms * 1e3 : 0; }
static double ratio(double a, double b) { return b ? a / b : 0; }

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, c = *(const double *)y;
    return a < c ? -1 : a > c;
}

/* Median of field f over reps (a copy is sorted). */
static double median_of(const rep_result *r, int n, double (*f)(const rep_result *)) {
    double v[MAX_REPS];
    for (int i = 0; i < n; i++) v[i] = f(&r[i]);
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
static double f_ttft(const rep_result *r) { return r->st.prefill_ms; }
static double f_dec(const rep_result *r) { return r->st.decode_ms; }
static double f_tps(const rep_result *r) { return tok_s(&r->st); }
static double f_chain(const rep_result *r) { return ratio(r->st.chain_ms, (double)r->st.attempts); }
static double f_verify(const rep_result *r) { return ratio(r->st.verify_ms, (double)r->st.attempts); }

typedef struct {
    int ctx, K, simulated;
    const char *prompt_name;
    rep_result reps[MAX_REPS];
    int identical;
    double ttft, dec, tps, chain, verify;
    int have_prof;
    qrt_opprof_result prof, prefill_prof;
    double window_ms, prefill_window_ms;
    qrt_graph_stats g_warm, g_reps; /* the graph cache after the warmup; what the reps added to it */
} row;

static void print_rep(const bench *b, int i, const rep_result *r) {
    const qrt_gen_stats *g = &r->st;
    printf("  rep %d: TTFT %.1f ms, decode %.1f ms, %.2f tok/s, AL %.2f (%lld/%lld), chain %.2f + verify %.2f "
           "ms/cycle, tokens %016llx %s\n", i + 1, g->prefill_ms, g->decode_ms, tok_s(g),
           ratio((double)g->accepts, (double)g->attempts), (long long)g->accepts, (long long)g->attempts,
           f_chain(r), f_verify(r), (unsigned long long)r->hash, b->tags);
}

static void print_categories(const bench *b, const char *what, const qrt_opprof_result *prof, double window_ms) {
    double total = 0;
    for (int c = 0; c < QRT_OPCAT_COUNT; c++) total += prof->ms[c];
    printf("  kernel categories, %s (one extra profiled generation; %s timing per op) %s\n", what,
           strcmp(b->real_be->name, "cuda") ? "host clock" : "CUDA event", b->tags);
    printf("    %-11s %10s %6s %8s %9s\n", "category", "ms", "%", "calls", "GB/s");
    for (int c = 0; c < QRT_OPCAT_COUNT; c++) {
        if (!prof->calls[c]) continue;
        char gbs[32] = "";
        if (prof->bytes[c]) snprintf(gbs, sizeof gbs, "%9.1f", prof->bytes[c] / (prof->ms[c] * 1e-3) / 1e9);
        printf("    %-11s %10.2f %5.1f%% %8llu %9s %s\n", qrt_opcat_name(c), prof->ms[c], 100 * ratio(prof->ms[c], total),
               (unsigned long long)prof->calls[c], gbs, b->tags);
    }
    printf("    %-11s %10.2f of a %.2f ms %s (the rest: host work, launch gaps, timing overhead) %s\n", "total", total,
           window_ms, what, b->tags);
}

static void print_breakdown(const bench *b, const row *w) {
    print_categories(b, "prefill", &w->prefill_prof, w->prefill_window_ms);
    print_categories(b, "decode window", &w->prof, w->window_ms);
}

static int run_row(bench *b, const int32_t *ids, int n, row *w) {
    rep_result warm;
    const int simulate = w->simulated;
    printf("ctx %d, K %d%s%s: warmup, then %d reps\n", n, w->K, w->prompt_name ? ", prompt " : "",
           w->prompt_name ? w->prompt_name : "", b->reps);
    fflush(stdout);
    if (!generate(b, ids, n, w->K, simulate, 0, &warm, NULL)) return 0;
    qrt_session_graph_stats(b->s, &w->g_warm);
    w->identical = 1;
    for (int i = 0; i < b->reps; i++) {
        if (!generate(b, ids, n, w->K, simulate, 0, &w->reps[i], NULL)) return 0;
        w->identical &= w->reps[i].hash == w->reps[0].hash && w->reps[i].hash == warm.hash;
        print_rep(b, i, &w->reps[i]);
        fflush(stdout);
    }
    qrt_graph_stats g;
    qrt_session_graph_stats(b->s, &g);
    w->g_reps = (qrt_graph_stats){g.graphs - w->g_warm.graphs, g.records - w->g_warm.records,
                                  g.replays - w->g_warm.replays, g.plain - w->g_warm.plain};
    printf("  output hashes of warmup and reps identical: %s %s\n", w->identical ? "yes" : "NO (nondeterminism!)",
           b->tags);
    if (g.graphs || g.records)
        printf("  graph cache: %d graphs after the warmup, %d after the reps (%s); reps: %lld replays, %lld recordings, "
               "%lld plain forwards %s\n", w->g_warm.graphs, g.graphs, w->g_reps.records ? "GREW" : "did not grow",
               (long long)w->g_reps.replays, (long long)w->g_reps.records, (long long)w->g_reps.plain, b->tags);
    w->ttft = median_of(w->reps, b->reps, f_ttft);
    w->dec = median_of(w->reps, b->reps, f_dec);
    w->tps = median_of(w->reps, b->reps, f_tps);
    w->chain = median_of(w->reps, b->reps, f_chain);
    w->verify = median_of(w->reps, b->reps, f_verify);
    if (b->breakdown) {
        rep_result pr;
        if (!generate(b, ids, n, w->K, simulate, 1, &pr, &w->prof)) return 0;
        w->have_prof = 1;
        w->window_ms = pr.st.decode_ms;
        w->prefill_prof = b->prefill_prof;
        w->prefill_window_ms = pr.st.prefill_ms;
        print_breakdown(b, w);
    }
    return 1;
}

/* Greedy K=0, K=1 and K=Kmax on the same prompt, no simulation: outputs must be identical. */
static int run_parity(bench *b, const int32_t *ids, int n, int kmax, json_t *jparity) {
    int ks[3] = {0, 1, kmax}, nk = kmax > 1 ? 3 : 2;
    uint64_t h[3];
    int pass = 1;
    for (int i = 0; i < nk; i++) {
        rep_result r;
        if (!generate(b, ids, n, ks[i], 0, 0, &r, NULL)) return 0;
        h[i] = r.hash;
        pass &= h[i] == h[0];
    }
    printf("parity ctx %d: K=1 vs K=%d greedy outputs identical (and K=0): %s (%016llx%s%016llx) %s\n", n, ks[nk - 1],
           pass ? "PASS" : "FAIL", (unsigned long long)h[0], pass ? " = " : " vs ", (unsigned long long)h[nk - 1],
           b->tags);
    json_t *hashes = json_array();
    for (int i = 0; i < nk; i++) {
        char hx[20];
        snprintf(hx, sizeof hx, "%016llx", (unsigned long long)h[i]);
        json_array_append_new(hashes, json_pack("{s:i, s:s}", "k", ks[i], "hash", hx));
    }
    json_array_append_new(jparity, json_pack("{s:i, s:b, s:o}", "ctx", n, "pass", pass, "outputs", hashes));
    return 1;
}

/* ---- byte floors ----------------------------------------------------------------------------------- */

/* The least time a row's work can take at the read bandwidth bw_gbs: every byte it must move, read once. A plain token
 * reads the weights, the f32 vectors, the GDN state (read and written) and the KV cache of its context; the verify of
 * K+1 tokens needs the same bytes once (kernels that read each weight once for all its tokens) plus K more tokens of
 * KV; a chain of K draft steps reads the MTP step's weights K times. Context: the mean over the generation. */
typedef struct {
    double token_ms, verify_ms, chain_ms;
} floors;

static floors row_floors(const qrt_token_bytes *tb, const row *w, int n_new, double bw_gbs) {
    const double ctx = w->ctx + n_new / 2.0, per_s = bw_gbs * 1e9 / 1e3; /* bytes per ms */
    const double token = (double)(tb->weights + tb->vectors + tb->state) + (double)tb->kv_per_ctx * ctx;
    floors f = {token / per_s, 0, 0};
    if (w->K) {
        f.verify_ms = (token + (double)tb->kv_per_ctx * w->K) / per_s;
        f.chain_ms = (double)tb->mtp_step * w->K / per_s;
    }
    return f;
}

static void print_floors(const bench *b, const row *rows, int n_rows, const qrt_token_bytes *tb, double bw_gbs) {
    if (bw_gbs <= 0) return;
    printf("\nbyte floors at %.0f GB/s (the read measured above): the least each part can take, and that as %% of "
           "what it took\n", bw_gbs);
    printf("%6s %3s %14s %9s %18s %9s %18s %9s\n", "ctx", "K", "token_floor_ms", "%", "verify_floor_ms",
           "%", "chain_floor_ms", "%");
    for (int i = 0; i < n_rows; i++) {
        const row *w = &rows[i];
        const floors f = row_floors(tb, w, b->n_new, bw_gbs);
        const double per_token = ratio(w->dec, (double)b->n_new);
        if (!w->K) {
            printf("%6d %3d %14.3f %8.1f%%\n", w->ctx, w->K, f.token_ms, 100 * ratio(f.token_ms, per_token));
            continue;
        }
        printf("%6d %3d %14.3f %9s %18.3f %8.1f%% %18.3f %8.1f%%\n", w->ctx, w->K, f.token_ms, "-", f.verify_ms,
               100 * ratio(f.verify_ms, w->verify), f.chain_ms, 100 * ratio(f.chain_ms, w->chain));
    }
}

/* The read bandwidth the floors use: one streaming read (GPU: 1 GiB, CPU: 256 MiB), measured in this run; 0 when the
 * measurement fails (the floors are then not printed). */
static double measure_read_gbs(int gpu, qrt_devinfo *d) {
    const size_t size = gpu ? (size_t)1 << 30 : (size_t)256 << 20;
    qrt_membw_result r;
    if (qrt_membw_measure(gpu, &size, 1, 0, 0, 0, d, &r)) return 0;
    return r.points[0].read_gbs;
}

/* ---- output -------------------------------------------------------------------------------------- */

static void print_table(const bench *b, const row *rows, int n_rows) {
    printf("\n%6s %3s %9s %9s %8s %6s %5s %5s %9s %9s %8s  %-16s %s\n", "ctx", "K", "TTFT_ms", "dec_ms", "tok/s", "AL",
           "att", "acc", "chain_ms", "verify_ms", "tok/cyc", "tokens_hash", "mode");
    for (int i = 0; i < n_rows; i++) {
        const row *w = &rows[i];
        const rep_result *med = &w->reps[0]; /* counters are identical across reps (same output) */
        double al = ratio((double)med->st.accepts, (double)med->st.attempts);
        char mode[96];
        snprintf(mode, sizeof mode, "%s%s%s", b->synthetic ? "synthetic" : "checkpoint",
                 w->simulated ? ", simulated AL" : "", w->K ? "" : ", no MTP");
        printf("%6d %3d %9.1f %9.1f %8.2f %6.2f %5lld %5lld %9.2f %9.2f %8.2f  %016llx %s%s\n", w->ctx, w->K, w->ttft,
               w->dec, w->tps, al, (long long)med->st.attempts, (long long)med->st.accepts, w->chain, w->verify,
               w->K ? al + 1 : 1.0, (unsigned long long)med->hash, mode, w->identical ? "" : " HASH MISMATCH");
    }
}

static json_t *row_json(const bench *b, const row *w) {
    json_t *reps = json_array();
    char hx[20];
    for (int i = 0; i < b->reps; i++) {
        const qrt_gen_stats *g = &w->reps[i].st;
        snprintf(hx, sizeof hx, "%016llx", (unsigned long long)w->reps[i].hash);
        json_array_append_new(reps, json_pack("{s:o, s:o, s:o, s:I, s:I, s:o, s:o, s:s}", "ttft_ms",
                                              qrt_json_real(g->prefill_ms), "dec_ms", qrt_json_real(g->decode_ms),
                                              "tok_s", qrt_json_real(tok_s(g)), "attempts", (json_int_t)g->attempts,
                                              "accepts", (json_int_t)g->accepts, "chain_ms", qrt_json_real(g->chain_ms),
                                              "verify_ms", qrt_json_real(g->verify_ms), "hash", hx));
    }
    const qrt_gen_stats *g = &w->reps[0].st;
    json_t *at = json_array();
    for (int k = 0; k < g->spec_k; k++)
        json_array_append_new(at, qrt_json_real(ratio((double)g->accepted_at[k], (double)g->attempts)));
    double al = ratio((double)g->accepts, (double)g->attempts);
    json_t *j = json_pack("{s:i, s:s, s:i, s:i, s:b, s:b, s:b, s:o}", "ctx", w->ctx, "prompt",
                          w->prompt_name ? w->prompt_name : b->prompt, "k", w->K, "n_new", g->n_new, "synthetic",
                          b->synthetic != NULL, "simulated_al", w->simulated, "hashes_identical", w->identical, "reps",
                          reps);
    json_object_set_new(
        j, "median",
        json_pack("{s:o, s:o, s:o, s:o, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:o}", "ttft_ms", qrt_json_real(w->ttft),
                  "dec_ms", qrt_json_real(w->dec), "tok_s", qrt_json_real(w->tps), "al", qrt_json_real(al), "attempts",
                  (json_int_t)g->attempts, "accepts", (json_int_t)g->accepts, "tokens_per_cycle",
                  qrt_json_real(w->K ? al + 1 : 1.0), "full_accept_rate",
                  qrt_json_real(ratio((double)g->full_accepts, (double)g->attempts)), "chain_ms_per_cycle",
                  qrt_json_real(w->chain), "verify_ms_per_cycle", qrt_json_real(w->verify), "cycle_ms",
                  qrt_json_real(w->chain + w->verify), "accept_at", at));
    json_object_set_new(j, "graphs", json_pack("{s:i, s:i, s:I, s:I, s:I}", "after_warmup", w->g_warm.graphs,
                                               "after_reps", w->g_warm.graphs + w->g_reps.graphs, "records_in_reps",
                                               (json_int_t)w->g_reps.records, "replays_in_reps",
                                               (json_int_t)w->g_reps.replays, "plain_in_reps",
                                               (json_int_t)w->g_reps.plain));
    if (w->have_prof) {
        json_t *cats = json_array();
        double total = 0;
        for (int c = 0; c < QRT_OPCAT_COUNT; c++) total += w->prof.ms[c];
        for (int c = 0; c < QRT_OPCAT_COUNT; c++)
            json_array_append_new(
                cats,
                json_pack("{s:s, s:o, s:o, s:I, s:I, s:o}", "name", qrt_opcat_name(c), "ms",
                          qrt_json_real(w->prof.ms[c]), "pct", qrt_json_real(100 * ratio(w->prof.ms[c], total)),
                          "calls", (json_int_t)w->prof.calls[c], "bytes", (json_int_t)w->prof.bytes[c], "gbs",
                          qrt_json_real(w->prof.bytes[c] ? w->prof.bytes[c] / (w->prof.ms[c] * 1e-3) / 1e9 : 0.0)));
        json_object_set_new(
            j, "breakdown",
            json_pack("{s:s, s:o, s:o, s:o}", "timer", strcmp(b->real_be->name, "cuda") ? "host" : "cuda_events",
                      "window_ms", qrt_json_real(w->window_ms), "kernel_ms", qrt_json_real(total), "categories", cats));
    }
    return j;
}

static const char *format_label(const qrt_model *m) {
    const qrt_layer *l = &m->layers[0];
    static char buf[160];
    snprintf(buf, sizeof buf, "linears %s (lm_head %s, GDN in_proj_qkv %s), embedding %s",
             qrt_wformat_name(l->gate.fmt), qrt_wformat_name(m->lm_head.fmt),
             l->in_qkv.data ? qrt_wformat_name(l->in_qkv.fmt) : "-", qrt_wformat_name(m->embed.fmt));
    return buf;
}

/* What every result line of a row says about where its numbers come from. */
static const char *tags_for(const bench *b, int simulated) {
    if (b->synthetic) return simulated ? "[synthetic, simulated AL]" : "[synthetic]";
    return simulated ? "[simulated AL]" : "";
}

/* Device memory in bytes at the points bench reports (GPU only: the CPU backend's "available" is the host's free
 * memory, which the page cache and other processes move). */
typedef struct {
    double total, before, model, session, after; /* free bytes before the model, after it, after the session, after
                                                    the rows; total: the device's */
} mem_marks;

static void print_memory(const mem_marks *mm, const qrt_session *s) {
    printf("# device memory: model %.2f GB, session of %d positions %.2f GB (KV cache and one %d-token piece's "
           "scratch), %.2f GB free of %.1f GB\n", (mm->before - mm->model) / 1e9, s->max_ctx,
           (mm->model - mm->session) / 1e9, s->piece, mm->session / 1e9, mm->total / 1e9);
}

static json_t *memory_json(const mem_marks *mm) {
    if (mm->total <= 0) return json_null();
    return json_pack("{s:I, s:I, s:I, s:I, s:I}", "total_bytes", (json_int_t)mm->total, "model_bytes",
                     (json_int_t)(mm->before - mm->model), "session_bytes", (json_int_t)(mm->model - mm->session),
                     "scratch_bytes", (json_int_t)(mm->session - mm->after), "free_after_bytes", (json_int_t)mm->after);
}

/* ---- the command --------------------------------------------------------------------------------- */

static int run(bench *b) {
    int gpu = qrt_tool_pick_gpu("bench", b->device);
    if (gpu < 0) return 2;
    qrt_devinfo d;
    qrt_devinfo_get(&d, gpu);
    double build_s = 0;
    if (!load(b, gpu, &build_s)) return 1;
    mem_marks mm = {0};
    const int gpu_mem = gpu && d.gpu;
    if (gpu_mem) mm.total = d.mem_gb * 1e9, mm.before = d.mem_free_gb * 1e9;
    if (gpu_mem) mm.model = (double)b->real_be->mem_available();
    const int simulated = b->sim_al >= 0;
    b->tags = tags_for(b, 0);
    int use_chat = !strcmp(b->prompt, "chat");
    if (use_chat && !b->tok) {
        fprintf(stderr, "qwenrt bench: --prompt chat needs a tokenizer (DIR/tokenizer.json); synthetic models have "
                "none: use --prompt repeat\n");
        return 2;
    }
    int kmax = 0;
    for (int i = 0; i < b->n_k; i++) kmax = QRT_MAX(kmax, b->ks[i]);
    if (b->parity) kmax = QRT_MAX(kmax, 1);
    if (kmax && !b->m->mtp.present) {
        fprintf(stderr, "qwenrt bench: K > 0 needs an MTP head and this model has none; add it with --mtp DIR or "
                "use -K 0\n");
        return 2;
    }
    /* the prompts */
    int n_prompts = use_chat ? 3 : b->n_ctx, max_len = 0;
    int32_t *prompts[MAX_LIST] = {0};
    int lens[MAX_LIST];
    for (int p = 0; p < n_prompts; p++) {
        lens[p] = use_chat ? 0 : b->ctx[p];
        prompts[p] = use_chat ? chat_prompt(b, p, &lens[p]) : repeat_prompt(b, lens[p]);
        if (!prompts[p]) return 1;
        max_len = QRT_MAX(max_len, lens[p]);
    }
    b->out = qrt_calloc((size_t)b->n_new + QRT_SPEC_MAX_K + 2, sizeof *b->out);
    if (!b->out || qrt_session_new(b->m, max_len + b->n_new + kmax + 2, &b->s) != QRT_OK) {
        fprintf(stderr, "qwenrt bench: %s\n", qrt_last_error());
        return 1;
    }
    if (gpu_mem) mm.session = (double)b->real_be->mem_available();
    /* the header */
    char line[512], date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%MZ", gmtime(&now));
    qrt_devinfo_line(&d, line, sizeof line);
    qrt_token_bytes tb;
    qrt_model_bytes(b->m, &tb);
    printf("# qwenrt bench, %s\n# device: %s\n", date, line);
    if (b->synthetic)
        printf("# model: SYNTHETIC %s, random weights made in memory in %.1f s; %s; MTP head; %.2f GB of weights per "
               "token, %.2f GB per MTP draft step [synthetic]\n", b->synthetic, build_s, format_label(b->m),
               tb.weights / 1e9, tb.mtp_step / 1e9);
    else
        printf("# model: %s%s%s, loaded in %.1f s; %s; %s; %.2f GB of weights per token\n", b->dir,
               b->mtp_dir ? " + MTP " : "", b->mtp_dir ? b->mtp_dir : "", build_s, format_label(b->m),
               b->m->mtp.present ? "MTP head" : "no MTP head", tb.weights / 1e9);
    printf("# prompt: %s%s\n", b->prompt,
           use_chat ? ": code / prose / JSON user messages through the Qwen3.6 chat template, thinking off"
           : b->tok ? ": a fixed English text repeated and tokenized to exactly ctx tokens"
                    : ": a fixed token-id pattern of exactly ctx tokens (no tokenizer: synthetic or none in DIR)");
    if (simulated)
        printf("# acceptance: SIMULATED AL %.2f on K >= 1 rows (the spec engine's accept hook forces the accept "
               "count; random weights cannot measure acceptance) [simulated AL]\n", b->sim_al);
    printf("# greedy, %d new tokens (eos ignored), 1 warmup + %d reps, median shown; backend %s; KV cache %s\n",
           b->n_new, b->reps, b->real_be->name, kv_words[b->kv]);
    /* the graph cache (it must not grow during timed reps: each row says so) */
    if (!b->real_be->graph_begin)
        printf("# graph cache: none (the %s backend has no graphs; ops run one by one)\n", b->real_be->name);
    else if (!b->s->graphs_on)
        printf("# graph cache: off (QRT_CUDA_GRAPHS=0; kernels are launched one by one)\n");
    else
        printf("# graph cache: CUDA graphs of the greedy decode step (T=1), the verify (T=K+1), the MTP draft step and "
               "catch-up, the rollback, one per key, recorded after its first (plain) run and replayed at every "
               "position (QRT_CUDA_GRAPHS=0: off); prefill and the profiled generation run plainly\n");
    if (gpu_mem) print_memory(&mm, b->s);
    const double bw_gbs = measure_read_gbs(gpu, &d);
    if (bw_gbs > 0) printf("# read bandwidth: %.0f GB/s (one streaming read, now; the byte floors use it)\n", bw_gbs);
    fflush(stdout);
    /* the rows */
    row *rows = qrt_calloc((size_t)n_prompts * b->n_k, sizeof *rows);
    json_t *jrows = json_array(), *jparity = json_array();
    int n_rows = 0, ok = rows != NULL;
    for (int p = 0; p < n_prompts && ok; p++) {
        for (int k = 0; k < b->n_k && ok; k++) {
            row *w = &rows[n_rows++];
            w->ctx = lens[p], w->K = b->ks[k], w->simulated = simulated && b->ks[k] > 0;
            w->prompt_name = use_chat ? chat_prompts[p].name : NULL;
            b->tags = tags_for(b, w->simulated);
            ok = run_row(b, prompts[p], lens[p], w);
            b->tags = tags_for(b, 0);
            if (ok) json_array_append_new(jrows, row_json(b, w));
        }
        if (ok && b->parity) ok = run_parity(b, prompts[p], lens[p], kmax, jparity);
    }
    if (ok && gpu_mem) {
        mm.after = (double)b->real_be->mem_available();
        printf("# device memory after the rows: %.2f GB free (the ops' grow-on-demand scratch took %.2f GB)\n",
               mm.after / 1e9, (mm.session - mm.after) / 1e9);
    }
    if (ok) print_table(b, rows, n_rows);
    if (ok) print_floors(b, rows, n_rows, &tb, bw_gbs);
    int all_identical = 1;
    for (int i = 0; i < n_rows; i++) all_identical &= rows[i].identical;
    if (ok && b->json_path) {
        json_t *model =
            json_pack("{s:s, s:s, s:s, s:b, s:o, s:I, s:I}", "source", b->synthetic ? "synthetic" : "checkpoint",
                      "name", b->synthetic ? b->synthetic : b->dir, "format", format_label(b->m), "mtp",
                      b->m->mtp.present, "build_s", qrt_json_real(build_s), "weight_bytes_per_token",
                      (json_int_t)tb.weights, "mtp_step_bytes", (json_int_t)tb.mtp_step);
        json_t *j = json_pack("{s:s, s:i, s:s, s:s, s:o, s:o, s:{s:i, s:i, s:i, s:s, s:b, s:o, s:s}, s:o, s:o, s:o}",
                              "tool", "bench", "schema_version", 1, "date", date, "backend", b->real_be->name, "device",
                              qrt_devinfo_json(&d), "model", model, "settings", "n_new", b->n_new, "reps", b->reps,
                              "warmup", 1, "prompt", b->prompt, "tokenizer", b->tok != NULL, "sim_al",
                              simulated ? qrt_json_real(b->sim_al) : json_null(), "kv", kv_words[b->kv], "rows", jrows,
                              "parity", jparity, "memory", memory_json(&mm));
        ok = qrt_write_json(j, b->json_path) == 0;
        json_decref(j);
    } else {
        json_decref(jrows);
        json_decref(jparity);
    }
    for (int p = 0; p < n_prompts; p++) free(prompts[p]);
    free(rows);
    if (!ok) return 1;
    return all_identical ? 0 : 3;
}

int qrt_tool_bench(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return fputs(usage, stdout), 0;
    bench b;
    memset(&b, 0, sizeof b);
    if (!parse(argc, argv, &b)) return 2;
    int rc = run(&b);
    qrt_session_free(b.s);
    qrt_model_free(b.m);
    qrt_tokenizer_free(b.tok);
    free(b.out);
    return rc;
}
