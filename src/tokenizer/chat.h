/* The ChatML chat template of Qwen3.5/3.6, rendered in C.
 *
 * This reproduces what the models' own Jinja template (tests/data/tokenizer/qwen3.5_chat_template.jinja
 * and qwen3.6_chat_template.jinja) produces for text-only conversations: system, user, assistant (with
 * reasoning and tool calls) and tool turns, tool definitions, enable_thinking and (3.6) preserve_thinking.
 * Image/video content parts are not supported. Conversations the template refuses (no user query, a
 * system message after the first, an unknown role) are refused with the template's own message. */
#ifndef QRT_CHAT_H
#define QRT_CHAT_H

#include "qwenrt.h"

typedef enum {
    QRT_CHAT_QWEN35 = 0, /* Qwen3.5: non-string scalar tool arguments are printed the Python way (True, None) */
    QRT_CHAT_QWEN36 = 1, /* Qwen3.6: adds preserve_thinking; non-string tool arguments are printed as JSON */
} qrt_chat_dialect;

typedef struct {
    const char *name;
    const char *arguments; /* a JSON object {"param": value, ...}, or NULL for none */
} qrt_chat_tool_call;

typedef struct {
    const char *role;      /* "system" (first message only), "user", "assistant" or "tool" */
    const char *content;   /* NULL is the same as "" */
    const char *reasoning; /* assistant reasoning_content; NULL when absent (then <think>…</think> in content counts) */
    const qrt_chat_tool_call *tool_calls;
    int n_tool_calls;
} qrt_chat_message;

typedef struct {
    qrt_chat_dialect dialect;
    const char *tools;         /* JSON list of tool definitions (OpenAI style), or NULL */
    int add_generation_prompt; /* end with "<|im_start|>assistant\n" and the thinking prefix */
    int enable_thinking;       /* 0: the generation prompt closes an empty <think></think> block */
    int preserve_thinking;     /* 3.6: keep the reasoning of every past assistant turn */
} qrt_chat_opts;

/* Render the conversation; *out is NUL-terminated and malloc'd (free() it). */
qrt_status qrt_chat_render(const qrt_chat_message *msgs, int n_msgs, const qrt_chat_opts *opts, char **out);

/* The same from an OpenAI-style JSON list of messages ({"role", "content", "reasoning_content",
 * "tool_calls": [{"function": {"name", "arguments"}}]}); arguments may be an object or a JSON string. */
qrt_status qrt_chat_render_json(const char *messages_json, const qrt_chat_opts *opts, char **out);

#endif
