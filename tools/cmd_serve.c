/* qwenrt serve (the OpenAI-compatible HTTP server) and qwenrt chat (an interactive terminal chat). */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/output.h"
#include "server/reuse.h"
#include "server/server.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"
#include "tools/tools.h"

static const char *usage_serve =
    "usage: qwenrt serve -m DIR [--mtp DIR] [--host 127.0.0.1] [--port 8080] [--queue N] [--max-body BYTES]\n"
    "                    [-c|--ctx N] [--spec-k K] [--no-prefix-reuse] [--template qwen3.5|qwen3.6]\n"
    "                    [-t|--threads N] [--device auto|cpu|cuda] [--alias NAME]... [--shutdown-grace SECONDS]\n"
    "\n"
    "An OpenAI-compatible HTTP server: POST /v1/chat/completions, POST /v1/completions (streamed with\n"
    "\"stream\": true), GET /v1/models, /health, /metrics (Prometheus). One generation runs at a time; up to\n"
    "--queue requests (default 16) wait, more get 503. DIR holds the checkpoint and tokenizer.json.\n"
    "  --host HOST         the address to listen on: an IPv4 or IPv6 address (::1, [::1], :: for every\n"
    "                      interface) or a host name such as localhost (default 127.0.0.1)\n"
    "  --port 0            any free port (the chosen one is printed)\n"
    "  --max-body BYTES    larger request bodies get 413 (default 8 MiB)\n"
    "  -c N                the session's context in tokens (default: the config's maximum, as far as free\n"
    "                      memory allows, said at start; also --ctx, --ctx-size)\n"
    "  -t N                CPU threads (default: every core; also --threads)\n"
    "  --spec-k K          MTP drafts per cycle (default: 6 with an MTP head, else 0); a request that continues\n"
    "                      the previous one speculates too, unless that one decoded without speculation\n"
    "  --no-prefix-reuse   prefill every prompt in full (by default a prompt that extends the previous\n"
    "                      request's tokens continues from its state, MTP cache included)\n"
    "  --template          chat template dialect (default qwen3.6; see src/tokenizer/chat.h)\n"
    "Requests choose their own sampling and stop strings (the OpenAI fields temperature, top_p, stop, ...).\n"
    "  --alias NAME        another name a request's \"model\" may give (repeatable); the id is DIR's folder name,\n"
    "                      and any other name gets 404 model_not_found\n"
    "  --shutdown-grace S  after SIGINT / SIGTERM, new requests get 503 while running and queued ones have S\n"
    "                      seconds to finish (default 10); one cut after that ends with an error, never as complete\n"
    "Requests may set min_p, repetition_penalty, presence_penalty, frequency_penalty, logit_bias and logprobs;\n"
    "any of these decodes that request without speculation (drafts are verified against the raw logits).\n"
    "Stop with SIGINT or SIGTERM.\n";

static const char *usage_chat =
    "usage: qwenrt chat -m DIR [--mtp DIR] [--system TEXT] [--no-think] [--hide-thinking] [-n MAX] [--spec-k K]\n"
    "                   [--stop STR]... [--temperature T] [--top-p P] [--top-k K] [--seed S] [-c|--ctx N]\n"
    "                   [-t|--threads N] [--device auto|cpu|cuda]\n"
    "\n"
    "An interactive chat in the terminal; the answer streams as it is generated, the model's thinking dimmed\n"
    "(or not shown with --hide-thinking). Commands: /reset starts a new conversation, /exit (or Ctrl-D) quits.\n"
    "Past reasoning stays in the conversation (Qwen3.6 preserve_thinking), so each turn continues from the\n"
    "previous one's state instead of prefilling the whole conversation again, speculating as the first did.\n"
    "  -n MAX           at most MAX tokens per answer (default 4096)\n"
    "  --stop STR       end an answer when its text contains STR (not shown); repeatable, up to 16\n"
    "  --temperature T  sampling temperature (default 0.7; 0 is greedy), --top-p (0.95), --top-k (20)\n"
    "  --seed S         the sampler's seed (0..4294967295); without it a random seed is drawn and printed\n"
    "                   on stderr (\"seed: S\"), so the chat can be repeated\n"
    "  -c N             the conversation's context in tokens (default: the config's maximum, as far as free\n"
    "                   memory allows, said at start; also --ctx, --ctx-size)\n"
    "  -t N             CPU threads (default: every core; also --threads)\n"
    "A prompt longer than 512 tokens shows a prefill line on stderr while it runs, when stderr is a terminal.\n"
    QRT_TOOL_SAMPLING_USAGE;

#define MAX_ALIASES 16

typedef struct {
    const char *model, *mtp, *host, *system;
    const char *stops[QRT_MAX_STOPS];
    int n_stops, seed_given;
    int port, queue, threads, device, ctx, spec_k, no_reuse, no_think, hide_thinking, help, n;
    size_t max_body;
    qrt_chat_dialect dialect;
    qrt_sampling sampling;
    double shutdown_grace;
    const char *aliases[MAX_ALIASES];
    int n_aliases;
} serve_args;

static int parse(const char *cmd, int argc, char **argv, serve_args *a) {
    memset(a, 0, sizeof *a);
    a->host = "127.0.0.1", a->port = 8080, a->queue = 16, a->max_body = 8u << 20, a->ctx = 0;
    a->spec_k = QRT_SPEC_DEFAULT, a->dialect = QRT_CHAT_QWEN36, a->n = 4096, a->shutdown_grace = 10;
    a->sampling.temperature = 0.7f, a->sampling.top_p = 0.95f, a->sampling.top_k = 20;
    int chat = !strcmp(cmd, "chat");
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x;
        int sflag = 0;
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) a->help = 1;
        else if (!chat && !strcmp(f, "--no-prefix-reuse")) a->no_reuse = 1;
        else if (chat && !strcmp(f, "--no-think")) a->no_think = 1;
        else if (chat && !strcmp(f, "--hide-thinking")) a->hide_thinking = 1;
        else if (!v) return fprintf(stderr, "qwenrt %s: unknown option '%s' or it needs a value (see --help)\n", cmd, f), 0;
        else if (chat && (sflag = qrt_tool_sampling_flag(cmd, f, v, &a->sampling)) != 0) {
            if (sflag < 0) return 0;
            i++;
        } else if (!chat && !strcmp(f, "--alias")) {
            if (a->n_aliases >= MAX_ALIASES) return fprintf(stderr, "qwenrt serve: at most %d --alias names\n", MAX_ALIASES), 0;
            a->aliases[a->n_aliases++] = v, i++;
        } else if (!strcmp(f, "-m") || !strcmp(f, "--model")) a->model = v, i++;
        else if (!strcmp(f, "--mtp")) a->mtp = v, i++;
        else if (!chat && !strcmp(f, "--host")) a->host = v, i++;
        else if (chat && !strcmp(f, "--system")) a->system = v, i++;
        else if (chat && !strcmp(f, "--stop")) {
            if (a->n_stops == QRT_MAX_STOPS)
                return fprintf(stderr, "qwenrt %s: at most %d --stop strings\n", cmd, QRT_MAX_STOPS), 0;
            a->stops[a->n_stops++] = v, i++;
        }
        else if (!strcmp(f, "--device")) {
            if (!strcmp(v, "auto")) a->device = QRT_DEVICE_AUTO;
            else if (!strcmp(v, "cpu")) a->device = QRT_DEVICE_CPU;
            else if (!strcmp(v, "cuda")) a->device = QRT_DEVICE_CUDA;
            else return fprintf(stderr, "qwenrt %s: --device expects auto, cpu or cuda, got '%s'\n", cmd, v), 0;
            i++;
        } else if (!chat && !strcmp(f, "--template")) {
            if (!strcmp(v, "qwen3.5")) a->dialect = QRT_CHAT_QWEN35;
            else if (!strcmp(v, "qwen3.6")) a->dialect = QRT_CHAT_QWEN36;
            else return fprintf(stderr, "qwenrt %s: --template expects qwen3.5 or qwen3.6, got '%s'\n", cmd, v), 0;
            i++;
        } else {
            struct { const char *flag; double lo, hi; int server_only, chat_only; } nums[] = {
                {"--port", 0, 65535, 1, 0}, {"--queue", 0, 100000, 1, 0}, {"--max-body", 1, 1e12, 1, 0},
                {"--ctx", 16, 1 << 24, 0, 0}, {"--threads", 1, 4096, 0, 0}, {"--spec-k", 0, QRT_SPEC_MAX_K, 0, 0},
                {"-n", 1, 1 << 24, 0, 1}, {"--temperature", 0, 100, 0, 1}, {"--top-p", 0, 1, 0, 1},
                {"--top-k", 0, 1 << 22, 0, 1}, {"--seed", 0, 4294967295.0, 0, 1},
                {"--shutdown-grace", 0, 86400, 1, 0},
            };
            /* llama.cpp's spellings of the same options */
            const char *name = !strcmp(f, "-c") || !strcmp(f, "--ctx-size") ? "--ctx" : !strcmp(f, "-t") ? "--threads" : f;
            int k = -1;
            for (int j = 0; j < (int)(sizeof nums / sizeof nums[0]); j++)
                if (!strcmp(name, nums[j].flag) && !(chat && nums[j].server_only) && !(!chat && nums[j].chat_only)) k = j;
            if (k < 0) return fprintf(stderr, "qwenrt %s: unknown option '%s' (see qwenrt %s --help)\n", cmd, f, cmd), 0;
            int real = k == 7 || k == 8; /* --temperature, --top-p; the others are counts */
            if (!(real ? qrt_tool_number : qrt_tool_whole)(cmd, f, v, nums[k].lo, nums[k].hi, &x)) return 0;
            switch (k) {
            case 0: a->port = (int)x; break;
            case 1: a->queue = (int)x; break;
            case 2: a->max_body = (size_t)x; break;
            case 3: a->ctx = (int)x; break;
            case 4: a->threads = (int)x; break;
            case 5: a->spec_k = (int)x; break;
            case 6: a->n = (int)x; break;
            case 7: a->sampling.temperature = (float)x; break;
            case 8: a->sampling.top_p = (float)x; break;
            case 9: a->sampling.top_k = (int32_t)x; break;
            case 10: a->sampling.seed = (uint64_t)x, a->seed_given = 1; break;
            default: a->shutdown_grace = x; break;
            }
            i++;
        }
    }
    if (!a->help && !a->model) return fprintf(stderr, "qwenrt %s: no model; pass -m DIR (checkpoint + tokenizer.json)\n", cmd), 0;
    return 1;
}

int qrt_cmd_serve(int argc, char **argv) {
    serve_args a;
    if (!parse("serve", argc, argv, &a)) return 2;
    if (a.help) return fputs(usage_serve, stdout), 0;
    qrt_serve_opts o = {.host = a.host, .port = a.port, .max_body = a.max_body, .shutdown_grace = a.shutdown_grace,
                        .aliases = a.aliases, .n_aliases = a.n_aliases,
                        .worker = {.model_dir = a.model, .mtp_dir = a.mtp, .threads = a.threads, .device = a.device,
                                   .ctx = a.ctx, .spec_k = a.spec_k, .prefix_reuse = !a.no_reuse,
                                   .queue_max = a.queue, .dialect = a.dialect}};
    return qrt_serve(&o);
}

/* ------------------------------------------------------------------------------------------------
 * qwenrt chat */

#define DIM "\033[2m"
#define PLAIN "\033[0m"

typedef struct {
    const qrt_tokenizer *tok;
    qrt_detok_stream *detok;
    qrt_output out;
    size_t reasoning_shown, content_shown;
    int32_t stop_ids[3];
    int hide_thinking, in_dim, color;
    qrt_cli_ticker *ticker; /* the prefill line of a long prompt, until the first token */
    const qrt_session *session; /* its position is the prefill line's tokens done */
} chat_turn;

static void show_new_text(chat_turn *t) {
    const qrt_output *o = &t->out;
    if (o->reasoning.n > t->reasoning_shown && !t->hide_thinking) {
        if (t->color && !t->in_dim) fputs(DIM, stdout), t->in_dim = 1;
        fwrite(o->reasoning.p + t->reasoning_shown, 1, o->reasoning.n - t->reasoning_shown, stdout);
    }
    t->reasoning_shown = o->reasoning.n;
    if (o->content.n > t->content_shown) {
        if (t->in_dim) fputs(PLAIN, stdout), t->in_dim = 0;
        if (t->content_shown == 0 && t->reasoning_shown && !t->hide_thinking) fputs("\n\n", stdout);
        fwrite(o->content.p + t->content_shown, 1, o->content.n - t->content_shown, stdout);
    }
    t->content_shown = o->content.n;
    fflush(stdout);
}

/* The cancel hook, called between prefill pieces: never cancels, moves the prefill line on. */
static int show_prefill_progress(void *user) {
    const chat_turn *t = user;
    qrt_cli_ticker_progress(t->ticker, qrt_session_pos(t->session));
    return 0;
}

static int chat_token(int32_t id, void *user) {
    chat_turn *t = user;
    qrt_cli_ticker_stop(&t->ticker);
    for (int i = 0; i < 3; i++)
        if (t->stop_ids[i] == id) return 1;
    const char *text = "";
    size_t len = 0, ignored;
    if (qrt_tokenizer_token_bytes(t->tok, id, &ignored) && qrt_detok_stream_push(t->detok, id, &text, &len) != QRT_OK)
        return 1;
    qrt_output_push(&t->out, text, len);
    show_new_text(t);
    return t->out.stopped; /* a --stop string */
}

/* One assistant turn for the conversation so far; appends the assistant message to msgs. */
static int chat_reply(qrt_reuse *r, const qrt_tokenizer *tok, json_t *msgs, const serve_args *a, const int32_t stop_ids[3]) {
    char *msgs_text = json_dumps(msgs, JSON_COMPACT), *prompt = NULL;
    qrt_chat_opts co = {.dialect = QRT_CHAT_QWEN36, .add_generation_prompt = 1, .enable_thinking = !a->no_think,
                        .preserve_thinking = 1};
    int32_t *ids = NULL;
    size_t n = 0;
    int ok = msgs_text && qrt_chat_render_json(msgs_text, &co, &prompt) == QRT_OK &&
             qrt_tokenize(tok, prompt, strlen(prompt), &ids, &n) == QRT_OK && n <= INT32_MAX;
    free(msgs_text), free(prompt);
    chat_turn t = {.tok = tok, .hide_thinking = a->hide_thinking, .color = isatty(1)};
    memcpy(t.stop_ids, stop_ids, sizeof t.stop_ids);
    int32_t *out = calloc((size_t)a->n + 1, sizeof *out);
    ok = ok && out && qrt_detok_stream_new(tok, &t.detok) == QRT_OK &&
         qrt_output_init(&t.out, !a->no_think, 0, a->stops, a->n_stops);
    qrt_gen_opts go = {.max_new = a->n, .stop_eos = 1, .spec_k = a->spec_k, .sampling = a->sampling,
                       .on_token = chat_token, .user = &t};
    qrt_gen_stats gs;
    int32_t reused = 0;
    if (ok) t.ticker = qrt_cli_ticker_start((int)n);
    t.session = r->s;
    if (t.ticker) go.cancel = show_prefill_progress;
    if (ok && qrt_reuse_generate(r, ids, (int32_t)n, &go, out, &gs, &reused) != QRT_OK) ok = 0;
    qrt_cli_ticker_stop(&t.ticker);
    if (ok) {
        size_t tail_len;
        const char *tail = qrt_detok_stream_flush(t.detok, &tail_len);
        if (!t.out.stopped) qrt_output_push(&t.out, tail, tail_len);
        qrt_output_finish(&t.out);
        show_new_text(&t);
        if (t.in_dim) fputs(PLAIN, stdout);
        double tps = gs.n_new > 1 && gs.decode_ms > 0 ? (gs.n_new - 1) / gs.decode_ms * 1e3 : 0;
        fprintf(stderr, "\n%s[%d prompt tokens (%d reused), prefill %.0f ms; %d tokens at %.1f tok/s]%s\n",
                t.color ? DIM : "", (int)n, reused, gs.prefill_ms, gs.n_new, tps, t.color ? PLAIN : "");
        json_t *reply = json_pack("{s:s, s:s%}", "role", "assistant", "content", t.out.content.p ? t.out.content.p : "",
                                  t.out.content.n);
        if (t.out.reasoning.n)
            json_object_set_new(reply, "reasoning_content", json_stringn(t.out.reasoning.p, t.out.reasoning.n));
        json_array_append_new(msgs, reply);
    } else {
        fprintf(stderr, "\nqwenrt chat: %s\n", qrt_last_error());
    }
    qrt_output_free(&t.out);
    qrt_detok_stream_free(t.detok);
    free(ids), free(out);
    return ok;
}

static json_t *new_conversation(const char *system) {
    json_t *msgs = json_array();
    if (system) json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", system));
    return msgs;
}

int qrt_cmd_chat(int argc, char **argv) {
    serve_args a;
    if (!parse("chat", argc, argv, &a)) return 2;
    if (a.help) return fputs(usage_chat, stdout), 0;
    if (a.sampling.temperature > 0 && !a.seed_given) { /* said once, so the whole chat can be repeated */
        a.sampling.seed = qrt_cli_random_seed(UINT32_MAX);
        fprintf(stderr, "seed: %llu\n", (unsigned long long)a.sampling.seed);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", a.model);
    qrt_tokenizer *tok = NULL;
    qrt_model *m = NULL;
    qrt_reuse r = {0};
    qrt_load_opts lo = {.n_threads = a.threads, .show_progress = 1, .mtp_dir = a.mtp, .device = a.device,
                        .kv_format = QRT_KV_DEFAULT};
    if (qrt_tokenizer_load(path, &tok) != QRT_OK || qrt_model_load(a.model, &lo, &m) != QRT_OK ||
        qrt_tokenizer_check_model(tok, m, a.model) != QRT_OK || qrt_reuse_init(&r, m, a.ctx, 1) != QRT_OK) {
        fprintf(stderr, "qwenrt chat: %s\n", qrt_last_error());
        qrt_tokenizer_free(tok), qrt_model_free(m);
        return 1;
    }
    if (!qrt_tool_check_logit_bias("chat", &a.sampling, qrt_model_vocab(m))) {
        qrt_reuse_free(&r), qrt_tokenizer_free(tok), qrt_model_free(m);
        return 2;
    }
    int32_t stop_ids[3] = {qrt_tokenizer_token_id(tok, "<|im_end|>"), qrt_tokenizer_token_id(tok, "<|endoftext|>"),
                           qrt_model_eos(m)};
    json_t *msgs = new_conversation(a.system);
    char *line = NULL;
    size_t cap = 0;
    fprintf(stderr, "qwenrt chat: /reset starts over, /exit quits\n");
    for (;;) {
        fputs("> ", stdout);
        fflush(stdout);
        ssize_t got = getline(&line, &cap, stdin);
        if (got < 0) break;
        while (got && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
        if (!got) continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) {
            json_decref(msgs);
            msgs = new_conversation(a.system);
            qrt_reuse_reset(&r);
            fprintf(stderr, "(new conversation)\n");
            continue;
        }
        size_t bad_at;
        if (!qrt_utf8_valid((const uint8_t *)line, (size_t)got, &bad_at)) {
            fprintf(stderr, "qwenrt chat: the input is not valid UTF-8 (byte %zu); type it again\n", bad_at);
            continue;
        }
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", line));
        if (!chat_reply(&r, tok, msgs, &a, stop_ids)) json_array_remove(msgs, json_array_size(msgs) - 1);
    }
    free(line);
    json_decref(msgs);
    qrt_reuse_free(&r);
    qrt_model_free(m);
    qrt_tokenizer_free(tok);
    return 0;
}
