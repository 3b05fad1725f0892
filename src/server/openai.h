/* The OpenAI API as JSON: requests to /v1/chat/completions and /v1/completions parsed into what a
 * generation needs, and responses (whole, or streamed as server-sent events) built from its output.
 *
 * Unknown request fields are ignored (clients send many: user, metadata ...); a known field of the wrong type
 * or out of range, or asking for what is not implemented (response_format json_schema), is a 400 that names
 * the field. */
#ifndef QRT_SERVER_OPENAI_H
#define QRT_SERVER_OPENAI_H

#include <jansson.h>
#include <stdint.h>

#include "qwenrt.h"
#include "server/output.h"
#include "tokenizer/chat.h"

typedef enum { QRT_OA_CHAT, QRT_OA_COMPLETION } qrt_oa_kind;

typedef struct {
    qrt_oa_kind kind;
    char *prompt_text;        /* the rendered chat, or the completion prompt; NULL when prompt_ids is set */
    int32_t *prompt_ids;      /* /v1/completions with "prompt": [ids] */
    int32_t n_prompt_ids;
    int32_t max_tokens;       /* -1: until the context is full */
    qrt_sampling sampling;
    char *stops[QRT_MAX_STOPS];
    int n_stops;
    int stream, include_usage;
    int thinking;             /* chat: the prompt opened a <think> block */
    int parse_tools;          /* chat with tools: <tool_call> blocks become tool_calls */
    json_t *tools;            /* the request's tools (for parameter types), or NULL */
    char *forced;             /* chat tool_choice required / named: the tool-call opening the prompt ends with, which
                               * the output starts with too; NULL otherwise */
    char *model;              /* the request's "model", or NULL when absent */
    qrt_logit_bias *logit_bias; /* sampling.logit_bias points here */
    int logprobs;             /* report each token's log-probability */
    int top_logprobs;         /* and this many alternatives (0..20) */
} qrt_oa_request;

/* Parse a request body. On failure returns 0 with the reason in err (for a 400), which starts with the field
 * named in quotes when one is at fault (see qrt_oa_error_param). vocab bounds token ids (prompt, logit_bias). */
int qrt_oa_parse(qrt_oa_kind kind, const char *body, size_t len, qrt_chat_dialect dialect, int32_t vocab,
                 qrt_oa_request *r, char *err, size_t err_size);
void qrt_oa_request_free(qrt_oa_request *r);

/* {"error": {"message", "type", "param", "code"}}; malloc'd. param and code may be NULL (JSON null). */
char *qrt_oa_error_json(const char *message, const char *type, const char *code);
char *qrt_oa_error_json_param(const char *message, const char *type, const char *param, const char *code);
/* The field a parse error names: the quoted word it starts with ('tools[0]' gives tools[0]); 0 when none. */
int qrt_oa_error_param(const char *err, char *param, size_t size);

typedef struct {
    char id[48];
    const char *model;
    long long created;
} qrt_oa_meta;

typedef struct {
    int32_t prompt_tokens, completion_tokens, cached_tokens;
    double prefill_ms, decode_ms;
} qrt_oa_usage;

/* Tool calls in the Qwen3.5 XML style (<tool_call><function=NAME><parameter=KEY>VALUE</parameter>...) or
 * the older JSON style (<tool_call>{"name", "arguments"}</tool_call>), as an OpenAI tool_calls list;
 * NULL when text holds none. Parameter values become JSON by the tool's schema type when known. */
json_t *qrt_oa_tool_calls(const char *text, size_t n, const json_t *tools);

/* Log-probabilities of generated tokens (logprobs / top_logprobs). */
#define QRT_OA_MAX_TOP 20
typedef struct {
    int32_t id;
    float logprob;
} qrt_oa_alt;
typedef struct {
    qrt_oa_alt chosen;
    int n_top;
    qrt_oa_alt top[QRT_OA_MAX_TOP]; /* most likely first */
} qrt_oa_logprob;
typedef struct {
    const qrt_oa_logprob *items;
    size_t n;
    size_t text_offset; /* completions: the bytes of generated text before items[0] */
    const uint8_t *(*bytes)(int32_t id, size_t *len, const void *user); /* a token's bytes (NULL: none) */
    const void *user;
} qrt_oa_logprobs;

/* The whole response of a non-streamed request (malloc'd JSON). lp: NULL unless the request asked for logprobs. */
char *qrt_oa_response(const qrt_oa_request *r, const qrt_oa_meta *m, const qrt_output *o, const char *finish,
                      const qrt_oa_usage *u, const qrt_oa_logprobs *lp);
/* Streaming: the first chunk (chat: the assistant role), then deltas of text, then the end (tool calls,
 * finish reason, usage when asked for, [DONE]). Each appends complete `data: ...\n\n` events to sse. */
int qrt_oa_stream_begin(qrt_buf *sse, const qrt_oa_request *r, const qrt_oa_meta *m);
/* lp (NULL: none) goes with the last chunk written: the tokens generated since the previous one. */
int qrt_oa_stream_delta(qrt_buf *sse, const qrt_oa_request *r, const qrt_oa_meta *m, const char *reasoning,
                        size_t n_reasoning, const char *content, size_t n_content, const qrt_oa_logprobs *lp);
int qrt_oa_stream_end(qrt_buf *sse, const qrt_oa_request *r, const qrt_oa_meta *m, const qrt_output *o,
                      const char *finish, const qrt_oa_usage *u, const qrt_oa_logprobs *lp);
/* An error after streaming began: an error event, then [DONE]. */
int qrt_oa_stream_error(qrt_buf *sse, const char *message);

#endif
