/* qwenrt tokenize / detokenize, and the text-prompt helpers `qwenrt generate -p/--chat` uses. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"
#include "tools/tools.h"
#include "util/common.h"

static const char *usage_tokenize =
    "usage: qwenrt tokenize (-m DIR | --tokenizer FILE) [--json] TEXT\n"
    "\n"
    "Prints the token ids of TEXT (comma-separated; TEXT '-' reads stdin). Added tokens such as\n"
    "<|im_start|> written in the text are matched as single tokens.\n"
    "  -m DIR            a checkpoint folder; reads DIR/tokenizer.json\n"
    "  --tokenizer FILE  a tokenizer.json\n"
    "  --json            {\"ids\": [...]}\n";

static const char *usage_detokenize =
    "usage: qwenrt detokenize (-m DIR | --tokenizer FILE) IDS\n"
    "\n"
    "Prints the text of comma-separated token ids (bytes that are not valid UTF-8 print as U+FFFD).\n";

/* DIR/tokenizer.json or FILE → a loaded tokenizer, or NULL after printing why. */
static qrt_tokenizer *open_tokenizer(const char *cmd, const char *dir, const char *file) {
    char path[4096];
    if (!dir && !file) {
        fprintf(stderr, "qwenrt %s: no tokenizer; pass -m DIR or --tokenizer FILE\n", cmd);
        return NULL;
    }
    if (!file) {
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        file = path;
    }
    qrt_tokenizer *t;
    if (qrt_tokenizer_load(file, &t) != QRT_OK) {
        fprintf(stderr, "qwenrt %s: %s\n", cmd, qrt_last_error());
        return NULL;
    }
    return t;
}

typedef struct {
    const char *dir, *file, *positional;
    int json, help;
} tok_args;

static int parse_tok_args(const char *cmd, int argc, char **argv, tok_args *a) {
    memset(a, 0, sizeof *a);
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) a->help = 1;
        else if (!strcmp(f, "--json")) a->json = 1;
        else if ((!strcmp(f, "-m") || !strcmp(f, "--model") || !strcmp(f, "--tokenizer")) && i + 1 < argc)
            *(f[2] == 't' ? &a->file : &a->dir) = argv[++i];
        else if (!a->positional && (f[0] != '-' || !strcmp(f, "-") || (f[1] >= '0' && f[1] <= '9')))
            a->positional = f;
        else {
            fprintf(stderr, "qwenrt %s: unexpected argument '%s' (see qwenrt %s --help)\n", cmd, f, cmd);
            return 0;
        }
    }
    return 1;
}

int qrt_cmd_tokenize(int argc, char **argv) {
    tok_args a;
    if (!parse_tok_args("tokenize", argc, argv, &a)) return 2;
    if (a.help) return fputs(usage_tokenize, stdout), 0;
    if (!a.positional) return fputs(usage_tokenize, stderr), 2;
    qrt_tokenizer *t = open_tokenizer("tokenize", a.dir, a.file);
    if (!t) return 1;
    size_t len = strlen(a.positional);
    char *text = !strcmp(a.positional, "-") ? qrt_cli_read_all(stdin, &len) : NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = 0;
    if (qrt_tokenize(t, text ? text : a.positional, len, &ids, &n) != QRT_OK) {
        fprintf(stderr, "qwenrt tokenize: %s\n", qrt_last_error());
        rc = 1;
    } else {
        fputs(a.json ? "{\"ids\": [" : "", stdout);
        for (size_t i = 0; i < n; i++) printf("%s%d", i ? (a.json ? ", " : ",") : "", ids[i]);
        fputs(a.json ? "]}\n" : "\n", stdout);
    }
    free(ids), free(text);
    qrt_tokenizer_free(t);
    return rc;
}

/* "1,2,3" → ids; -1 after printing an error. */
static long parse_id_list(const char *s, int32_t **out) {
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int32_t *ids = calloc(cap, sizeof *ids);
    long n = 0;
    for (const char *p = s; ids && *p;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "qwenrt detokenize: '%s' is not a comma-separated list of token ids\n", s);
            free(ids);
            return -1;
        }
        ids[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    *out = ids;
    return ids ? n : -1;
}

int qrt_cmd_detokenize(int argc, char **argv) {
    tok_args a;
    if (!parse_tok_args("detokenize", argc, argv, &a)) return 2;
    if (a.help) return fputs(usage_detokenize, stdout), 0;
    if (!a.positional) return fputs(usage_detokenize, stderr), 2;
    int32_t *ids;
    long n = parse_id_list(a.positional, &ids);
    if (n < 0) return 2;
    qrt_tokenizer *t = open_tokenizer("detokenize", a.dir, a.file);
    int rc = 1;
    char *text;
    size_t len;
    if (t && qrt_detokenize(t, ids, (size_t)n, &text, &len) == QRT_OK) {
        fwrite(text, 1, len, stdout);
        fputc('\n', stdout);
        free(text);
        rc = 0;
    } else if (t) {
        fprintf(stderr, "qwenrt detokenize: %s\n", qrt_last_error());
    }
    free(ids);
    qrt_tokenizer_free(t);
    return rc;
}

int qrt_cli_prompt_ids(const char *cmd, const char *dir, const char *text, int chat, int think, qrt_tokenizer **tok,
                       int32_t **ids) {
    *tok = open_tokenizer(cmd, dir, NULL);
    if (!*tok) return -1;
    char *rendered = NULL;
    if (chat) {
        qrt_chat_message user = {.role = "user", .content = text};
        qrt_chat_opts opts = {.dialect = QRT_CHAT_QWEN36, .add_generation_prompt = 1, .enable_thinking = think};
        if (qrt_chat_render(&user, 1, &opts, &rendered) != QRT_OK) {
            fprintf(stderr, "qwenrt %s: %s\n", cmd, qrt_last_error());
            return -1;
        }
        text = rendered;
    }
    size_t n = 0;
    qrt_status st = qrt_tokenize(*tok, text, strlen(text), ids, &n);
    free(rendered);
    if (st != QRT_OK || n == 0 || n > INT_MAX) {
        fprintf(stderr, "qwenrt %s: %s\n", cmd, st != QRT_OK ? qrt_last_error() : "the prompt has no tokens");
        free(*ids);
        *ids = NULL;
        return -1;
    }
    return (int)n;
}
