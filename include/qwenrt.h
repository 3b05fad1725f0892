/* qwenrt: a C runtime for the Qwen3.5/3.6 hybrid language models (Gated DeltaNet + gated attention).
 *
 * The one public header. Handles are opaque; every call that can fail returns a qrt_status, and
 * qrt_last_error() gives a message that names the file, field, what was expected and what was found.
 *
 *   qrt_model   *m; qrt_model_load("Qwen3.6-27B", NULL, &m);       immutable weights, shared
 *   qrt_session *s; qrt_session_new(m, 4096, &s);                   one sequence's mutable state
 *   qrt_prefill(s, ids, n, logits);  qrt_decode(s, next, logits);   logits: float[qrt_model_vocab(m)]
 *
 * Threads. A model may be shared by sessions; a session is used by one thread at a time. On the CUDA backend, run the
 * forwards of all sessions of a process from one thread (or serialise them): the backend keeps process-wide state
 * (the CUDA-graph step slot and epoch, scratch buffers that grow on demand). The CPU backend has no such state and
 * parallelises inside each call with OpenMP. The last error message (qrt_last_error) is per thread.
 */
#ifndef QWENRT_H
#define QWENRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    QRT_OK = 0,
    QRT_ERR_ARG,         /* a caller passed an invalid argument */
    QRT_ERR_IO,          /* a file could not be opened, read or mapped */
    QRT_ERR_FORMAT,      /* a file's contents are malformed (safetensors header, JSON, tensor table) */
    QRT_ERR_CONFIG,      /* config.json is missing a field or holds an unsupported value */
    QRT_ERR_WEIGHTS,     /* a tensor is missing or has the wrong dtype, shape or size */
    QRT_ERR_MEMORY,      /* an allocation failed */
    QRT_ERR_CONTEXT,     /* the session's context (max_ctx) is full */
    QRT_ERR_UNSUPPORTED, /* a valid input this build cannot run */
    QRT_ERR_NONFINITE,   /* a forward pass produced NaN or Inf logits (broken weights or a kernel fault) */
} qrt_status;

/* A short name for a status ("format error"); never NULL. */
const char *qrt_status_str(qrt_status st);
/* The message of the last failure on this thread; "" when none. */
const char *qrt_last_error(void);

typedef struct qrt_model qrt_model;
typedef struct qrt_session qrt_session;

typedef struct {
    int n_threads;      /* CPU threads for matmuls; 0 = all cores */
    int show_progress;  /* draw a progress bar on stderr while loading */
    const char *mtp_dir; /* a folder holding mtp.safetensors (MTP sidecar) to add to the checkpoint; NULL = none */
    int device;         /* QRT_DEVICE_AUTO (0): CUDA when built with it and a GPU is present, else CPU;
                         * QRT_DEVICE_CPU (1); QRT_DEVICE_CUDA (2): an error if unavailable */
    int kv_format;      /* KV cache of the sessions: QRT_KV_F32 (0, exact), QRT_KV_BF16, QRT_KV_FP8 (e4m3 with
                         * one f32 scale per token and kv head), or QRT_KV_DEFAULT: BF16 on a GPU (half the bytes
                         * attention reads per token), F32 on the CPU (what the command-line tools use) */
} qrt_load_opts;

enum { QRT_DEVICE_AUTO = 0, QRT_DEVICE_CPU = 1, QRT_DEVICE_CUDA = 2 };
enum { QRT_KV_DEFAULT = -1, QRT_KV_F32 = 0, QRT_KV_BF16 = 1, QRT_KV_FP8 = 2 };

/* Load a Hugging Face checkpoint folder (config.json + *.safetensors) in place. opts may be NULL. */
qrt_status qrt_model_load(const char *dir, const qrt_load_opts *opts, qrt_model **out);
void qrt_model_free(qrt_model *m);
int32_t qrt_model_vocab(const qrt_model *m);  /* rows of the logits (the padded vocabulary) */
int32_t qrt_model_eos(const qrt_model *m);    /* the text config's eos_token_id, or -1 */

/* A session holds one sequence: KV caches, Gated DeltaNet states, position. max_ctx bounds tokens. */
qrt_status qrt_session_new(qrt_model *m, int32_t max_ctx, qrt_session **out);
void qrt_session_free(qrt_session *s);
void qrt_session_reset(qrt_session *s);
int32_t qrt_session_pos(const qrt_session *s); /* tokens consumed so far */

/* Run n tokens through the model at the session's position. For each i in rows[0..n_rows), write the
 * logits after token rows[i] (an index into ids) to logits + i*vocab. rows may be NULL with n_rows = 1
 * for the last token only. On failure the session is unchanged. */
qrt_status qrt_forward(qrt_session *s, const int32_t *ids, int32_t n, const int32_t *rows, int32_t n_rows,
                       float *logits);
/* qrt_forward of the prompt, logits of its last token. */
qrt_status qrt_prefill(qrt_session *s, const int32_t *ids, int32_t n, float *logits);
/* qrt_forward of one token. */
qrt_status qrt_decode(qrt_session *s, int32_t id, float *logits);

/* Called for each generated token; return non-zero to stop. */
typedef int (*qrt_token_cb)(int32_t id, void *user);

/* Test hook for speculative decoding: given the k-th draft (1-based) proposed by the MTP head for absolute
 * position pos, return the draft to use instead (e.g. the main model's own choice, to force accepts). */
typedef int32_t (*qrt_draft_hook)(int32_t k, int32_t proposed, int32_t pos, void *user);

/* Benchmark hook, a simulation: given a cycle's K and the number of drafts j the main model accepted, return
 * the number to accept instead (clamped to 0..K). The accepted tokens are then the drafts as proposed and
 * the bonus is the main model's choice after them, so the output is no longer the plain model's: use it
 * only to measure speed at a chosen acceptance on random weights (qwenrt bench --sim-al). */
typedef int (*qrt_accept_hook)(int K, int j, void *user);

typedef struct {
    int32_t id;
    float bias; /* added to the token's logit */
} qrt_logit_bias;

typedef struct {
    float temperature; /* 0 = greedy (argmax) */
    float top_p;       /* nucleus mass kept; 0 or 1 = off */
    int32_t top_k;     /* candidates kept; 0 = off */
    uint64_t seed;
    /* Adjustments of the logits before the choice (all zero = off). A generation with any of them set runs
     * without speculation: the draft/verify path chooses from unadjusted logits. */
    float min_p;              /* keep tokens with p >= min_p * p_max; 0 = off */
    float repetition_penalty; /* tokens seen in prompt + output: logit / rp if > 0, else * rp; 0 or 1 = off */
    float presence_penalty;   /* OpenAI: minus this for each token generated at least once so far */
    float frequency_penalty;  /* OpenAI: minus this times the token's count in the output so far */
    const qrt_logit_bias *logit_bias; /* not owned; must outlive the generation */
    int32_t n_logit_bias;
} qrt_sampling;

/* spec_k: speculate with K = QRT_SPEC_DEFAULT_K when the model has an MTP head and the session is empty or was left by
 * a speculative generation (whose MTP cache covers it), else decode plainly */
#define QRT_SPEC_DEFAULT (-1)
#define QRT_SPEC_DEFAULT_K 6 /* the default draft length: the K of the benchmark protocol's speculative rows */
#define QRT_SPEC_MAX_K 16

typedef struct {
    int32_t max_new;   /* tokens to generate */
    int32_t stop_eos;  /* stop at the model's eos token */
    int32_t spec_k;    /* MTP draft tokens per cycle: 0 = plain decoding, QRT_SPEC_DEFAULT, or 1..16 */
    qrt_sampling sampling;
    qrt_token_cb on_token;
    void *user;
    qrt_draft_hook draft_hook; /* NULL normally */
    void *draft_user;
    qrt_accept_hook accept_hook; /* NULL normally; benchmarks only (see qrt_accept_hook) */
    void *accept_user;
    /* the tokens the session already holds before ids (prefix reuse): repetition_penalty counts them too */
    const int32_t *history;
    int32_t n_history;
    /* checked between prefill pieces (with user): non-zero stops the generation there, with no tokens and QRT_OK;
     * the session then holds the prompt's first qrt_session_pos tokens. Decoding stops through on_token. */
    int (*cancel)(void *user);
    /* called with the logits each token was chosen from (before any adjustment) just before on_token; set, the
     * generation runs without speculation */
    void (*on_logits)(const float *logits, int32_t V, int32_t id, void *user);
} qrt_gen_opts;

typedef struct {
    int32_t n_prompt, n_new;
    double prefill_ms, decode_ms; /* prefill up to the first token's logits; first to last token */
    /* speculative decoding (all zero when it did not run) */
    int32_t spec_k;
    int64_t attempts;                        /* cycles */
    int64_t accepts;                         /* accepted draft tokens (the bonus token not counted) */
    int64_t full_accepts;                    /* cycles that accepted all K drafts */
    int64_t accepted_at[QRT_SPEC_MAX_K];     /* cycles whose draft k+1 was accepted */
    double chain_ms, verify_ms;              /* total time drafting / verifying */
} qrt_gen_stats;

/* Generation after a prefill of ids (greedy, or sampled per opts->sampling, speculative per
 * opts->spec_k); out receives up to opts->max_new ids. Greedy speculative output equals plain greedy
 * output token for token; sampled speculative output follows the plain sampling distribution.
 * The session then holds the prompt and every generated token but the last, so a later call may continue it with
 * ids that start with that last token (a conversation's next turn). Speculation continues a session only where a
 * speculative generation left it: after a plain one, an explicit spec_k > 0 is refused (QRT_ERR_ARG). */
qrt_status qrt_generate(qrt_session *s, const int32_t *ids, int32_t n, const qrt_gen_opts *opts, int32_t *out,
                        qrt_gen_stats *stats);


/* ------------------------------------------------------------------------------------------------
 * Tokenizer: the byte-level BPE of a model's tokenizer.json (NFC, the pre-tokenizer's split regex,
 * merges by rank; added/special tokens such as <|im_end|> are matched as whole strings first).
 *
 *   qrt_tokenizer *tok; qrt_tokenizer_load("Qwen3.6-27B/tokenizer.json", &tok);
 *   int32_t *ids; size_t n; qrt_tokenize(tok, text, strlen(text), &ids, &n); ... free(ids);
 */
typedef struct qrt_tokenizer qrt_tokenizer;

qrt_status qrt_tokenizer_load(const char *path, qrt_tokenizer **out);
void qrt_tokenizer_free(qrt_tokenizer *t);
int32_t qrt_tokenizer_vocab(const qrt_tokenizer *t); /* ids are 0..vocab-1 (BPE and added tokens) */
/* Check that every id of t has a row in m's logits (its largest id is below config.json's vocab_size), so a
 * tokenizer from another model fails at load, not mid-generation. model_dir names config.json in the error. */
qrt_status qrt_tokenizer_check_model(const qrt_tokenizer *t, const qrt_model *m, const char *model_dir);
/* The id of a token given as text ("<|im_end|>", "hello"), or -1 when no single token spells it. */
int32_t qrt_tokenizer_token_id(const qrt_tokenizer *t, const char *token);

/* Encode len bytes of UTF-8 text (invalid UTF-8 is refused with QRT_ERR_ARG). *ids is allocated with
 * malloc (free() it) and holds *n_ids ids. */
qrt_status qrt_tokenize(const qrt_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n_ids);
/* Decode ids to NUL-terminated UTF-8 in *text (malloc; free() it), *len bytes (len may be NULL).
 * Byte sequences that are not valid UTF-8 become U+FFFD, as in Hugging Face tokenizers. */
qrt_status qrt_detokenize(const qrt_tokenizer *t, const int32_t *ids, size_t n_ids, char **text, size_t *len);

/* Streaming decode, one token at a time: a character whose bytes are split across tokens is held back
 * until it is complete, so every piece returned is valid UTF-8 and the pieces concatenate to exactly
 * qrt_detokenize of all the ids. The returned text stays valid until the next call on the stream. */
typedef struct qrt_detok_stream qrt_detok_stream;
qrt_status qrt_detok_stream_new(const qrt_tokenizer *t, qrt_detok_stream **out);
qrt_status qrt_detok_stream_push(qrt_detok_stream *s, int32_t id, const char **text, size_t *len);
/* End of the stream: bytes still held back (an unfinished character) come out as U+FFFD. */
const char *qrt_detok_stream_flush(qrt_detok_stream *s, size_t *len);
void qrt_detok_stream_free(qrt_detok_stream *s);

#ifdef __cplusplus
}
#endif
#endif
