/* The OpenAI API as JSON: requests to /v1/chat/completions and /v1/completions parsed into what a
 * generation needs, and responses (whole, or streamed as server-sent events) built from its output.
 *
 * Unknown request fields are ignored (clients send many: frequency_penalty, user, logprobs ...); a known
 * field of the wrong type or out of range is a 400 that names the field. */
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
} qrt_oa_request;

/* Parse a request body. On failure returns 0 with the reason in err (for a 400). vocab bounds token-id prompts. */
int qrt_oa_parse(qrt_oa_kind kind, const char *body, size_t len, qrt_chat_dialect dialect, int32_t vocab,
                 qrt_oa_request *r, char *err, size_t err_size);
void qrt_oa_request_free(qrt_oa_request *r);

/* {"error": {"message", "type", "code"}}; malloc'd. */
char *qrt_oa_error_json(const char *message, const char *type, const char *code);

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

/* The whole response of a non-streamed request (malloc'd JSON). */
char *qrt_oa_response(const qrt_oa_request *r, const qrt_oa_meta *m, const qrt_output *o, const char *finish,
                      const qrt_oa_usage *u);
/* Streaming: the first chunk (chat: the assistant role), then deltas of text, then the end (tool calls,
 * finish reason, usage when asked for, [DONE]). Each appends complete `data: ...\n\n` events to sse. */
int qrt_oa_stream_begin(qrt_buf *sse, const qrt_oa_request *r, const qrt_oa_meta *m);
int qrt_oa_stream_delta(qrt_buf *sse, const qrt_oa_request *r, const qrt_oa_meta *m, const char *reasoning,
                        size_t n_reasoning, const char *content, size_t n_content);
int qrt_oa_stream_end(qrt_buf *sse, const qrt_oa_request *r, const qrt_oa_meta *m, const qrt_output *o,
                      const char *finish, const qrt_oa_usage *u);
/* An error after streaming began: an error event, then [DONE]. */
int qrt_oa_stream_error(qrt_buf *sse, const char *message);

#endif
