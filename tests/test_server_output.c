/* Unit tests of the server's text handling: stop strings (trimmed, matched across pushes, held back while
 * they may still start), reasoning/content splitting at </think>, tool-call extraction (Qwen3.5 XML and
 * JSON styles, typed by the tool schema), and OpenAI request validation. No model needed. */
#include <stdlib.h>
#include <string.h>

#include "server/openai.h"
#include "server/output.h"
#include "test_util.h"

/* Push text one byte at a time (the worst split) or whole; returns what the output holds after finish. */
static void run(qrt_output *o, const char *text, int bytewise) {
    size_t n = strlen(text);
    if (bytewise)
        for (size_t i = 0; i < n && !o->stopped; i++) qrt_output_push(o, text + i, 1);
    else
        qrt_output_push(o, text, n);
    qrt_output_finish(o);
}

static const char *str(const qrt_buf *b) { return b->p ? b->p : ""; }
/* A JSON string's text, "(not a string)" when it is missing or not a string (so a check fails instead of crashing). */
static const char *json_str(const json_t *v) { return json_is_string(v) ? json_string_value(v) : "(not a string)"; }

static void test_stops(void) {
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        const char *stops[] = {"STOP", "\n\n"};
        qrt_output o;
        qrt_output_init(&o, 0, 0, stops, 2);
        run(&o, "hello STO world STOP tail", bytewise);
        CHECK(!strcmp(str(&o.content), "hello STO world "), "content '%s'", str(&o.content));
        CHECK(o.stopped, "stop string matched");
        qrt_output_free(&o);

        qrt_output_init(&o, 0, 0, stops, 2);
        run(&o, "no stop here ST", bytewise);
        CHECK(!strcmp(str(&o.content), "no stop here ST"), "held-back prefix is released at the end: '%s'",
              str(&o.content));
        CHECK(!o.stopped, "no stop");
        qrt_output_free(&o);
    }
    /* streaming never shows a prefix of a stop string that later matches */
    const char *stops[] = {"END"};
    qrt_output o;
    qrt_output_init(&o, 0, 0, stops, 1);
    qrt_output_push(&o, "abcE", 4);
    CHECK(o.content.n == 3, "'E' held back, got %zu bytes", o.content.n);
    qrt_output_push(&o, "N", 1);
    CHECK(o.content.n == 3, "'EN' held back");
    qrt_output_push(&o, "D!", 2);
    CHECK(o.stopped && o.content.n == 3, "stopped at END");
    qrt_output_free(&o);
}

static int to_buf(void *b, const char *s, size_t n) { return qrt_buf_add(b, s, n); }

/* The stop stage alone (generate --stop): text before the stop passes unchanged, newlines and <think> included. */
static void test_stop_filter(void) {
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        const char *stops[] = {"<|x|>", "END"};
        const char *text = "\n\n<think>a EN b<|x| c<|x|> never";
        qrt_stop_filter f;
        qrt_buf got = {0};
        CHECK(qrt_stop_init(&f, stops, 2), "init");
        size_t n = strlen(text);
        if (bytewise)
            for (size_t i = 0; i < n && !f.stopped; i++) qrt_stop_push(&f, text + i, 1, to_buf, &got);
        else
            qrt_stop_push(&f, text, n, to_buf, &got);
        qrt_stop_finish(&f, to_buf, &got);
        CHECK(f.stopped && !strcmp(str(&got), "\n\n<think>a EN b<|x| c"), "stop filter gave '%s'", str(&got));
        qrt_stop_free(&f), qrt_buf_free(&got);

        CHECK(qrt_stop_init(&f, stops, 2), "init");
        qrt_stop_push(&f, "tail EN", 7, to_buf, &got);
        CHECK(got.n == 5, "'EN' held back, %zu bytes out", got.n);
        qrt_stop_finish(&f, to_buf, &got);
        CHECK(!f.stopped && !strcmp(str(&got), "tail EN"), "held tail released at the end: '%s'", str(&got));
        qrt_stop_free(&f), qrt_buf_free(&got);
    }
}

static void test_reasoning(void) {
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        qrt_output o;
        qrt_output_init(&o, 1, 0, NULL, 0);
        run(&o, "Let me think.\nStep 2.\n</think>\n\nThe answer is 4.", bytewise);
        CHECK(!strcmp(str(&o.reasoning), "Let me think.\nStep 2."), "reasoning '%s'", str(&o.reasoning));
        CHECK(!strcmp(str(&o.content), "The answer is 4."), "content '%s'", str(&o.content));
        qrt_output_free(&o);

        qrt_output_init(&o, 1, 0, NULL, 0);
        run(&o, "<think>\nopened again</think>ok", bytewise);
        CHECK(!strcmp(str(&o.reasoning), "opened again"), "a repeated <think> is dropped: '%s'", str(&o.reasoning));
        CHECK(!strcmp(str(&o.content), "ok"), "content '%s'", str(&o.content));
        qrt_output_free(&o);

        qrt_output_init(&o, 1, 0, NULL, 0);
        run(&o, "cut off while thinking\n", bytewise);
        CHECK(!strcmp(str(&o.reasoning), "cut off while thinking") && o.content.n == 0, "unfinished reasoning");
        qrt_output_free(&o);
    }
}

static const char *weather_tools =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"zip\":{\"type\":\"string\"},"
    "\"opts\":{\"type\":\"object\"}}}}}]";

static void test_tool_calls(void) {
    const char *text = "</think>\n\nLet me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                       "</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=zip>\n75001\n</parameter>\n"
                       "<parameter=opts>\n{\"unit\": \"C\"}\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
                       "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>";
    json_t *tools = json_loads(weather_tools, 0, NULL);
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        qrt_output o;
        qrt_output_init(&o, 1, 1, NULL, 0);
        run(&o, text, bytewise);
        CHECK(!strcmp(str(&o.content), "Let me check."), "content before the call '%s'", str(&o.content));
        json_t *calls = qrt_oa_tool_calls(o.tools.p, o.tools.n, tools);
        CHECK(calls && json_array_size(calls) == 2, "two tool calls");
        if (calls && json_array_size(calls) == 2) {
            json_t *f0 = json_object_get(json_array_get(calls, 0), "function");
            CHECK(!strcmp(json_str(json_object_get(f0, "name")), "get_weather"), "name");
            json_t *args = json_loads(json_str(json_object_get(f0, "arguments")), 0, NULL);
            CHECK(!strcmp(json_str(json_object_get(args, "city")), "Paris"), "city is a string");
            CHECK(json_integer_value(json_object_get(args, "days")) == 3, "days is an integer");
            CHECK(json_is_string(json_object_get(args, "zip")), "a string parameter stays a string even if numeric");
            CHECK(json_is_object(json_object_get(args, "opts")), "an object parameter is parsed");
            json_decref(args);
            json_t *f1 = json_object_get(json_array_get(calls, 1), "function");
            CHECK(!strcmp(json_str(json_object_get(f1, "name")), "get_time"), "JSON-style call");
            CHECK(!strcmp(json_str(json_object_get(f1, "arguments")), "{\"tz\":\"CET\"}"), "its arguments '%s'",
                  json_str(json_object_get(f1, "arguments")));
        }
        json_decref(calls);
        qrt_output_free(&o);
    }
    CHECK(qrt_oa_tool_calls("<tool_call>garbage</tool_call>", 30, tools) == NULL, "no function: no tool call");
    /* a JSON-style call without "arguments" gets {} (its empty object leaked once: found by fuzz_openai) */
    const char *bare = "<tool_call> {\"name\": \"get_time\"}\n</tool_call>";
    json_t *calls = qrt_oa_tool_calls(bare, strlen(bare), tools);
    json_t *f = json_object_get(json_array_get(calls, 0), "function");
    CHECK(calls && json_array_size(calls) == 1 && !strcmp(json_str(json_object_get(f, "arguments")), "{}"),
          "a call without arguments");
    json_decref(calls);
    /* a function name that is not UTF-8: no call, nothing leaked */
    const char *bad_name = "<tool_call><function=\xff\xfe><parameter=a>1</parameter></function></tool_call>";
    CHECK(qrt_oa_tool_calls(bad_name, strlen(bad_name), tools) == NULL, "a name that is not UTF-8: no tool call");
    json_decref(tools);
}

/* A request body → 1 when accepted; the message when refused is checked to name the field. */
static int parses(qrt_oa_kind kind, const char *body, const char *field_in_error) {
    qrt_oa_request r;
    char err[512] = "";
    int ok = qrt_oa_parse(kind, body, strlen(body), QRT_CHAT_QWEN36, 1000, &r, err, sizeof err);
    if (ok) qrt_oa_request_free(&r);
    else if (field_in_error) CHECK(strstr(err, field_in_error) != NULL, "error '%s' names %s", err, field_in_error);
    return ok;
}

static void test_requests(void) {
    const char *msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
    char b[1024];
    snprintf(b, sizeof b, "{%s}", msgs);
    CHECK(parses(QRT_OA_CHAT, b, NULL), "minimal chat");
    snprintf(b, sizeof b, "{%s, \"frequency_penalty\": 0.5, \"user\": \"x\", \"whatever\": [1]}", msgs);
    CHECK(parses(QRT_OA_CHAT, b, NULL), "unknown fields are ignored");
    snprintf(b, sizeof b, "{%s, \"max_tokens\": \"ten\"}", msgs);
    CHECK(!parses(QRT_OA_CHAT, b, "max_tokens"), "max_tokens of the wrong type");
    snprintf(b, sizeof b, "{%s, \"temperature\": -1}", msgs);
    CHECK(!parses(QRT_OA_CHAT, b, "temperature"), "negative temperature");
    snprintf(b, sizeof b, "{%s, \"stop\": 5}", msgs);
    CHECK(!parses(QRT_OA_CHAT, b, "stop"), "stop of the wrong type");
    snprintf(b, sizeof b, "{%s, \"n\": 2}", msgs);
    CHECK(!parses(QRT_OA_CHAT, b, "'n'"), "n > 1");
    snprintf(b, sizeof b, "{%s, \"chat_template_kwargs\": {\"enable_thinking\": \"no\"}}", msgs);
    CHECK(!parses(QRT_OA_CHAT, b, "enable_thinking"), "enable_thinking of the wrong type");
    CHECK(!parses(QRT_OA_CHAT, "{\"messages\": \"hi\"}", "messages"), "messages not a list");
    CHECK(!parses(QRT_OA_CHAT, "{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}", NULL), "unknown role");
    CHECK(!parses(QRT_OA_CHAT, "[1, 2]", "object"), "not an object");
    CHECK(!parses(QRT_OA_CHAT, "{\"messages\": [", "JSON"), "truncated JSON");
    CHECK(!parses(QRT_OA_CHAT, "{\"messages\": \"\xff\"}", "JSON"), "invalid UTF-8");
    CHECK(parses(QRT_OA_COMPLETION, "{\"prompt\": [1, 2, 999]}", NULL), "token-id prompt");
    CHECK(!parses(QRT_OA_COMPLETION, "{\"prompt\": [1, 1000]}", "prompt[1]"), "token id past the vocabulary");
    CHECK(!parses(QRT_OA_COMPLETION, "{\"prompt\": 7}", "prompt"), "prompt of the wrong type");
    CHECK(parses(QRT_OA_COMPLETION, "{\"prompt\": \"x\", \"stop\": [\"a\", \"b\"], \"stream\": true}", NULL), "stops");
}

int main(void) {
    test_stops();
    test_stop_filter();
    test_reasoning();
    test_tool_calls();
    test_requests();
    return test_exit("server_output");
}
