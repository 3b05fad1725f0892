/* Subcommands that are more than a call into the public API. Each returns a process exit code. */
#ifndef QRT_TOOLS_H
#define QRT_TOOLS_H
#include <stdint.h>
#include <stdio.h>

#include "qwenrt.h"

int qrt_tool_inspect(const char *dir, int json, FILE *out);
/* Scan every tensor for NaN/Inf; report each bad one (name, count) on out; 1 when any, 0 when none. */
int qrt_tool_inspect_check(const char *dir, FILE *out);
/* qwenrt quantize / synth: argv holds the arguments after the subcommand name. */
int qrt_tool_quantize(int argc, char **argv);
int qrt_tool_synth(int argc, char **argv);

/* qwenrt tokenize / detokenize (tools/cmd_tokenize.c). */
int qrt_cmd_tokenize(int argc, char **argv);
int qrt_cmd_detokenize(int argc, char **argv);
/* For `generate -p TEXT [--chat]`: the ids of TEXT with DIR/tokenizer.json (with --chat: TEXT as one user
 * message through the chat template, thinking on or off). Returns the count, or -1 after printing why. */
int qrt_cli_prompt_ids(const char *cmd, const char *dir, const char *text, int chat, int think, qrt_tokenizer **tok,
                       int32_t **ids);

/* Shared by generate and chat (tools/cli_common.c). */
/* All of f, NUL-terminated (malloc; free() it), *len bytes; NULL when out of memory. */
char *qrt_cli_read_all(FILE *f, size_t *len);
/* The prompt of `-f FILE` or `-p -` (path "-": stdin), or NULL after printing why, naming flag. */
char *qrt_cli_read_prompt(const char *cmd, const char *flag, const char *path);
/* A seed in [0, max] that differs from run to run (for sampling without --seed; the caller prints it). */
uint64_t qrt_cli_random_seed(uint64_t max);
/* The prefill line of generate, chat and bench (ticker.c): "prefill: 4096 of 20000 prompt tokens (20%), 3.2 s" on
 * stderr, redrawn until stopped (at the first token), for prompts longer than QRT_CLI_LONG_PROMPT tokens and only
 * when stderr is a terminal or QRT_PROGRESS=1; start returns NULL otherwise. The tokens done come from progress,
 * which a qrt_gen_opts cancel hook can call between prefill pieces with qrt_session_pos. NULL-safe. */
#define QRT_CLI_LONG_PROMPT 512
typedef struct qrt_cli_ticker qrt_cli_ticker;
qrt_cli_ticker *qrt_cli_ticker_start(int n_tokens);
void qrt_cli_ticker_progress(qrt_cli_ticker *t, int n_done);
void qrt_cli_ticker_stop(qrt_cli_ticker **t); /* clears the line */
/* qwenrt bench / membw / doctor (bench.c, membw.c, doctor.c). */
int qrt_tool_bench(int argc, char **argv);
int qrt_tool_membw(int argc, char **argv);
int qrt_tool_doctor(int argc, char **argv);

/* qwenrt serve / chat (tools/cmd_serve.c). */
int qrt_cmd_serve(int argc, char **argv);
int qrt_cmd_chat(int argc, char **argv);
/* qwenrt tilebench (tilebench.c): every matmul kernel on every matmul shape of a model vs measured read bandwidth. */
int qrt_tool_tilebench(int argc, char **argv);

/* Strict option values for the benchmark tools (toolopts.c). Each returns 1 (or the word's index), or 0 (-1)
 * after printing "qwenrt TOOL: FLAG expects ..., got 'S'". */
int qrt_tool_int_list(const char *tool, const char *flag, const char *s, int lo, int hi, int cap, int *out, int *n);
int qrt_tool_int(const char *tool, const char *flag, const char *s, int lo, int hi, int *out);
int qrt_tool_number(const char *tool, const char *flag, const char *s, double lo, double hi, double *out);
/* qrt_tool_number for integer options whose range exceeds an int (a fraction is an error, not truncated). */
int qrt_tool_whole(const char *tool, const char *flag, const char *s, double lo, double hi, double *out);
int qrt_tool_word(const char *tool, const char *flag, const char *s, const char *const *words, int n_words);
/* --repeat-penalty R, --presence-penalty P, --frequency-penalty F, --min-p M, --logit-bias ID=BIAS (repeatable),
 * shared by generate and chat (sampling_flags.c): 1 when f is one of them (its value v stored in *sp), 0 when it
 * is not, -1 after printing why v is wrong. */
int qrt_tool_sampling_flag(const char *cmd, const char *f, const char *v, qrt_sampling *sp);
#define QRT_TOOL_SAMPLING_USAGE                                                                                     \
    "  --repeat-penalty R, --presence-penalty P, --frequency-penalty F, --min-p M, --logit-bias ID=BIAS\n"         \
    "                   logit adjustments (llama.cpp's repeat penalty over prompt + output, OpenAI's penalties over\n" \
    "                   the output; -100 bans a token); any of them turns speculative decoding off\n"
/* 1 when every --logit-bias id is below vocab, else 0 after printing which is not. */
int qrt_tool_check_logit_bias(const char *cmd, const qrt_sampling *sp, int32_t vocab);
#endif
