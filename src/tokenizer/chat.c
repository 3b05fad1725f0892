/* Qwen3.5/3.6 chat template (see chat.h). Every rule below mirrors a line of the Jinja template; the
 * comments quote the Jinja expression they implement where it is not obvious. */
#include "tokenizer/chat.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "util/common.h"

/* ---------------------------------------------------------------------------------------------------
 * A growable string */

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} strbuf;

static void sb_add(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_puts(strbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* A view into a string: Python's str methods without copying. */
typedef struct {
    const char *p;
    size_t n;
} view;

static view view_of(const char *s) { return (view){s ? s : "", s ? strlen(s) : 0}; }

/* Python's str.isspace() set, which Jinja's |trim strips (str.strip() with no argument). */
static size_t space_len_at(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    if (n >= 1 && ((u[0] >= 0x09 && u[0] <= 0x0D) || (u[0] >= 0x1C && u[0] <= 0x20))) return 1;
    if (n >= 2 && u[0] == 0xC2 && (u[1] == 0x85 || u[1] == 0xA0)) return 2;
    if (n >= 3 && u[0] == 0xE1 && u[1] == 0x9A && u[2] == 0x80) return 3; /* U+1680 */
    if (n >= 3 && u[0] == 0xE2 && u[1] == 0x80 && (u[2] <= 0x8A || u[2] == 0xA8 || u[2] == 0xA9 || u[2] == 0xAF))
        return 3; /* U+2000..200A, 2028, 2029, 202F */
    if (n >= 3 && u[0] == 0xE2 && u[1] == 0x81 && u[2] == 0x9F) return 3; /* U+205F */
    if (n >= 3 && u[0] == 0xE3 && u[1] == 0x80 && u[2] == 0x80) return 3; /* U+3000 */
    return 0;
}

static view trim(view v) {
    size_t k;
    while (v.n && (k = space_len_at(v.p, v.n))) v.p += k, v.n -= k;
    for (;;) { /* strip from the right: find the start of the last character */
        if (!v.n) break;
        size_t i = v.n - 1;
        while (i > 0 && ((unsigned char)v.p[i] & 0xC0) == 0x80) i--;
        if (space_len_at(v.p + i, v.n - i) != v.n - i) break;
        v.n = i;
    }
    return v;
}

static int starts_with(view v, const char *s) { return v.n >= strlen(s) && !memcmp(v.p, s, strlen(s)); }
static int ends_with(view v, const char *s) {
    return v.n >= strlen(s) && !memcmp(v.p + v.n - strlen(s), s, strlen(s));
}

/* Offset of the first / last occurrence of s in v, or -1. */
static long find_first(view v, const char *s) {
    size_t m = strlen(s);
    for (size_t i = 0; i + m <= v.n; i++)
        if (!memcmp(v.p + i, s, m)) return (long)i;
    return -1;
}

static long find_last(view v, const char *s) {
    size_t m = strlen(s);
    for (size_t i = v.n + 1; i-- > 0;)
        if (i + m <= v.n && !memcmp(v.p + i, s, m)) return (long)i;
    return -1;
}

/* ---------------------------------------------------------------------------------------------------
 * Python's json.dumps(x, ensure_ascii=False) and str(x), which the template's |tojson and |string use. */

static void py_float(strbuf *b, double x) {
    char digits[40], out[64];
    if (isnan(x)) return sb_puts(b, "NaN");
    if (isinf(x)) return sb_puts(b, x > 0 ? "Infinity" : "-Infinity");
    /* repr(): the fewest significant digits that read back as x */
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(digits, sizeof digits, "%.*e", prec - 1, x);
        if (strtod(digits, NULL) == x) break;
    }
    char *e = strchr(digits, 'e');
    int exp10 = atoi(e + 1);
    *e = 0;
    char mant[24];
    size_t nm = 0;
    int neg = digits[0] == '-';
    for (const char *p = digits + neg; *p; p++)
        if (*p != '.') mant[nm++] = *p;
    while (nm > 1 && mant[nm - 1] == '0') nm--;
    mant[nm] = 0;
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (exp10 >= -5 + 1 && exp10 < 16) { /* repr uses fixed notation for 1e-4 <= |x| < 1e16 */
        if (exp10 < 0) {
            o += (size_t)snprintf(out + o, sizeof out - o, "0.");
            for (int i = 0; i < -exp10 - 1; i++) out[o++] = '0';
            o += (size_t)snprintf(out + o, sizeof out - o, "%s", mant);
        } else {
            for (int i = 0; i <= exp10; i++) out[o++] = i < (int)nm ? mant[i] : '0';
            out[o++] = '.';
            if ((int)nm > exp10 + 1) o += (size_t)snprintf(out + o, sizeof out - o, "%s", mant + exp10 + 1);
            else out[o++] = '0';
        }
    } else {
        out[o++] = mant[0];
        if (nm > 1) o += (size_t)snprintf(out + o, sizeof out - o, ".%s", mant + 1);
        o += (size_t)snprintf(out + o, sizeof out - o, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    sb_add(b, out, o);
}

static void json_string_out(strbuf *b, const char *s, size_t n) {
    sb_puts(b, "\"");
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c == '\b') esc = "\\b";
        else if (c == '\f') esc = "\\f";
        else if (c < 0x20) snprintf(u, sizeof u, "\\u%04x", c), esc = u;
        if (!esc) continue;
        sb_add(b, s + run, i - run);
        sb_puts(b, esc);
        run = i + 1;
    }
    sb_add(b, s + run, n - run);
    sb_puts(b, "\"");
}

static void py_json(strbuf *b, const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *item;
        int first = 1;
        sb_puts(b, "{");
        json_object_foreach((json_t *)v, key, item) {
            if (!first) sb_puts(b, ", ");
            first = 0;
            json_string_out(b, key, strlen(key));
            sb_puts(b, ": ");
            py_json(b, item);
        }
        sb_puts(b, "}");
        break;
    }
    case JSON_ARRAY:
        sb_puts(b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) sb_puts(b, ", ");
            py_json(b, json_array_get(v, i));
        }
        sb_puts(b, "]");
        break;
    case JSON_STRING: json_string_out(b, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER: {
        char num[32];
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        sb_puts(b, num);
        break;
    }
    case JSON_REAL: py_float(b, json_real_value(v)); break;
    case JSON_TRUE: sb_puts(b, "true"); break;
    case JSON_FALSE: sb_puts(b, "false"); break;
    case JSON_NULL: sb_puts(b, "null"); break;
    }
}

/* One tool-call argument value. 3.5: `args_value | tojson if mapping or (sequence and not string)
 * else args_value | string`; 3.6: `args_value | string if string else args_value | tojson`. */
static void argument_value(strbuf *b, const json_t *v, qrt_chat_dialect d) {
    if (json_is_string(v)) return sb_add(b, json_string_value(v), json_string_length(v));
    if (d == QRT_CHAT_QWEN36 || json_is_object(v) || json_is_array(v)) return py_json(b, v);
    if (json_is_true(v)) sb_puts(b, "True");
    else if (json_is_false(v)) sb_puts(b, "False");
    else if (json_is_null(v)) sb_puts(b, "None");
    else py_json(b, v); /* numbers: str() and json.dumps() agree */
}

/* ---------------------------------------------------------------------------------------------------
 * The template */

static const char *tools_preamble = "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n"
                                    "<tools>";
static const char *tools_instructions =
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified "
    "format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in natural "
    "language BEFORE the function call, but NOT after\n- If there is no function call available, answer the question "
    "like normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>";

static int is_role(const qrt_chat_message *m, const char *role) { return m->role && !strcmp(m->role, role); }

static qrt_status render_system(strbuf *b, const qrt_chat_message *msgs, const qrt_chat_opts *o) {
    json_t *tools = NULL;
    if (o->tools) {
        json_error_t err;
        tools = json_loads(o->tools, 0, &err);
        if (!tools || !json_is_array(tools)) {
            json_decref(tools);
            return qrt_fail(QRT_ERR_ARG, "chat template: the tools must be a JSON list of tool definitions%s%s",
                            tools ? "" : ": ", tools ? "" : err.text);
        }
    }
    view system = is_role(&msgs[0], "system") ? trim(view_of(msgs[0].content)) : (view){"", 0};
    if (json_array_size(tools) > 0) { /* `tools and tools is iterable`: an empty list counts as none */
        sb_puts(b, tools_preamble);
        for (size_t i = 0; i < json_array_size(tools); i++) {
            sb_puts(b, "\n");
            py_json(b, json_array_get(tools, i));
        }
        sb_puts(b, tools_instructions);
        if (system.n) sb_puts(b, "\n\n"), sb_add(b, system.p, system.n);
        sb_puts(b, "<|im_end|>\n");
    } else if (is_role(&msgs[0], "system")) {
        sb_puts(b, "<|im_start|>system\n");
        sb_add(b, system.p, system.n);
        sb_puts(b, "<|im_end|>\n");
    }
    json_decref(tools);
    return QRT_OK;
}

/* The last user message that is a real query, not tool output wrapped in <tool_response>. */
static int last_query_index(const qrt_chat_message *msgs, int n) {
    for (int i = n - 1; i >= 0; i--) {
        if (!is_role(&msgs[i], "user")) continue;
        view c = trim(view_of(msgs[i].content));
        if (!(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) return i;
    }
    return -1;
}

static qrt_status render_tool_calls(strbuf *b, const qrt_chat_message *m, view content, qrt_chat_dialect d) {
    for (int k = 0; k < m->n_tool_calls; k++) {
        const qrt_chat_tool_call *tc = &m->tool_calls[k];
        if (!tc->name) return qrt_fail(QRT_ERR_ARG, "chat template: tool call %d has no function name", k);
        if (k > 0) sb_puts(b, "\n<tool_call>\n<function=");
        else if (trim(content).n) sb_puts(b, "\n\n<tool_call>\n<function=");
        else sb_puts(b, "<tool_call>\n<function=");
        sb_puts(b, tc->name);
        sb_puts(b, ">\n");
        if (tc->arguments) {
            json_error_t err;
            json_t *args = json_loads(tc->arguments, JSON_DECODE_ANY, &err);
            if (!json_is_object(args)) {
                json_decref(args);
                return qrt_fail(QRT_ERR_ARG, "chat template: the arguments of tool call '%s' must be a JSON object",
                                tc->name);
            }
            const char *key;
            json_t *value;
            json_object_foreach(args, key, value) {
                sb_puts(b, "<parameter="), sb_puts(b, key), sb_puts(b, ">\n");
                argument_value(b, value, d);
                sb_puts(b, "\n</parameter>\n");
            }
            json_decref(args);
        }
        sb_puts(b, "</function>\n</tool_call>");
    }
    return QRT_OK;
}

static qrt_status render_assistant(strbuf *b, const qrt_chat_message *m, int show_reasoning, qrt_chat_dialect d) {
    view content = trim(view_of(m->content)), reasoning = {"", 0};
    if (m->reasoning) {
        reasoning = view_of(m->reasoning);
    } else if (find_first(content, "</think>") >= 0) {
        /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
        view before = {content.p, (size_t)find_first(content, "</think>")};
        while (before.n && before.p[before.n - 1] == '\n') before.n--;
        long open = find_last(before, "<think>");
        if (open >= 0) before.p += open + 7, before.n -= (size_t)open + 7;
        while (before.n && before.p[0] == '\n') before.p++, before.n--;
        reasoning = before;
        /* content.split('</think>')[-1].lstrip('\n') */
        long close = find_last(content, "</think>");
        content.p += close + 8, content.n -= (size_t)close + 8;
        while (content.n && content.p[0] == '\n') content.p++, content.n--;
    }
    reasoning = trim(reasoning);
    sb_puts(b, "<|im_start|>assistant\n");
    if (show_reasoning) {
        sb_puts(b, "<think>\n");
        sb_add(b, reasoning.p, reasoning.n);
        sb_puts(b, "\n</think>\n\n");
    }
    sb_add(b, content.p, content.n);
    QRT_TRY(render_tool_calls(b, m, content, d));
    sb_puts(b, "<|im_end|>\n");
    return QRT_OK;
}

static qrt_status render(strbuf *b, const qrt_chat_message *msgs, int n, const qrt_chat_opts *o) {
    if (n <= 0) return qrt_fail(QRT_ERR_ARG, "chat template: No messages provided.");
    for (int i = 0; i < n; i++)
        if (!msgs[i].role) return qrt_fail(QRT_ERR_ARG, "chat template: message %d has no role", i);
    QRT_TRY(render_system(b, msgs, o));
    int last_query = last_query_index(msgs, n);
    if (last_query < 0) return qrt_fail(QRT_ERR_ARG, "chat template: No user query found in messages.");
    for (int i = 0; i < n; i++) {
        const qrt_chat_message *m = &msgs[i];
        view content = trim(view_of(m->content));
        if (is_role(m, "system")) {
            if (i != 0) return qrt_fail(QRT_ERR_ARG, "chat template: System message must be at the beginning.");
        } else if (is_role(m, "user")) {
            sb_puts(b, "<|im_start|>user\n");
            sb_add(b, content.p, content.n);
            sb_puts(b, "<|im_end|>\n");
        } else if (is_role(m, "assistant")) {
            int preserve = o->dialect == QRT_CHAT_QWEN36 && o->preserve_thinking;
            QRT_TRY(render_assistant(b, m, preserve || i > last_query, o->dialect));
        } else if (is_role(m, "tool")) {
            /* consecutive tool results share one user turn */
            if (i > 0 && !is_role(&msgs[i - 1], "tool")) sb_puts(b, "<|im_start|>user");
            sb_puts(b, "\n<tool_response>\n");
            sb_add(b, content.p, content.n);
            sb_puts(b, "\n</tool_response>");
            if (i == n - 1 || !is_role(&msgs[i + 1], "tool")) sb_puts(b, "<|im_end|>\n");
        } else {
            return qrt_fail(QRT_ERR_ARG, "chat template: Unexpected message role. ('%s' in message %d)", m->role, i);
        }
    }
    if (o->add_generation_prompt)
        sb_puts(b, o->enable_thinking ? "<|im_start|>assistant\n<think>\n"
                                      : "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    return QRT_OK;
}

qrt_status qrt_chat_render(const qrt_chat_message *msgs, int n_msgs, const qrt_chat_opts *opts, char **out) {
    *out = NULL;
    strbuf b = {0};
    qrt_status st = render(&b, msgs, n_msgs, opts);
    if (st == QRT_OK && (b.oom || (!b.p && (sb_add(&b, "", 0), b.oom))))
        st = qrt_fail(QRT_ERR_MEMORY, "chat template: out of memory");
    if (st != QRT_OK) {
        free(b.p);
        return st;
    }
    *out = b.p;
    return QRT_OK;
}

/* ---------------------------------------------------------------------------------------------------
 * OpenAI-style JSON messages */

static qrt_status message_from_json(json_t *j, int i, qrt_chat_message *m, char ***owned, int *n_owned) {
    if (!json_is_object(j)) return qrt_fail(QRT_ERR_ARG, "chat messages[%d] must be an object", i);
    json_t *content = json_object_get(j, "content"), *reasoning = json_object_get(j, "reasoning_content");
    m->role = json_string_value(json_object_get(j, "role"));
    if (!m->role) return qrt_fail(QRT_ERR_ARG, "chat messages[%d].role must be a string", i);
    if (content && !json_is_null(content) && !json_is_string(content))
        return qrt_fail(QRT_ERR_UNSUPPORTED, "chat messages[%d].content must be a string or null (content parts, "
                        "images and videos are not supported)", i);
    m->content = json_string_value(content);
    m->reasoning = json_string_value(reasoning); /* `reasoning_content is string` */
    json_t *calls = json_object_get(j, "tool_calls");
    if (!json_is_array(calls) || json_array_size(calls) == 0) return QRT_OK;
    size_t n = json_array_size(calls);
    qrt_chat_tool_call *tc = calloc(n, sizeof *tc);
    char **more = realloc(*owned, (size_t)(*n_owned + 1 + (int)n) * sizeof *more);
    if (!tc || !more) return free(tc), qrt_fail(QRT_ERR_MEMORY, "out of memory");
    *owned = more;
    (*owned)[(*n_owned)++] = (char *)tc;
    m->tool_calls = tc, m->n_tool_calls = (int)n;
    for (size_t k = 0; k < n; k++) {
        json_t *call = json_array_get(calls, k);
        json_t *fn = json_object_get(call, "function");
        if (!fn) fn = call; /* `tool_call.function is defined` or the flat form */
        json_t *args = json_object_get(fn, "arguments");
        tc[k].name = json_string_value(json_object_get(fn, "name"));
        if (!tc[k].name)
            return qrt_fail(QRT_ERR_ARG, "chat messages[%d].tool_calls[%zu] needs a function name", i, k);
        if (json_is_string(args)) tc[k].arguments = json_string_value(args);
        else if (args && !json_is_null(args)) {
            char *text = json_dumps(args, JSON_ENCODE_ANY);
            if (!text) return qrt_fail(QRT_ERR_MEMORY, "out of memory");
            (*owned)[(*n_owned)++] = text;
            tc[k].arguments = text;
        }
    }
    return QRT_OK;
}

qrt_status qrt_chat_render_json(const char *messages_json, const qrt_chat_opts *opts, char **out) {
    *out = NULL;
    json_error_t err;
    json_t *root = json_loads(messages_json, 0, &err);
    if (!json_is_array(root)) {
        json_decref(root);
        return qrt_fail(QRT_ERR_ARG, "chat messages must be a JSON list%s%s", root ? "" : ": ", root ? "" : err.text);
    }
    int n = (int)json_array_size(root), n_owned = 0;
    char **owned = NULL;
    qrt_chat_message *msgs = calloc((size_t)n + 1, sizeof *msgs);
    qrt_status st = msgs ? QRT_OK : qrt_fail(QRT_ERR_MEMORY, "out of memory");
    for (int i = 0; i < n && st == QRT_OK; i++) st = message_from_json(json_array_get(root, (size_t)i), i, &msgs[i],
                                                                       &owned, &n_owned);
    if (st == QRT_OK) st = qrt_chat_render(msgs, n, opts, out);
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    free(owned), free(msgs);
    json_decref(root);
    return st;
}
