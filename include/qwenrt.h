/* qwenrt: a C runtime for the Qwen3.5/3.6 hybrid language models (Gated DeltaNet + gated attention).
 *
 * The one public header. Handles are opaque; every call that can fail returns a qrt_status, and
 * qrt_last_error() gives a message that names the file, field, what was expected and what was found.
 *
 *   qrt_model   *m; qrt_model_load("Qwen3.6-27B", NULL, &m);       immutable weights, shared
 *   qrt_session *s; qrt_session_new(m, 4096, &s);                   one sequence's mutable state
 *   qrt_prefill(s, ids, n, logits);  qrt_decode(s, next, logits);   logits: float[qrt_model_vocab(m)]
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
    int device;         /* QRT_DEVICE_AUTO (0): CUDA when built with it and a GPU is present, else CPU;
                         * QRT_DEVICE_CPU (1); QRT_DEVICE_CUDA (2): an error if unavailable */
} qrt_load_opts;

enum { QRT_DEVICE_AUTO = 0, QRT_DEVICE_CPU = 1, QRT_DEVICE_CUDA = 2 };

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

typedef struct {
    int32_t max_new;   /* tokens to generate */
    int32_t stop_eos;  /* stop at the model's eos token */
    qrt_token_cb on_token;
    void *user;
} qrt_gen_opts;

typedef struct {
    int32_t n_prompt, n_new;
    double prefill_ms, decode_ms; /* prefill up to the first token's logits; first to last token */
} qrt_gen_stats;

/* Greedy generation after a prefill of ids; out receives up to opts->max_new ids. */
qrt_status qrt_generate(qrt_session *s, const int32_t *ids, int32_t n, const qrt_gen_opts *opts, int32_t *out,
                        qrt_gen_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
