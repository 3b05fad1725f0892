/* OpenAI request parsing and response building (see openai.h). */
#include "server/openai.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------------------------------
 * Requests */

static int bad(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return 0;
}

static int get_number(json_t *j, const char *key, double lo, double hi, double *out, char *err, size_t n) {
    json_t *v = json_object_get(j, key);
    if (!v || json_is_null(v)) return 1;
    if (!json_is_number(v) || !(json_number_value(v) >= lo && json_number_value(v) <= hi))
        return bad(err, n, "'%s' must be a number in [%g, %g]", key, lo, hi);
    *out = json_number_value(v);
    return 1;
}

static int get_int(json_t *j, const char *key, long long lo, long long hi, long long *out, char *err, size_t n) {
    json_t *v = json_object_get(j, key);
    if (!v || json_is_null(v)) return 1;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return bad(err, n, "'%s' must be an integer in [%lld, %lld]", key, lo, hi);
    *out = json_integer_value(v);
    return 1;
}

static int get_bool(json_t *j, const char *key, int *out, char *err, size_t n) {
    json_t *v = json_object_get(j, key);
    if (!v || json_is_null(v)) return 1;
    if (!json_is_boolean(v)) return bad(err, n, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return 1;
}

static int parse_stops(json_t *j, qrt_oa_request *r, char *err, size_t n) {
    json_t *v = json_object_get(j, "stop");
    if (!v || json_is_null(v)) return 1;
    if (json_is_string(v)) {
        if (json_string_length(v) == 0) return 1;
        return (r->stops[r->n_stops++] = strdup(json_string_value(v))) != NULL;
    }
    if (!json_is_array(v) || json_array_size(v) > QRT_MAX_STOPS)
        return bad(err, n, "'stop' must be a string or a list of at most %d strings", QRT_MAX_STOPS);
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
        if (!json_is_string(s)) return bad(err, n, "'stop[%zu]' must be a string", i);
        if (json_string_length(s) == 0) continue;
        if (!(r->stops[r->n_stops++] = strdup(json_string_value(s)))) return bad(err, n, "out of memory");
    }
    return 1;
}

/* min_p and the penalties; 1 (off) for repetition_penalty, 0 for the others, when absent. */
static int parse_penalties(json_t *j, qrt_oa_request *r, char *err, size_t n) {
    double min_p = 0, rep = 1, presence = 0, frequency = 0;
    if (!get_number(j, "min_p", 0, 1, &min_p, err, n) || !get_number(j, "presence_penalty", -2, 2, &presence, err, n) ||
        !get_number(j, "frequency_penalty", -2, 2, &frequency, err, n) ||
        !get_number(j, "repetition_penalty", 0, 100, &rep, err, n))
        return 0;
    if (rep <= 0) return bad(err, n, "'repetition_penalty' must be > 0 (1 is off)");
    r->sampling.min_p = (float)min_p, r->sampling.repetition_penalty = (float)rep;
    r->sampling.presence_penalty = (float)presence, r->sampling.frequency_penalty = (float)frequency;
    return 1;
}

/* "logit_bias": {"TOKEN_ID": BIAS, ...}, ids in the vocabulary, biases in [-100, 100]. */
static int parse_logit_bias(json_t *j, int32_t vocab, qrt_oa_request *r, char *err, size_t n) {
    json_t *lb = json_object_get(j, "logit_bias");
    if (!lb || json_is_null(lb)) return 1;
    if (!json_is_object(lb) || json_object_size(lb) > 1024)
        return bad(err, n, "'logit_bias' must be an object of at most 1024 \"TOKEN_ID\": BIAS entries");
    if (!json_object_size(lb)) return 1;
    if (!(r->logit_bias = calloc(json_object_size(lb), sizeof *r->logit_bias))) return bad(err, n, "out of memory");
    const char *key;
    json_t *v;
    int k = 0;
    json_object_foreach(lb, key, v) {
        char *end;
        long id = strtol(key, &end, 10);
        if (!*key || *end || id < 0 || id >= vocab)
            return bad(err, n, "'logit_bias' key \"%.40s\" must be a token id in [0, %d)", key, vocab);
        if (!json_is_number(v) || !(json_number_value(v) >= -100 && json_number_value(v) <= 100))
            return bad(err, n, "'logit_bias' value for token %ld must be a number in [-100, 100]", id);
        r->logit_bias[k++] = (qrt_logit_bias){(int32_t)id, (float)json_number_value(v)};
    }
    r->sampling.logit_bias = r->logit_bias, r->sampling.n_logit_bias = k;
    return 1;
}

/* chat: "logprobs": bool with "top_logprobs": 0..20; completions: "logprobs": 0..5 alternatives. */
static int parse_logprobs(json_t *j, qrt_oa_request *r, char *err, size_t n) {
    if (r->kind == QRT_OA_COMPLETION) {
        long long top = -1;
        if (!get_int(j, "logprobs", 0, 5, &top, err, n)) return 0;
        r->logprobs = top >= 0, r->top_logprobs = top < 0 ? 0 : (int)top;
        return 1;
    }
    long long top = -1;
    if (!get_bool(j, "logprobs", &r->logprobs, err, n) || !get_int(j, "top_logprobs", 0, 20, &top, err, n)) return 0;
    if (top >= 0 && !r->logprobs) return bad(err, n, "'top_logprobs' needs \"logprobs\": true");
    r->top_logprobs = top < 0 ? 0 : (int)top;
    return 1;
}

/* Fields of features this server does not have: refused rather than silently ignored. */
static int refuse_unsupported(json_t *j, qrt_oa_request *r, char *err, size_t n) {
    json_t *rf = json_object_get(j, "response_format");
    if (rf && !json_is_null(rf)) {
        const char *type = json_string_value(json_object_get(rf, "type"));
        if (!type) return bad(err, n, "'response_format' must be {\"type\": \"text\"}");
        if (strcmp(type, "text"))
            return bad(err, n, "'response_format' type \"%.40s\" is not supported (this server has no constrained "
                       "decoding); use {\"type\": \"text\"} and ask for JSON in the prompt", type);
    }
    json_t *m = json_object_get(j, "model");
    if (m && !json_is_null(m) && !json_is_string(m)) return bad(err, n, "'model' must be a string (see GET /v1/models)");
    if (json_is_string(m) && !(r->model = strdup(json_string_value(m)))) return bad(err, n, "out of memory");
    if (json_object_get(j, "functions") && !json_is_null(json_object_get(j, "functions")))
        return bad(err, n, "'functions' is not supported; send the functions as \"tools\"");
    if (r->kind != QRT_OA_COMPLETION) return 1;
    int echo = 0;
    long long best_of = 1;
    if (!get_bool(j, "echo", &echo, err, n) || !get_int(j, "best_of", 1, 1, &best_of, err, n)) return 0;
    if (echo) return bad(err, n, "'echo' is not supported; the prompt is not repeated in the answer");
    json_t *suffix = json_object_get(j, "suffix");
    if (suffix && !json_is_null(suffix) && !(json_is_string(suffix) && json_string_length(suffix) == 0))
        return bad(err, n, "'suffix' is not supported (no fill-in-the-middle)");
    return 1;
}

static int parse_sampling(json_t *j, qrt_oa_request *r, char *err, size_t n) {
    double temperature = 1.0, top_p = 1.0; /* the OpenAI defaults */
    long long top_k = 0, seed = -1, max_tokens = -1, choices = 1;
    if (!get_number(j, "temperature", 0, 100, &temperature, err, n) || !get_number(j, "top_p", 0, 1, &top_p, err, n) ||
        !get_int(j, "top_k", -1, 1 << 22, &top_k, err, n) || !get_int(j, "seed", INT64_MIN, INT64_MAX, &seed, err, n) ||
        !get_int(j, "n", 1, 1, &choices, err, n))
        return 0;
    if (!get_int(j, "max_tokens", 1, 1 << 24, &max_tokens, err, n) ||
        !get_int(j, "max_completion_tokens", 1, 1 << 24, &max_tokens, err, n))
        return 0;
    r->max_tokens = (int32_t)max_tokens;
    r->sampling.temperature = (float)temperature;
    r->sampling.top_p = (float)top_p;
    r->sampling.top_k = top_k < 0 ? 0 : (int32_t)top_k; /* -1 is vLLM's "off" */
    if (!parse_penalties(j, r, err, n)) return 0;
    /* without a seed each request draws differently */
    static unsigned long long counter;
    r->sampling.seed = json_object_get(j, "seed") && !json_is_null(json_object_get(j, "seed"))
                           ? (uint64_t)seed
                           : (uint64_t)time(NULL) * 6364136223846793005ull + __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    return 1;
}

static int parse_stream(json_t *j, qrt_oa_request *r, char *err, size_t n) {
    if (!get_bool(j, "stream", &r->stream, err, n)) return 0;
    json_t *so = json_object_get(j, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return bad(err, n, "'stream_options' must be an object");
        if (!get_bool(so, "include_usage", &r->include_usage, err, n)) return 0;
    }
    return 1;
}

/* "tools": [{"type": "function", "function": {"name": NAME, "description"?, "parameters"?: {...}}}, ...]. */
static int check_tools(json_t *tools, char *err, size_t n) {
    if (!tools || json_is_null(tools)) return 1;
    if (!json_is_array(tools)) return bad(err, n, "'tools' must be a list of {\"type\": \"function\", \"function\": {...}}");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *f = json_object_get(t, "function"), *params = json_object_get(f, "parameters");
        if (!json_is_object(t) || !json_is_string(json_object_get(t, "type")) ||
            strcmp(json_string_value(json_object_get(t, "type")), "function"))
            return bad(err, n, "'tools[%zu]' must be {\"type\": \"function\", \"function\": {\"name\", \"parameters\"}}", i);
        if (!json_is_object(f) || !json_is_string(json_object_get(f, "name")) ||
            !json_string_length(json_object_get(f, "name")))
            return bad(err, n, "'tools[%zu].function.name' must be a non-empty string", i);
        if (params && !json_is_null(params) && !json_is_object(params))
            return bad(err, n, "'tools[%zu].function.parameters' must be a JSON Schema object", i);
    }
    return 1;
}

static int has_tool(json_t *tools, const char *name) {
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *tn = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (tn && !strcmp(tn, name)) return 1;
    }
    return 0;
}

/* The tools list cut to the one named (what the model is shown when tool_choice names a function). */
static json_t *only_tool(json_t *tools, const char *name) {
    json_t *one = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *tn = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (tn && !strcmp(tn, name)) json_array_append(one, t);
    }
    return one;
}

enum { CHOICE_AUTO, CHOICE_NONE, CHOICE_REQUIRED };

/* "tool_choice": "none" | "auto" | "required" | {"type": "function", "function": {"name": NAME in tools}}. */
static int parse_tool_choice(json_t *j, json_t *tools, int *kind, const char **named, char *err, size_t n) {
    json_t *c = json_object_get(j, "tool_choice");
    size_t n_tools = json_is_array(tools) ? json_array_size(tools) : 0;
    *kind = CHOICE_AUTO, *named = NULL;
    if (!c || json_is_null(c)) return 1;
    const char *s = json_string_value(c);
    if (s && !strcmp(s, "none")) return *kind = CHOICE_NONE, 1;
    if (s && !strcmp(s, "auto")) return 1;
    if (s && !strcmp(s, "required")) {
        if (!n_tools) return bad(err, n, "'tool_choice' \"required\" needs a non-empty \"tools\" list");
        return *kind = CHOICE_REQUIRED, 1;
    }
    const char *type = json_string_value(json_object_get(c, "type"));
    const char *name = json_string_value(json_object_get(json_object_get(c, "function"), "name"));
    if (!json_is_object(c) || !type || strcmp(type, "function") || !name)
        return bad(err, n, "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                   "\"function\": {\"name\": NAME}}");
    if (!has_tool(tools, name))
        return bad(err, n, "'tool_choice' names the function \"%.100s\", which is not in \"tools\"", name);
    *named = json_string_value(json_object_get(json_object_get(c, "function"), "name"));
    *kind = CHOICE_REQUIRED;
    return 1;
}

/* tool_choice required / named: the answer must be a tool call, so the prompt ends with the opening of one (the
 * template's XML form), after closing the thinking block when it is open; the output starts with the same text. */
static int force_tool_call(qrt_oa_request *r, const char *named, char *err, size_t n) {
    qrt_buf forced = {0}, prompt = {0};
    int ok = qrt_buf_add(&forced, "<tool_call>\n", 12) && (!named || qrt_buf_addf(&forced, "<function=%s>\n", named)) &&
             qrt_buf_add(&prompt, r->prompt_text, strlen(r->prompt_text)) &&
             (!r->thinking || qrt_buf_add(&prompt, "\n</think>\n\n", 12)) && qrt_buf_add(&prompt, forced.p, forced.n) &&
             qrt_buf_add(&prompt, "", 1) && qrt_buf_add(&forced, "", 1);
    if (!ok) {
        qrt_buf_free(&forced), qrt_buf_free(&prompt);
        return bad(err, n, "out of memory");
    }
    free(r->prompt_text);
    r->prompt_text = prompt.p, r->forced = forced.p;
    r->thinking = 0; /* the reasoning, if any, was closed above */
    return 1;
}

static int parse_chat(json_t *j, qrt_chat_dialect dialect, qrt_oa_request *r, char *err, size_t n) {
    json_t *messages = json_object_get(j, "messages");
    if (!json_is_array(messages) || json_array_size(messages) == 0)
        return bad(err, n, "'messages' must be a non-empty list of {\"role\", \"content\"} objects");
    qrt_chat_opts opts = {.dialect = dialect, .add_generation_prompt = 1, .enable_thinking = 1};
    json_t *kw = json_object_get(j, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw)) return bad(err, n, "'chat_template_kwargs' must be an object");
        if (!get_bool(kw, "enable_thinking", &opts.enable_thinking, err, n) ||
            !get_bool(kw, "preserve_thinking", &opts.preserve_thinking, err, n))
            return 0;
    }
    json_t *tools = json_object_get(j, "tools");
    const char *named = NULL;
    int choice_kind = 0;
    if (!check_tools(tools, err, n) || !parse_tool_choice(j, tools, &choice_kind, &named, err, n)) return 0;
    char *tools_text = NULL;
    json_t *rendered = named ? only_tool(tools, named) : json_incref(tools);
    if (json_array_size(rendered) && choice_kind != CHOICE_NONE) {
        r->tools = json_incref(rendered);
        r->parse_tools = 1;
        tools_text = json_dumps(rendered, JSON_COMPACT);
        opts.tools = tools_text;
    }
    json_decref(rendered);
    char *messages_text = json_dumps(messages, JSON_COMPACT);
    qrt_status st = messages_text ? qrt_chat_render_json(messages_text, &opts, &r->prompt_text) : QRT_ERR_MEMORY;
    free(messages_text), free(tools_text);
    if (st != QRT_OK) return bad(err, n, "%s", qrt_last_error());
    r->thinking = opts.enable_thinking;
    return choice_kind == CHOICE_REQUIRED || named ? force_tool_call(r, named, err, n) : 1;
}

static int parse_completion_prompt(json_t *j, int32_t vocab, qrt_oa_request *r, char *err, size_t n) {
    json_t *p = json_object_get(j, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) p = json_array_get(p, 0);
    if (json_is_string(p)) {
        if (json_string_length(p) == 0) return bad(err, n, "'prompt' is empty");
        return (r->prompt_text = strdup(json_string_value(p))) != NULL || bad(err, n, "out of memory");
    }
    if (!json_is_array(p) || json_array_size(p) == 0 || json_array_size(p) > (1u << 24))
        return bad(err, n, "'prompt' must be a non-empty string or a list of token ids");
    r->n_prompt_ids = (int32_t)json_array_size(p);
    if (!(r->prompt_ids = calloc((size_t)r->n_prompt_ids, sizeof(int32_t)))) return bad(err, n, "out of memory");
    size_t i;
    json_t *v;
    json_array_foreach(p, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= vocab)
            return bad(err, n, "'prompt[%zu]' must be a token id in [0, %d) (one prompt per request)", i, vocab);
        r->prompt_ids[i] = (int32_t)json_integer_value(v);
    }
    return 1;
}

int qrt_oa_parse(qrt_oa_kind kind, const char *body, size_t len, qrt_chat_dialect dialect, int32_t vocab,
                 qrt_oa_request *r, char *err, size_t err_size) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    json_error_t je;
    json_t *j = json_loadb(body, len, 0, &je);
    if (!j) return bad(err, err_size, "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    int ok = json_is_object(j) || bad(err, err_size, "the body must be a JSON object");
    ok = ok && parse_sampling(j, r, err, err_size) && parse_logit_bias(j, vocab, r, err, err_size) &&
         parse_logprobs(j, r, err, err_size) && refuse_unsupported(j, r, err, err_size) &&
         parse_stops(j, r, err, err_size) && parse_stream(j, r, err, err_size);
    if (ok) ok = kind == QRT_OA_CHAT ? parse_chat(j, dialect, r, err, err_size)
                                     : parse_completion_prompt(j, vocab, r, err, err_size);
    json_decref(j);
    if (!ok) qrt_oa_request_free(r);
    return ok;
}

void qrt_oa_request_free(qrt_oa_request *r) {
    free(r->prompt_text);
    free(r->prompt_ids);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    json_decref(r->tools);
    free(r->forced);
    free(r->model);
    free(r->logit_bias);
    memset(r, 0, sizeof *r);
}

char *qrt_oa_error_json_param(const char *message, const char *type, const char *param, const char *code) {
    json_t *j = json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message", message, "type", type, "param", param,
                          "code", code);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

char *qrt_oa_error_json(const char *message, const char *type, const char *code) {
    return qrt_oa_error_json_param(message, type, NULL, code);
}

int qrt_oa_error_param(const char *err, char *param, size_t size) {
    const char *end = err[0] == '\'' ? strchr(err + 1, '\'') : NULL;
    if (!end || end == err + 1 || (size_t)(end - err - 1) >= size) return 0;
    snprintf(param, size, "%.*s", (int)(end - err - 1), err + 1);
    return 1;
}

/* ------------------------------------------------------------------------------------------------
 * Tool calls */

static const char *find_in(const char *p, const char *end, const char *needle) {
    size_t k = strlen(needle);
    for (; p + k <= end; p++)
        if (!memcmp(p, needle, k)) return p;
    return NULL;
}

/* The schema type of a tool's parameter ("string", "integer", ...), or NULL when unknown. */
static const char *param_type(const json_t *tools, const char *fn, const char *param) {
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *f = json_object_get(t, "function");
        if (!f) f = t;
        if (!json_is_string(json_object_get(f, "name")) || strcmp(json_string_value(json_object_get(f, "name")), fn))
            continue;
        json_t *props = json_object_get(json_object_get(f, "parameters"), "properties");
        return json_string_value(json_object_get(json_object_get(props, param), "type"));
    }
    return NULL;
}

/* A parameter value: a string for string parameters, else the JSON it spells when it is JSON. */
static json_t *param_value(const char *s, size_t n, const char *type) {
    if (n && s[0] == '\n') s++, n--;
    if (n && s[n - 1] == '\n') n--;
    if (!type || strcmp(type, "string")) {
        json_t *v = json_loadb(s, n, JSON_DECODE_ANY, NULL);
        if (v) return v;
    }
    return json_stringn(s, n);
}

/* {"name": name, "arguments": args}, taking both references (NULL when name is NULL: not UTF-8). Built by hand, not
 * json_pack: a fresh value passed to it leaked when packing failed or took its own reference (fuzz_openai). */
static json_t *tool_call(json_t *name, json_t *args) {
    if (!name) return json_decref(args), NULL;
    json_t *call = json_object();
    json_object_set_new(call, "name", name);
    json_object_set_new(call, "arguments", args);
    return call;
}

/* One <function=NAME>...</function> body → {"name", "arguments"}. */
static json_t *parse_xml_call(const char *p, const char *end, const json_t *tools) {
    const char *fn = find_in(p, end, "<function=");
    if (!fn) return NULL;
    fn += 10;
    const char *fn_end = find_in(fn, end, ">");
    if (!fn_end || fn_end == fn) return NULL;
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)(fn_end - fn), fn);
    json_t *args = json_object();
    const char *q = fn_end + 1;
    const char *body_end = find_in(q, end, "</function>");
    if (!body_end) body_end = end;
    while ((q = find_in(q, body_end, "<parameter=")) != NULL) {
        q += 11;
        const char *key_end = find_in(q, body_end, ">");
        if (!key_end) break;
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(key_end - q), q);
        const char *val = key_end + 1, *val_end = find_in(val, body_end, "</parameter>");
        if (!val_end) val_end = body_end;
        json_object_set_new(args, key, param_value(val, (size_t)(val_end - val), param_type(tools, name, key)));
        q = val_end;
    }
    return tool_call(json_string(name), args);
}

/* The older Qwen style: {"name": ..., "arguments": {...}}. */
static json_t *parse_json_call(const char *p, const char *end) {
    json_t *j = json_loadb(p, (size_t)(end - p), 0, NULL);
    if (!json_is_string(json_object_get(j, "name"))) return json_decref(j), NULL;
    json_t *args = json_object_get(j, "arguments");
    json_t *call = tool_call(json_incref(json_object_get(j, "name")), args ? json_incref(args) : json_object());
    json_decref(j);
    return call;
}

json_t *qrt_oa_tool_calls(const char *text, size_t n, const json_t *tools) {
    json_t *calls = json_array();
    const char *p = text, *end = text + n;
    while ((p = find_in(p, end, "<tool_call>")) != NULL) {
        p += 11;
        const char *close = find_in(p, end, "</tool_call>");
        const char *body_end = close ? close : end;
        const char *first = p;
        while (first < body_end && (*first == '\n' || *first == ' ')) first++;
        json_t *call = first < body_end && *first == '{' ? parse_json_call(first, body_end)
                                                         : parse_xml_call(p, body_end, tools);
        if (call) {
            char id[32];
            snprintf(id, sizeof id, "call_%zu", json_array_size(calls));
            char *arguments = json_dumps(json_object_get(call, "arguments"), JSON_COMPACT | JSON_ENCODE_ANY);
            json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:O, s:s}}", "id", id, "type", "function",
                                                   "function", "name", json_object_get(call, "name"), "arguments",
                                                   arguments ? arguments : "{}"));
            free(arguments);
            json_decref(call);
        }
        p = body_end;
    }
    if (json_array_size(calls) == 0) return json_decref(calls), NULL;
    return calls;
}

/* ------------------------------------------------------------------------------------------------
 * Responses */

static json_t *usage_json(const qrt_oa_usage *u) {
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", u->prompt_tokens, "completion_tokens",
                     u->completion_tokens, "total_tokens", u->prompt_tokens + u->completion_tokens,
                     "prompt_tokens_details", "cached_tokens", u->cached_tokens);
}

/* qwenrt's own timings, next to usage (llama.cpp's server reports the same under this name). */
static json_t *timings_json(const qrt_oa_usage *u) {
    double tps = u->completion_tokens > 1 && u->decode_ms > 0 ? (u->completion_tokens - 1) / u->decode_ms * 1e3 : 0;
    return json_pack("{s:f, s:f, s:f, s:i}", "prefill_ms", u->prefill_ms, "decode_ms", u->decode_ms, "decode_tok_s",
                     tps, "reused_tokens", u->cached_tokens);
}

/* A token's text for logprobs: its bytes as a string when they are UTF-8, else each byte as \xHH (a token may
 * hold part of a character; OpenAI writes those the same way). */
static json_t *token_text(const uint8_t *b, size_t n) {
    json_t *t = json_stringn((const char *)b, n);
    if (t) return t;
    qrt_buf esc = {0};
    for (size_t i = 0; i < n; i++) qrt_buf_addf(&esc, "\\x%02x", b[i]);
    t = json_stringn(esc.p ? esc.p : "", esc.n);
    qrt_buf_free(&esc);
    return t;
}

static const uint8_t *alt_bytes(const qrt_oa_logprobs *lp, int32_t id, size_t *n) {
    const uint8_t *b = lp->bytes ? lp->bytes(id, n, lp->user) : NULL;
    if (!b) *n = 0;
    return b ? b : (const uint8_t *)"";
}

/* Chat: {"token", "logprob", "bytes": [ints]} of one token. */
static json_t *chat_alt(const qrt_oa_logprobs *lp, const qrt_oa_alt *a) {
    size_t n;
    const uint8_t *b = alt_bytes(lp, a->id, &n);
    json_t *bytes = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(bytes, json_integer(b[i]));
    return json_pack("{s:o, s:f, s:o}", "token", token_text(b, n), "logprob", (double)a->logprob, "bytes", bytes);
}

/* chat: {"content": [{token, logprob, bytes, top_logprobs: [...]}]};
 * completions: {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}. */
static json_t *logprobs_json(const qrt_oa_request *r, const qrt_oa_logprobs *lp) {
    if (!lp) return json_null();
    if (r->kind == QRT_OA_CHAT) {
        json_t *content = json_array();
        for (size_t i = 0; i < lp->n; i++) {
            json_t *item = chat_alt(lp, &lp->items[i].chosen), *top = json_array();
            for (int k = 0; k < lp->items[i].n_top; k++) json_array_append_new(top, chat_alt(lp, &lp->items[i].top[k]));
            json_object_set_new(item, "top_logprobs", top);
            json_array_append_new(content, item);
        }
        return json_pack("{s:o}", "content", content);
    }
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offsets = json_array();
    size_t offset = lp->text_offset, n;
    for (size_t i = 0; i < lp->n; i++) {
        const uint8_t *b = alt_bytes(lp, lp->items[i].chosen.id, &n);
        json_array_append_new(tokens, token_text(b, n));
        json_array_append_new(lps, json_real(lp->items[i].chosen.logprob));
        json_array_append_new(offsets, json_integer((json_int_t)offset));
        offset += n;
        json_t *top = json_object();
        for (int k = 0; k < lp->items[i].n_top; k++) {
            size_t tn;
            const uint8_t *tb = alt_bytes(lp, lp->items[i].top[k].id, &tn);
            json_t *key = token_text(tb, tn);
            if (key) json_object_set_new(top, json_string_value(key), json_real(lp->items[i].top[k].logprob));
            json_decref(key);
        }
        json_array_append_new(tops, top);
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offsets);
}

static json_t *envelope(const qrt_oa_request *r, const qrt_oa_meta *m, int chunk) {
    const char *object = r->kind == QRT_OA_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                : "text_completion";
    return json_pack("{s:s, s:s, s:I, s:s}", "id", m->id, "object", object, "created", (json_int_t)m->created, "model",
                     m->model);
}

static json_t *tool_calls_of(const qrt_oa_request *r, const qrt_output *o) {
    return r->parse_tools && o->tools.n ? qrt_oa_tool_calls(o->tools.p, o->tools.n, r->tools) : NULL;
}

char *qrt_oa_response(const qrt_oa_request *r, const qrt_oa_meta *m, const qrt_output *o, const char *finish,
                      const qrt_oa_usage *u, const qrt_oa_logprobs *lp) {
    json_t *j = envelope(r, m, 0), *choice;
    if (r->kind == QRT_OA_CHAT) {
        json_t *calls = tool_calls_of(r, o);
        /* tool text that did not parse is returned as content rather than lost */
        json_t *content = o->content.n || (!calls && !o->tools.n) ? json_stringn(o->content.p ? o->content.p : "", o->content.n)
                                                                 : json_null();
        if (!calls && o->tools.n) {
            qrt_buf all = {0};
            qrt_buf_add(&all, o->content.p, o->content.n), qrt_buf_add(&all, o->tools.p, o->tools.n);
            json_decref(content);
            content = json_stringn(all.p, all.n);
            qrt_buf_free(&all);
        }
        json_t *message = json_pack("{s:s, s:o}", "role", "assistant", "content", content);
        if (o->reasoning.n) json_object_set_new(message, "reasoning_content", json_stringn(o->reasoning.p, o->reasoning.n));
        if (calls) json_object_set_new(message, "tool_calls", calls), finish = "tool_calls";
        choice = json_pack("{s:i, s:o, s:s, s:o}", "index", 0, "message", message, "finish_reason", finish,
                           "logprobs", logprobs_json(r, lp));
    } else {
        choice = json_pack("{s:i, s:s%, s:s, s:o}", "index", 0, "text", o->content.p ? o->content.p : "", o->content.n,
                           "finish_reason", finish, "logprobs", logprobs_json(r, lp));
    }
    json_object_set_new(j, "choices", json_pack("[o]", choice));
    json_object_set_new(j, "usage", usage_json(u));
    json_object_set_new(j, "timings", timings_json(u));
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

static int add_event(qrt_buf *sse, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    int ok = s && qrt_buf_add(sse, "data: ", 6) && qrt_buf_add(sse, s, strlen(s)) && qrt_buf_add(sse, "\n\n", 2);
    free(s);
    return ok;
}

/* A chunk with one choice: chat {"delta": delta}, completion {"text": text}. */
static int add_chunk_lp(qrt_buf *sse, const qrt_oa_request *r, const qrt_oa_meta *m, json_t *delta, const char *finish,
                        const qrt_oa_logprobs *lp) {
    json_t *j = envelope(r, m, 1);
    json_t *choice = json_pack("{s:i, s:o, s:o}", "index", 0, "finish_reason", finish ? json_string(finish) : json_null(),
                               "logprobs", logprobs_json(r, lp));
    if (r->kind == QRT_OA_CHAT) json_object_set_new(choice, "delta", delta);
    else json_object_set_new(choice, "text", delta);
    json_object_set_new(j, "choices", json_pack("[o]", choice));
    return add_event(sse, j);
}

static int add_chunk(qrt_buf *sse, const qrt_oa_request *r, const qrt_oa_meta *m, json_t *delta, const char *finish) {
    return add_chunk_lp(sse, r, m, delta, finish, NULL);
}

int qrt_oa_stream_begin(qrt_buf *sse, const qrt_oa_request *r, const qrt_oa_meta *m) {
    if (r->kind != QRT_OA_CHAT) return 1;
    return add_chunk(sse, r, m, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL);
}

int qrt_oa_stream_delta(qrt_buf *sse, const qrt_oa_request *r, const qrt_oa_meta *m, const char *reasoning,
                        size_t n_reasoning, const char *content, size_t n_content, const qrt_oa_logprobs *lp) {
    int ok = 1;
    if (n_reasoning && r->kind == QRT_OA_CHAT)
        ok = add_chunk_lp(sse, r, m, json_pack("{s:s%}", "reasoning_content", reasoning, n_reasoning), NULL,
                          n_content ? NULL : lp);
    if (ok && n_content)
        ok = add_chunk_lp(sse, r, m,
                          r->kind == QRT_OA_CHAT ? json_pack("{s:s%}", "content", content, n_content)
                                                 : json_stringn(content, n_content),
                          NULL, lp);
    return ok;
}

int qrt_oa_stream_end(qrt_buf *sse, const qrt_oa_request *r, const qrt_oa_meta *m, const qrt_output *o,
                      const char *finish, const qrt_oa_usage *u, const qrt_oa_logprobs *lp) {
    int ok = 1;
    if (r->kind == QRT_OA_CHAT) {
        json_t *calls = tool_calls_of(r, o);
        if (calls) {
            size_t i;
            json_t *c;
            json_array_foreach(calls, i, c) json_object_set_new(c, "index", json_integer((json_int_t)i));
            ok = add_chunk(sse, r, m, json_pack("{s:o}", "tool_calls", calls), NULL);
            finish = "tool_calls";
        } else if (o->tools.n) {
            ok = add_chunk(sse, r, m, json_pack("{s:s%}", "content", o->tools.p, o->tools.n), NULL);
        }
    }
    ok = ok && add_chunk_lp(sse, r, m, r->kind == QRT_OA_CHAT ? json_object() : json_string(""), finish, lp);
    if (ok && r->include_usage) {
        json_t *j = envelope(r, m, 1);
        json_object_set_new(j, "choices", json_array());
        json_object_set_new(j, "usage", usage_json(u));
        json_object_set_new(j, "timings", timings_json(u));
        ok = add_event(sse, j);
    }
    return ok && qrt_buf_add(sse, "data: [DONE]\n\n", 14);
}

int qrt_oa_stream_error(qrt_buf *sse, const char *message) {
    char *e = qrt_oa_error_json(message, "server_error", "generation_failed");
    int ok = e && qrt_buf_add(sse, "data: ", 6) && qrt_buf_add(sse, e, strlen(e)) &&
             qrt_buf_add(sse, "\n\ndata: [DONE]\n\n", 16);
    free(e);
    return ok;
}
