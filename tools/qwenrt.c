/* qwenrt: the command-line entry point. One function per subcommand; each parses its own flags and
 * prints its own --help. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "server/output.h"
#include "tools/tools.h"
#include "util/argmax.h"

static const char *usage_main =
    "qwenrt: a C runtime for Qwen3.5/3.6 hybrid models (Gated DeltaNet + gated attention)\n"
    "\n"
    "usage: qwenrt COMMAND [options]    (qwenrt COMMAND --help for its options)\n"
    "       qwenrt --version            (also qwenrt version)\n"
    "\n"
    "commands:\n"
    "  inspect DIR     the config, every tensor (dtype, shape, bytes) and the bytes read per decoded token;\n"
    "                  --check DIR scans every tensor for NaN/Inf\n"
    "  logits          logits of a token sequence as JSON (for checking against a reference)\n"
    "  generate        generation from token ids or text (greedy or sampled, MTP speculative decoding)\n"
    "  tokenize        token ids of a text (-m DIR or --tokenizer FILE)\n"
    "  detokenize      text of comma-separated token ids\n"
    "  quantize IN OUT write a quantized copy of a checkpoint (--format nvfp4|fp8)\n"
    "  serve           an OpenAI-compatible HTTP server (chat/completions, completions, streaming, metrics)\n"
    "  chat            an interactive chat in the terminal\n"
    "  synth OUT       write a random-weight checkpoint of a preset shape (--preset tiny|qwen3.6-27b)\n"
    "  bench           decode benchmark (TTFT, tok/s, AL, chain/verify ms, kernel breakdown, parity); a\n"
    "                  synthetic model when no -m DIR is given\n"
    "  membw           memory bandwidth: copy/read/write by size and a sustained read (GPU or host)\n"
    "  doctor          device, clocks, thermal/power state, bandwidth vs spec sheet, and a verdict\n"
    "  tilebench       every matmul kernel on every matmul shape of a model (M = 1..256) vs measured\n"
    "                  read bandwidth, and the autotuner's pick (GPU or CPU)\n"
    "\n"
    "DIR is a Hugging Face checkpoint folder: config.json and model.safetensors (or shards listed in\n"
    "model.safetensors.index.json), read in place.\n";

static const char *usage_logits =
    "usage: qwenrt logits -m DIR --ids 1,2,3 [--pos 0,5] [--json] [-t|--threads N] [--device auto|cpu|cuda]\n"
    "\n"
    "Runs the ids through the model in one call and prints the logits after the last token and after\n"
    "every position named by --pos (0-based indices into --ids).\n"
    "  --json     {\"positions\": [p...], \"argmax\": [one per position], \"logits\": {\"<p>\": [V floats]}}\n"
    "             (default: one line per position with its argmax and top logit)\n";

static const char *usage_generate =
    "usage: qwenrt generate -m DIR [--mtp DIR] (--ids 1,2,3 | -p TEXT | -f FILE) [--chat] [--think|--no-think]\n"
    "                       [-n 32] [--stop STR]... [--spec-k K] [--temperature T] [--top-p P] [--top-k K]\n"
    "                       [--seed S] [--json] [-c|--ctx N] [-t|--threads N] [--no-eos] [--device auto|cpu|cuda]\n"
    "                       [--kv f32|bf16|fp8]\n"
    "\n"
    "Prefill the prompt, then generate -n tokens (stopping early at the model's eos token unless --no-eos).\n"
    "Greedy by default; --temperature > 0 samples (with --top-p, --top-k, --seed).\n"
    "  -p TEXT          the prompt as text, tokenized with DIR/tokenizer.json; the output streams as text.\n"
    "                   -p - reads the prompt from stdin (also --prompt)\n"
    "  -f FILE          the prompt from a text file (also --file)\n"
    "  --chat           wrap the prompt as one user message in the chat template (thinking on unless --no-think)\n"
    "  --stop STR       end generation when the generated text contains STR (not printed); repeatable, up to\n"
    "                   16; needs a text prompt (-p or -f)\n"
    "  --seed S         the sampler's seed (0..2147483647); without it a random seed is drawn and printed on\n"
    "                   stderr (\"seed: S\"), so a sampled run can be repeated\n"
    QRT_TOOL_SAMPLING_USAGE
    "  --spec-k K       MTP speculative decoding with K drafts per cycle (1..16); 0 turns it off. Default:\n"
    "                   6 when the model has MTP weights, else off. Greedy output is identical either way.\n"
    "  --mtp DIR        a folder holding mtp.safetensors (the MTP head shipped separately)\n"
    "  --kv FORMAT      KV cache format: f32 (exact; the default on the CPU), bf16 (the default on a GPU), or\n"
    "                   fp8 (e4m3, one scale per token and head)\n"
    "  --json     {\"tokens\": [ids], \"n_prompt\", \"n_new\", \"prefill_ms\", \"decode_ms\", \"decode_tok_s\",\n"
    "              \"spec\": {\"k\", \"attempts\", \"accepts\", \"al\", \"tokens_per_cycle\", \"full_accept_rate\",\n"
    "                       \"accept_at\": [rate per draft position], \"chain_ms\", \"verify_ms\"}}\n"
    "  -c N       session context in tokens (default: prompt + n; also --ctx, --ctx-size)\n"
    "  -t N       CPU threads (default: every core; also --threads)\n"
    "  --device   cuda (an error when this build or machine has none), cpu, or auto (default: cuda when a GPU\n"
    "             is present)\n"
    "A prompt longer than 512 tokens shows a prefill line on stderr while it runs, when stderr is a terminal.\n"
    "speculative counters: attempts = cycles, accepts = accepted drafts (bonus not counted), AL =\n"
    "accepts / attempts, tokens per cycle = AL + 1.\n"
    "timings: prefill_ms = prompt up to the first token's logits; decode_ms = first to last generated\n"
    "token; decode tok/s = (n_new - 1) / decode_ms * 1000.\n";

static const char *usage_inspect =
    "usage: qwenrt inspect DIR\n"
    "       qwenrt inspect --check DIR   scan every tensor for NaN/Inf; exit 1 naming the bad tensors\n";

static int die(const char *cmd, const char *msg) {
    fprintf(stderr, "qwenrt %s: %s\n", cmd, msg);
    return 1;
}

/* "1,2,3" → ids. Returns the count or -1 with a message. */
static int parse_ids(const char *cmd, const char *flag, const char *s, int32_t **out) {
    int cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int32_t *ids = calloc((size_t)cap, sizeof *ids);
    if (!ids) return -1;
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "qwenrt %s: %s: '%s' is not a comma-separated list of non-negative integers\n", cmd, flag, s);
            free(ids);
            return -1;
        }
        ids[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (n == 0) {
        fprintf(stderr, "qwenrt %s: %s is empty\n", cmd, flag);
        free(ids);
        return -1;
    }
    *out = ids;
    return n;
}

typedef struct {
    const char *model, *mtp;
    const char *ids, *pos, *prompt, *prompt_file; /* -p TEXT (or -p -: stdin), -f FILE */
    const char *stops[QRT_MAX_STOPS];
    int n_stops;
    int n, json, threads, ctx, no_eos, help, spec_k, chat, no_think, seed_given;
    qrt_sampling sampling;
    int device;    /* QRT_DEVICE_* */
    int kv_format; /* QRT_KV_* */
} args;

static int parse_float(const char *cmd, const char *flag, const char *s, float lo, float hi, float *out) {
    double v;
    if (!qrt_tool_number(cmd, flag, s, lo, hi, &v)) return 0;
    *out = (float)v;
    return 1;
}

/* Shared flag parser for the model commands; unknown flags are errors. */
static int parse_args(const char *cmd, int argc, char **argv, args *a) {
    memset(a, 0, sizeof *a);
    a->n = 32;
    a->spec_k = QRT_SPEC_DEFAULT;
    a->kv_format = QRT_KV_DEFAULT;
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1, sflag;
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) a->help = 1, takes = 0;
        else if (!strcmp(f, "--json")) a->json = 1, takes = 0;
        else if (!strcmp(f, "--no-eos")) a->no_eos = 1, takes = 0;
        else if (!strcmp(f, "--chat")) a->chat = 1, takes = 0;
        else if (!strcmp(f, "--think") || !strcmp(f, "--no-think")) a->no_think = f[2] == 'n', takes = 0;
        else if ((!strcmp(f, "-p") || !strcmp(f, "--prompt")) && v) a->prompt = v;
        else if (!v) {
            fprintf(stderr, "qwenrt %s: %s needs a value (or is unknown; see --help)\n", cmd, f);
            return 0;
        } else if (!strcmp(f, "-m") || !strcmp(f, "--model")) a->model = v;
        else if (!strcmp(f, "--ids")) a->ids = v;
        else if (!strcmp(f, "--pos")) a->pos = v;
        else if (!strcmp(f, "-f") || !strcmp(f, "--file")) a->prompt_file = v;
        else if (!strcmp(f, "--stop")) {
            if (a->n_stops == QRT_MAX_STOPS) {
                fprintf(stderr, "qwenrt %s: at most %d --stop strings\n", cmd, QRT_MAX_STOPS);
                return 0;
            }
            a->stops[a->n_stops++] = v;
        } else if (!strcmp(f, "-n")) {
            if (!qrt_tool_int(cmd, f, v, 0, 1 << 24, &a->n)) return 0;
        } else if (!strcmp(f, "-t") || !strcmp(f, "--threads")) {
            if (!qrt_tool_int(cmd, f, v, 1, 4096, &a->threads)) return 0;
        } else if (!strcmp(f, "--device")) {
            if (!strcmp(v, "auto")) a->device = QRT_DEVICE_AUTO;
            else if (!strcmp(v, "cpu")) a->device = QRT_DEVICE_CPU;
            else if (!strcmp(v, "cuda")) a->device = QRT_DEVICE_CUDA;
            else {
                fprintf(stderr, "qwenrt %s: --device expects auto, cpu or cuda, got '%s'\n", cmd, v);
                return 0;
            }
        } else if (!strcmp(f, "-c") || !strcmp(f, "--ctx") || !strcmp(f, "--ctx-size")) {
            if (!qrt_tool_int(cmd, f, v, 1, 1 << 24, &a->ctx)) return 0;
        } else if (!strcmp(f, "--mtp")) a->mtp = v;
        else if (!strcmp(f, "--kv")) {
            if (!strcmp(v, "f32")) a->kv_format = QRT_KV_F32;
            else if (!strcmp(v, "bf16")) a->kv_format = QRT_KV_BF16;
            else if (!strcmp(v, "fp8")) a->kv_format = QRT_KV_FP8;
            else {
                fprintf(stderr, "qwenrt %s: --kv expects f32, bf16 or fp8, got '%s'\n", cmd, v);
                return 0;
            }
        }
        else if (!strcmp(f, "--spec-k")) {
            if (!qrt_tool_int(cmd, f, v, 0, QRT_SPEC_MAX_K, &a->spec_k)) return 0;
        } else if (!strcmp(f, "--temperature")) {
            if (!parse_float(cmd, f, v, 0, 100, &a->sampling.temperature)) return 0;
        } else if (!strcmp(f, "--top-p")) {
            if (!parse_float(cmd, f, v, 0, 1, &a->sampling.top_p)) return 0;
        } else if (!strcmp(f, "--top-k")) {
            if (!qrt_tool_int(cmd, f, v, 0, 1 << 22, &a->sampling.top_k)) return 0;
        } else if (!strcmp(f, "--seed")) {
            int seed;
            if (!qrt_tool_int(cmd, f, v, 0, INT32_MAX, &seed)) return 0;
            a->sampling.seed = (uint64_t)seed;
            a->seed_given = 1;
        } else if ((sflag = qrt_tool_sampling_flag(cmd, f, v, &a->sampling)) != 0) {
            if (sflag < 0) return 0;
        } else {
            fprintf(stderr, "qwenrt %s: unknown option '%s' (see qwenrt %s --help)\n", cmd, f, cmd);
            return 0;
        }
        i += takes;
    }
    return 1;
}

static qrt_model *load_model(const char *cmd, const args *a) {
    if (!a->model) {
        fprintf(stderr, "qwenrt %s: no model given; pass -m DIR (a Hugging Face checkpoint folder)\n", cmd);
        return NULL;
    }
    qrt_load_opts opts = {.n_threads = a->threads, .show_progress = 1, .mtp_dir = a->mtp, .device = a->device,
                          .kv_format = a->kv_format};
    qrt_model *m;
    if (qrt_model_load(a->model, &opts, &m) != QRT_OK) {
        fprintf(stderr, "qwenrt %s: %s\n", cmd, qrt_last_error());
        return NULL;
    }
    return m;
}

/* A float as JSON: NaN and Inf have no JSON spelling ("nan" would make the whole output unparseable), so null. */
static void print_json_float(float v) {
    if (isfinite(v)) printf("%.9g", v);
    else printf("null");
}

/* Row i's greedy pick as JSON, or null (with a warning on stderr) when its logits are not all finite. */
static void print_json_argmax(const float *row, int32_t V, int32_t pos) {
    if (qrt_all_finite(row, (size_t)V)) {
        printf("%d", qrt_argmax(row, V));
        return;
    }
    fprintf(stderr, "qwenrt logits: warning: non-finite logits at position %d (printed as null); run `qwenrt inspect "
            "--check DIR` on the checkpoint\n", pos);
    printf("null");
}

static int cmd_logits(int argc, char **argv) {
    args a;
    if (!parse_args("logits", argc, argv, &a)) return 2;
    if (a.help) return fputs(usage_logits, stdout), 0;
    if (!a.ids) return die("logits", "no input; pass --ids 1,2,3");
    int32_t *ids = NULL, *pos = NULL;
    int n = parse_ids("logits", "--ids", a.ids, &ids), n_pos = 0;
    if (n < 0) return 2;
    if (a.pos && (n_pos = parse_ids("logits", "--pos", a.pos, &pos)) < 0) return free(ids), 2;
    /* the positions asked for plus the last, sorted, each once */
    int32_t *rows = calloc((size_t)n_pos + 1, sizeof *rows);
    int n_rows = 0;
    for (int p = 0; p <= n - 1; p++) {
        int want = p == n - 1;
        for (int i = 0; i < n_pos && !want; i++) want = pos[i] == p;
        if (want) rows[n_rows++] = p;
    }
    for (int i = 0; i < n_pos; i++)
        if (pos[i] >= n) {
            fprintf(stderr, "qwenrt logits: --pos %d is past the last of the %d ids\n", pos[i], n);
            free(ids), free(pos), free(rows);
            return 2;
        }
    qrt_model *m = load_model("logits", &a);
    int rc = 1;
    qrt_session *s = NULL;
    float *logits = NULL;
    if (m && qrt_session_new(m, n, &s) == QRT_OK) {
        const int32_t V = qrt_model_vocab(m);
        logits = calloc((size_t)n_rows * V, sizeof(float));
        if (logits && qrt_forward(s, ids, n, rows, n_rows, logits) == QRT_OK) {
            rc = 0;
            if (a.json) {
                printf("{\"positions\": [");
                for (int i = 0; i < n_rows; i++) printf("%s%d", i ? ", " : "", rows[i]);
                printf("], \"argmax\": [");
                for (int i = 0; i < n_rows; i++) {
                    printf("%s", i ? ", " : "");
                    print_json_argmax(logits + (size_t)i * V, V, rows[i]);
                }
                printf("], \"logits\": {");
                for (int i = 0; i < n_rows; i++) {
                    printf("%s\"%d\": [", i ? ", " : "", rows[i]);
                    for (int32_t v = 0; v < V; v++) {
                        printf("%s", v ? ", " : "");
                        print_json_float(logits[(size_t)i * V + v]);
                    }
                    printf("]");
                }
                printf("}}\n");
            } else {
                for (int i = 0; i < n_rows; i++) {
                    int32_t best = qrt_argmax(logits + (size_t)i * V, V);
                    printf("pos %d  argmax %d  logit %.6f\n", rows[i], best, logits[(size_t)i * V + best]);
                }
            }
        }
    }
    if (m && rc) fprintf(stderr, "qwenrt logits: %s\n", qrt_last_error());
    free(logits);
    qrt_session_free(s);
    qrt_model_free(m);
    free(ids), free(pos), free(rows);
    return rc;
}

/* What generate does with each new token: ends the prefill line, prints the id or (through the detokenizer)
 * the text, and ends generation when the text reaches a --stop string (the string itself not printed). */
typedef struct {
    qrt_detok_stream *stream; /* text output (-p / -f); NULL with --ids */
    qrt_stop_filter stop;
    qrt_cli_ticker *ticker;
    const qrt_session *session; /* its position is the prefill line's tokens done */
    int print, printed, failed;
} gen_sink;

static int print_text(void *user, const char *s, size_t n) {
    const gen_sink *g = user;
    if (g->print) fwrite(s, 1, n, stdout), fflush(stdout);
    return 1;
}

/* The cancel hook, called between prefill pieces: never cancels, moves the prefill line on. */
static int show_prefill_progress(void *user) {
    const gen_sink *g = user;
    qrt_cli_ticker_progress(g->ticker, qrt_session_pos(g->session));
    return 0;
}

static int on_token(int32_t id, void *user) {
    gen_sink *g = user;
    qrt_cli_ticker_stop(&g->ticker);
    if (!g->stream) {
        if (g->print) printf("%s%d", g->printed++ ? " " : "", id), fflush(stdout);
        return 0;
    }
    const char *text;
    size_t len;
    if (qrt_detok_stream_push(g->stream, id, &text, &len) != QRT_OK || !qrt_stop_push(&g->stop, text, len, print_text, g)) {
        fprintf(stderr, "\nqwenrt generate: %s\n", qrt_last_error());
        g->failed = 1;
        return 1;
    }
    return g->stop.stopped;
}

/* After generation: the detokenizer's unfinished tail (an incomplete UTF-8 character prints as U+FFFD) and
 * what the stop filter held back, unless a stop string matched. */
static void finish_text(gen_sink *g) {
    if (!g->stream || g->stop.stopped) return;
    size_t tail = 0;
    const char *rest = qrt_detok_stream_flush(g->stream, &tail);
    qrt_stop_push(&g->stop, rest, tail, print_text, g);
    if (!g->stop.stopped) qrt_stop_finish(&g->stop, print_text, g);
}

/* The prompt text of -p TEXT, -p - (stdin) or -f FILE, malloc'd; NULL after printing why. */
static char *prompt_text(const char *cmd, const args *a) {
    if (a->prompt && a->prompt_file) {
        fprintf(stderr, "qwenrt %s: -p and -f both give the prompt; pass one of them\n", cmd);
        return NULL;
    }
    if (a->prompt_file) return qrt_cli_read_prompt(cmd, "-f", a->prompt_file);
    if (!strcmp(a->prompt, "-")) return qrt_cli_read_prompt(cmd, "-p", "-");
    char *copy = strdup(a->prompt);
    if (!copy) fprintf(stderr, "qwenrt %s: out of memory\n", cmd);
    return copy;
}

/* Sampling without --seed draws a seed and says which, so the run can be repeated with --seed. */
static void pick_seed(args *a) {
    if (a->sampling.temperature <= 0 || a->seed_given) return;
    a->sampling.seed = qrt_cli_random_seed(INT32_MAX);
    fprintf(stderr, "seed: %llu\n", (unsigned long long)a->sampling.seed);
}

static double rate(int64_t num, int64_t den) { return den ? (double)num / (double)den : 0; }

static void print_spec_json(const qrt_gen_stats *g) {
    printf(", \"spec\": {\"k\": %d, \"attempts\": %lld, \"accepts\": %lld, \"al\": %.4f, \"tokens_per_cycle\": %.4f, "
           "\"full_accept_rate\": %.4f, \"accept_at\": [", g->spec_k, (long long)g->attempts, (long long)g->accepts,
           rate(g->accepts, g->attempts), rate(g->accepts, g->attempts) + 1, rate(g->full_accepts, g->attempts));
    for (int i = 0; i < g->spec_k; i++) printf("%s%.4f", i ? ", " : "", rate(g->accepted_at[i], g->attempts));
    printf("], \"chain_ms\": %.3f, \"verify_ms\": %.3f}", g->chain_ms, g->verify_ms);
}

static void print_spec_line(const qrt_gen_stats *g) {
    fprintf(stderr, "speculative K=%d: %lld cycles, %lld drafts accepted, AL %.2f, %.2f tokens/cycle, full accepts "
            "%.0f%%; per position:", g->spec_k, (long long)g->attempts, (long long)g->accepts,
            rate(g->accepts, g->attempts), rate(g->accepts, g->attempts) + 1, 100 * rate(g->full_accepts, g->attempts));
    for (int i = 0; i < g->spec_k; i++) fprintf(stderr, " %.2f", rate(g->accepted_at[i], g->attempts));
    fprintf(stderr, "; chain %.2f ms, verify %.2f ms per cycle\n", g->attempts ? g->chain_ms / g->attempts : 0,
            g->attempts ? g->verify_ms / g->attempts : 0);
}

static void print_generate_result(const args *a, const int32_t *out, const qrt_gen_stats *gs) {
    double tps = gs->n_new > 1 && gs->decode_ms > 0 ? (gs->n_new - 1) / gs->decode_ms * 1e3 : 0;
    if (a->json) {
        printf("{\"tokens\": [");
        for (int i = 0; i < gs->n_new; i++) printf("%s%d", i ? ", " : "", out[i]);
        printf("], \"n_prompt\": %d, \"n_new\": %d, \"prefill_ms\": %.3f, \"decode_ms\": %.3f, "
               "\"decode_tok_s\": %.2f", gs->n_prompt, gs->n_new, gs->prefill_ms, gs->decode_ms, tps);
        if (gs->spec_k) print_spec_json(gs);
        printf("}\n");
    } else {
        printf("\n");
        fprintf(stderr, "prompt %d tokens, prefill %.1f ms; %d new tokens, decode %.1f ms (%.2f tok/s)\n",
                gs->n_prompt, gs->prefill_ms, gs->n_new, gs->decode_ms, tps);
        if (gs->spec_k) print_spec_line(gs);
    }
}

static int cmd_generate(int argc, char **argv) {
    args a;
    if (!parse_args("generate", argc, argv, &a)) return 2;
    if (a.help) return fputs(usage_generate, stdout), 0;
    if (!a.ids && !a.prompt && !a.prompt_file) return die("generate", "no prompt; pass --ids 1,2,3, -p TEXT or -f FILE");
    if (a.n_stops && !a.prompt && !a.prompt_file)
        return die("generate", "--stop matches the generated text, so it needs a text prompt (-p TEXT or -f FILE), "
                   "not --ids");
    int32_t *ids = NULL;
    qrt_tokenizer *tok = NULL; /* with -p / -f: the output streams as text */
    gen_sink g = {.print = !a.json};
    char *text = a.prompt || a.prompt_file ? prompt_text("generate", &a) : NULL;
    if ((a.prompt || a.prompt_file) && !text) return 2;
    int n = text ? qrt_cli_prompt_ids("generate", a.model, text, a.chat, !a.no_think, &tok, &ids)
                 : parse_ids("generate", "--ids", a.ids, &ids);
    free(text);
    if (n < 0 || (tok && qrt_detok_stream_new(tok, &g.stream) != QRT_OK) ||
        !qrt_stop_init(&g.stop, a.stops, a.n_stops))
        return qrt_detok_stream_free(g.stream), qrt_tokenizer_free(tok), free(ids), 2;
    pick_seed(&a);
    qrt_model *m = load_model("generate", &a);
    qrt_session *s = NULL;
    int32_t *out = calloc((size_t)a.n + 1, sizeof *out);
    int rc = 1;
    int ctx = a.ctx ? a.ctx : n + a.n;
    if (m && !qrt_tool_check_logit_bias("generate", &a.sampling, qrt_model_vocab(m))) rc = 2;
    else if (m && out && (!tok || qrt_tokenizer_check_model(tok, m, a.model) == QRT_OK) &&
             qrt_session_new(m, ctx, &s) == QRT_OK) {
        qrt_gen_opts go = {.max_new = a.n, .stop_eos = !a.no_eos, .spec_k = a.spec_k, .sampling = a.sampling,
                           .on_token = on_token, .user = &g};
        qrt_gen_stats gs;
        g.ticker = qrt_cli_ticker_start(n);
        g.session = s;
        if (g.ticker) go.cancel = show_prefill_progress;
        qrt_status st = qrt_generate(s, ids, n, &go, out, &gs);
        qrt_cli_ticker_stop(&g.ticker);
        if (st == QRT_OK && !g.failed) {
            rc = 0;
            finish_text(&g);
            print_generate_result(&a, out, &gs);
        }
    }
    if (m && rc == 1 && !g.failed) fprintf(stderr, "qwenrt generate: %s\n", qrt_last_error());
    qrt_stop_free(&g.stop);
    qrt_detok_stream_free(g.stream);
    qrt_tokenizer_free(tok);
    qrt_session_free(s);
    qrt_model_free(m);
    free(ids);
    free(out);
    return rc;
}

static int cmd_inspect(int argc, char **argv) {
    if (argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) return fputs(usage_inspect, stdout), 0;
    const int check = argc >= 1 && !strcmp(argv[0], "--check");
    if (argc != 1 + check) {
        fputs(usage_inspect, stderr);
        return 2;
    }
    return check ? qrt_tool_inspect_check(argv[1], stdout) : qrt_tool_inspect(argv[0], 0, stdout);
}

/* The build's identity, fixed at configure time by CMakeLists.txt (so a bug report can name it). */
#ifndef QRT_VERSION
#define QRT_VERSION "unknown"
#endif
#ifndef QRT_GIT_COMMIT
#define QRT_GIT_COMMIT "unknown"
#endif
#ifndef QRT_CUDA_ARCHS
#define QRT_CUDA_ARCHS "none (CPU-only build)"
#endif

static void print_version(void) {
    printf("qwenrt %s\ncommit: %s\ncuda architectures: %s\n", QRT_VERSION, QRT_GIT_COMMIT, QRT_CUDA_ARCHS);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(usage_main, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) return print_version(), 0;
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc - 2, argv + 2);
    if (!strcmp(cmd, "logits")) return cmd_logits(argc - 2, argv + 2);
    if (!strcmp(cmd, "generate")) return cmd_generate(argc - 2, argv + 2);
    if (!strcmp(cmd, "quantize")) return qrt_tool_quantize(argc - 2, argv + 2);
    if (!strcmp(cmd, "synth")) return qrt_tool_synth(argc - 2, argv + 2);
    if (!strcmp(cmd, "bench")) return qrt_tool_bench(argc - 2, argv + 2);
    if (!strcmp(cmd, "membw")) return qrt_tool_membw(argc - 2, argv + 2);
    if (!strcmp(cmd, "doctor")) return qrt_tool_doctor(argc - 2, argv + 2);
    if (!strcmp(cmd, "tokenize")) return qrt_cmd_tokenize(argc - 2, argv + 2);
    if (!strcmp(cmd, "detokenize")) return qrt_cmd_detokenize(argc - 2, argv + 2);
    if (!strcmp(cmd, "serve")) return qrt_cmd_serve(argc - 2, argv + 2);
    if (!strcmp(cmd, "chat")) return qrt_cmd_chat(argc - 2, argv + 2);
    if (!strcmp(cmd, "tilebench")) return qrt_tool_tilebench(argc - 2, argv + 2);
    fprintf(stderr, "qwenrt: unknown command '%s'\n\n%s", cmd, usage_main);
    return 2;
}
