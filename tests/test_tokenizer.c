/* Tokenizer and chat-template tests against Hugging Face references (tests/data/tokenizer, made by
 * scripts/make_tokenizer_fixtures.py):
 *   - ids of every test string for both tokenizer files equal HF `tokenizers`' ids;
 *   - decode(encode(s)) == NFC(s); streaming decode == whole decode; decode of random ids == HF decode;
 *   - invalid UTF-8 input and malformed tokenizer.json files give clear errors, not crashes;
 *   - the C chat template renders every conversation exactly as transformers + the Jinja template.
 * Usage: test_tokenizer DATA_DIR (the folder holding tokenizer/). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "test_util.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"
#include "util/common.h"

static char dir[2048];

static const char *data_path(const char *name) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer/%s", dir, name);
    return path;
}

static json_t *load_json(const char *name) {
    json_error_t err;
    json_t *j = json_load_file(data_path(name), JSON_ALLOW_NUL, &err);
    if (!j) {
        fprintf(stderr, "cannot read %s: %s\n", data_path(name), err.text);
        exit(1);
    }
    return j;
}

static void print_ids(const char *label, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s (%zu):", label, n);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

/* ---------------------------------------------------------------------------------------------------
 * Encoding and decoding */

static char *nfc(const char *s, size_t n, size_t *out_len) {
    utf8proc_uint8_t *out = NULL;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &out,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    *out_len = m < 0 ? 0 : (size_t)m;
    return (char *)out;
}

static void check_roundtrip(const qrt_tokenizer *t, const char *text, size_t len, const int32_t *ids, size_t n) {
    char *decoded;
    size_t dlen, nlen;
    CHECK(qrt_detokenize(t, ids, n, &decoded, &dlen) == QRT_OK, "detokenize: %s", qrt_last_error());
    char *expect = nfc(text, len, &nlen);
    CHECK(expect && dlen == nlen && !memcmp(decoded, expect, nlen), "decode(encode(s)) != NFC(s) for \"%.60s\"", text);
    /* streaming, one token at a time, concatenates to the same text */
    qrt_detok_stream *s;
    CHECK(qrt_detok_stream_new(t, &s) == QRT_OK, "stream_new");
    char *joined = malloc(dlen + 16);
    size_t jn = 0, piece_len;
    const char *piece;
    int pieces_valid = 1;
    for (size_t i = 0; i < n; i++) {
        if (qrt_detok_stream_push(s, ids[i], &piece, &piece_len) != QRT_OK || jn + piece_len > dlen) break;
        pieces_valid &= qrt_utf8_valid((const uint8_t *)piece, piece_len, NULL);
        memcpy(joined + jn, piece, piece_len), jn += piece_len;
    }
    piece = qrt_detok_stream_flush(s, &piece_len);
    if (jn + piece_len <= dlen) memcpy(joined + jn, piece, piece_len), jn += piece_len;
    CHECK(pieces_valid, "a streamed piece is not valid UTF-8 for \"%.60s\"", text);
    CHECK(jn == dlen && !memcmp(joined, decoded, dlen), "streaming decode != decode for \"%.60s\"", text);
    qrt_detok_stream_free(s);
    free(joined), free(expect), free(decoded);
}

/* roundtrip: check decode(encode(s)) == NFC(s); not for tok-variant, whose lstrip/rstrip token swallows
 * whitespace and whose added token "café" decodes (as in HF) through the byte map to invalid UTF-8. */
static void test_encode(const char *tok_name, const char *file, json_t *cases, int roundtrip) {
    qrt_tokenizer *t;
    if (qrt_tokenizer_load(data_path(file), &t) != QRT_OK) {
        CHECK(0, "load %s: %s", file, qrt_last_error());
        return;
    }
    int ok = 0;
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        json_t *text_j = json_object_get(c, "text");
        const char *text = json_string_value(text_j);
        size_t len = json_string_length(text_j);
        json_t *want = json_object_get(json_object_get(c, "ids"), tok_name);
        int32_t *ids;
        size_t n;
        if (qrt_tokenize(t, text, len, &ids, &n) != QRT_OK) {
            CHECK(0, "%s case %zu: tokenize failed: %s", tok_name, i, qrt_last_error());
            continue;
        }
        int same = n == json_array_size(want);
        for (size_t k = 0; same && k < n; k++) same = ids[k] == json_integer_value(json_array_get(want, k));
        CHECK(same, "%s case %zu: ids differ from HF for \"%.80s\"", tok_name, i, text);
        if (!same && test_failures <= TEST_SHOWN_FAILURES) {
            int32_t *w = malloc(json_array_size(want) * sizeof *w + 1);
            for (size_t k = 0; k < json_array_size(want); k++) w[k] = (int32_t)json_integer_value(json_array_get(want, k));
            print_ids("qwenrt", ids, n), print_ids("HF    ", w, json_array_size(want));
            free(w);
        }
        ok += same;
        if (roundtrip) check_roundtrip(t, text, len, ids, n);
        free(ids);
    }
    printf("encode %-5s: %d / %zu strings match HF ids\n", tok_name, ok, json_array_size(cases));
    qrt_tokenizer_free(t);
}

static void test_decode(const char *tok_name, const char *file, json_t *cases) {
    qrt_tokenizer *t;
    if (qrt_tokenizer_load(data_path(file), &t) != QRT_OK) return;
    size_t i;
    json_t *c;
    int ok = 0;
    json_array_foreach(cases, i, c) {
        json_t *ids_j = json_object_get(c, "ids");
        size_t n = json_array_size(ids_j);
        int32_t *ids = malloc(n * sizeof *ids + 1);
        for (size_t k = 0; k < n; k++) ids[k] = (int32_t)json_integer_value(json_array_get(ids_j, k));
        char *text;
        size_t len;
        const char *want = json_string_value(json_object_get(c, "text"));
        CHECK(qrt_detokenize(t, ids, n, &text, &len) == QRT_OK, "decode: %s", qrt_last_error());
        int same = len == strlen(want) && !memcmp(text, want, len);
        CHECK(same, "%s decode case %zu: \"%.60s\" != HF \"%.60s\"", tok_name, i, text, want);
        ok += same;
        /* streaming gives the same text, each piece valid UTF-8 */
        qrt_detok_stream *s;
        qrt_detok_stream_new(t, &s);
        size_t at = 0, plen;
        const char *piece;
        int stream_same = 1;
        for (size_t k = 0; k < n; k++) {
            qrt_detok_stream_push(s, ids[k], &piece, &plen);
            stream_same &= at + plen <= len && !memcmp(text + at, piece, plen);
            at += plen;
        }
        piece = qrt_detok_stream_flush(s, &plen);
        stream_same &= at + plen == len && !memcmp(text + at, piece, plen);
        CHECK(stream_same, "%s decode case %zu: streaming differs", tok_name, i);
        qrt_detok_stream_free(s);
        free(text), free(ids);
    }
    printf("decode %-5s: %d / %zu random id lists match HF text\n", tok_name, ok, json_array_size(cases));
    /* ids past the vocabulary are refused */
    int32_t bad[2] = {0, qrt_tokenizer_vocab(t) + 5};
    char *text = NULL;
    CHECK(qrt_detokenize(t, bad, 2, &text, NULL) == QRT_ERR_ARG && strstr(qrt_last_error(), "not in the vocabulary"),
          "out-of-range id: %s", qrt_last_error());
    int32_t negative = -1;
    CHECK(qrt_detokenize(t, &negative, 1, &text, NULL) == QRT_ERR_ARG, "negative id accepted");
    qrt_tokenizer_free(t);
}

static void test_invalid_utf8(json_t *hexes) {
    qrt_tokenizer *t;
    if (qrt_tokenizer_load(data_path("tok-small.json"), &t) != QRT_OK) return;
    size_t i;
    json_t *h;
    json_array_foreach(hexes, i, h) {
        const char *hex = json_string_value(h);
        size_t n = strlen(hex) / 2;
        char bytes[64];
        for (size_t k = 0; k < n; k++) {
            unsigned v;
            sscanf(hex + 2 * k, "%2x", &v);
            bytes[k] = (char)v;
        }
        int32_t *ids = NULL;
        size_t n_ids = 7;
        qrt_status st = qrt_tokenize(t, bytes, n, &ids, &n_ids);
        CHECK(st == QRT_ERR_ARG && strstr(qrt_last_error(), "not valid UTF-8") && !ids && n_ids == 0,
              "invalid UTF-8 %s: status %d, '%s'", hex, st, qrt_last_error());
    }
    printf("invalid UTF-8: %zu inputs refused\n", json_array_size(hexes));
    /* the public lookups */
    CHECK(qrt_tokenizer_token_id(t, "<|im_end|>") == qrt_tokenizer_token_id(t, "<|endoftext|>") + 2, "token_id");
    CHECK(qrt_tokenizer_token_id(t, "not a single token at all") == -1, "token_id of a non-token");
    CHECK(qrt_tokenizer_token_id(t, " ") >= 0 && qrt_tokenizer_is_added(t, qrt_tokenizer_token_id(t, "<think>")),
          "token_id of a byte token / added flag");
    qrt_tokenizer_free(t);
}

/* ---------------------------------------------------------------------------------------------------
 * Malformed tokenizer.json files */

typedef void (*mutation)(json_t *root);

static void drop_model(json_t *r) { json_object_del(r, "model"); }
static void merge_no_space(json_t *r) {
    json_array_set_new(json_object_get(json_object_get(r, "model"), "merges"), 5, json_string("abc"));
}
static void merge_unknown(json_t *r) {
    json_t *pair = json_pack("[ss]", "zzz_unknown", "q");
    json_array_set_new(json_object_get(json_object_get(r, "model"), "merges"), 7, pair);
}
static void merge_wrong_type(json_t *r) {
    json_array_set_new(json_object_get(json_object_get(r, "model"), "merges"), 3, json_integer(12));
}
static void merges_not_list(json_t *r) { json_object_set_new(json_object_get(r, "model"), "merges", json_integer(42)); }
static void vocab_string_id(json_t *r) {
    json_object_set_new(json_object_get(json_object_get(r, "model"), "vocab"), "Ġthe", json_string("x"));
}
static void vocab_negative_id(json_t *r) {
    json_object_set_new(json_object_get(json_object_get(r, "model"), "vocab"), "Ġthe", json_integer(-3));
}
static void vocab_missing(json_t *r) { json_object_del(json_object_get(r, "model"), "vocab"); }
static void vocab_empty(json_t *r) { json_object_set_new(json_object_get(r, "model"), "vocab", json_object()); }
/* a second string for the id that "Ġthe" has */
static void vocab_duplicate_id(json_t *r) {
    json_t *vocab = json_object_get(json_object_get(r, "model"), "vocab");
    json_object_set_new(vocab, "zzqq", json_integer(json_integer_value(json_object_get(vocab, "Ġthe"))));
}
static void added_bad_id(json_t *r) {
    json_object_set_new(json_array_get(json_object_get(r, "added_tokens"), 0), "id", json_string("7"));
}
static void added_empty(json_t *r) {
    json_object_set_new(json_array_get(json_object_get(r, "added_tokens"), 1), "content", json_string(""));
}
static void bad_regex(json_t *r) {
    json_t *split = json_array_get(json_object_get(json_object_get(r, "pre_tokenizer"), "pretokenizers"), 0);
    json_object_set_new(json_object_get(split, "pattern"), "Regex", json_string("(unclosed[\\p{L}"));
}
static void wordpiece(json_t *r) { json_object_set_new(json_object_get(r, "model"), "type", json_string("WordPiece")); }
static void bad_behavior(json_t *r) {
    json_t *split = json_array_get(json_object_get(json_object_get(r, "pre_tokenizer"), "pretokenizers"), 0);
    json_object_set_new(split, "behavior", json_string("Contiguous"));
}
static void bad_normalizer(json_t *r) { json_object_set_new(r, "normalizer", json_pack("{ss}", "type", "NFKD")); }
static void model_is_list(json_t *r) { json_object_set_new(r, "model", json_array()); }

static void expect_load_error(const char *label, const char *text, size_t len, qrt_status want, const char *field) {
    qrt_tokenizer *t = (qrt_tokenizer *)1;
    qrt_status st = qrt_tokenizer_load_buffer(text, len, "bad/tokenizer.json", &t);
    CHECK(st == want && !t && strstr(qrt_last_error(), "bad/tokenizer.json") && strstr(qrt_last_error(), field),
          "%s: status %d (want %d), message '%s' should name the file and '%s'", label, st, want, qrt_last_error(),
          field);
}

static void test_malformed(void) {
    static const struct {
        const char *label;
        mutation mutate;
        qrt_status want;
        const char *field;
    } cases[] = {
        {"missing model", drop_model, QRT_ERR_FORMAT, "'model'"},
        {"model is a list", model_is_list, QRT_ERR_FORMAT, "'model'"},
        {"merge without a space", merge_no_space, QRT_ERR_FORMAT, "model.merges[5]"},
        {"merge of an unknown token", merge_unknown, QRT_ERR_FORMAT, "model.merges[7]"},
        {"merge of the wrong type", merge_wrong_type, QRT_ERR_FORMAT, "model.merges[3]"},
        {"merges not a list", merges_not_list, QRT_ERR_FORMAT, "model.merges"},
        {"vocab id is a string", vocab_string_id, QRT_ERR_FORMAT, "model.vocab"},
        {"vocab id is negative", vocab_negative_id, QRT_ERR_FORMAT, "model.vocab"},
        {"vocab missing", vocab_missing, QRT_ERR_FORMAT, "model.vocab"},
        {"vocab empty", vocab_empty, QRT_ERR_FORMAT, "'model.vocab' is empty"},
        {"vocab id twice", vocab_duplicate_id, QRT_ERR_FORMAT, "\"zzqq\""},
        {"added token id is a string", added_bad_id, QRT_ERR_FORMAT, "added_tokens[0]"},
        {"added token empty", added_empty, QRT_ERR_FORMAT, "added_tokens[1]"},
        {"regex does not compile", bad_regex, QRT_ERR_FORMAT, "pre_tokenizer.pretokenizers[0].pattern"},
        {"WordPiece model", wordpiece, QRT_ERR_UNSUPPORTED, "model.type"},
        {"unsupported split behavior", bad_behavior, QRT_ERR_UNSUPPORTED, "behavior"},
        {"unsupported normalizer", bad_normalizer, QRT_ERR_UNSUPPORTED, "normalizer"},
    };
    json_t *good = load_json("tok-small.json");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *copy = json_deep_copy(good);
        cases[i].mutate(copy);
        char *text = json_dumps(copy, 0);
        expect_load_error(cases[i].label, text, strlen(text), cases[i].want, cases[i].field);
        free(text);
        json_decref(copy);
    }
    /* not JSON at all, truncated, wrong top level, invalid UTF-8 inside a vocab string */
    char *text = json_dumps(good, JSON_COMPACT);
    size_t len = strlen(text);
    expect_load_error("empty file", "", 0, QRT_ERR_FORMAT, "not valid JSON");
    expect_load_error("truncated", text, len / 2, QRT_ERR_FORMAT, "not valid JSON");
    expect_load_error("top-level list", "[1, 2]", 6, QRT_ERR_FORMAT, "top level");
    char *at = strstr(text, "\"vocab\":{\"");
    at += strlen("\"vocab\":{\"");
    at[0] = (char)0xFF; /* the first vocab key now starts with a byte that is never UTF-8 */
    expect_load_error("invalid UTF-8 in vocab", text, len, QRT_ERR_FORMAT, "not valid JSON");
    free(text);
    /* a token string listed twice: JSON allows it, but which id wins would be the parser's choice */
    text = json_dumps(good, JSON_COMPACT);
    at = strstr(text, "\"vocab\":{") + strlen("\"vocab\":{");
    char *dup = malloc(strlen(text) + 64);
    sprintf(dup, "%.*s\"zzqq\":1,\"zzqq\":2,%s", (int)(at - text), text, at);
    expect_load_error("token string twice", dup, strlen(dup), QRT_ERR_FORMAT, "zzqq");
    free(dup);
    free(text);
    json_decref(good);
    qrt_tokenizer *t;
    CHECK(qrt_tokenizer_load("/nonexistent/tokenizer.json", &t) == QRT_ERR_IO && strstr(qrt_last_error(),
          "/nonexistent/tokenizer.json"), "missing file: %s", qrt_last_error());
    printf("malformed tokenizer.json: %zu cases refused with a message naming the file and field\n",
           sizeof cases / sizeof *cases + 5);
}

/* ---------------------------------------------------------------------------------------------------
 * Chat template */

static void test_chat(json_t *doc) {
    json_t *cases = json_object_get(doc, "cases"), *errors = json_object_get(doc, "errors");
    size_t i;
    json_t *c;
    int ok = 0;
    json_array_foreach(cases, i, c) {
        json_t *think = json_object_get(c, "enable_thinking"), *tools = json_object_get(c, "tools");
        const char *dialect = json_string_value(json_object_get(c, "dialect"));
        char *tools_text = json_is_array(tools) ? json_dumps(tools, 0) : NULL;
        char *msgs = json_dumps(json_object_get(c, "messages"), 0);
        qrt_chat_opts o = {
            .dialect = !strcmp(dialect, "qwen3.6") ? QRT_CHAT_QWEN36 : QRT_CHAT_QWEN35,
            .tools = tools_text,
            .add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt")),
            .enable_thinking = !json_is_false(think),
            .preserve_thinking = json_is_true(json_object_get(c, "preserve_thinking")),
        };
        char *out = NULL;
        qrt_status st = qrt_chat_render_json(msgs, &o, &out);
        const char *want = json_string_value(json_object_get(c, "expected"));
        int same = st == QRT_OK && !strcmp(out, want);
        CHECK(same, "chat case %zu (%s, %s): %s", i, json_string_value(json_object_get(c, "name")), dialect,
              st == QRT_OK ? "output differs" : qrt_last_error());
        if (!same && out && test_failures <= 3) fprintf(stderr, "--- got\n%s\n--- want\n%s\n---\n", out, want);
        ok += same;
        free(out), free(msgs), free(tools_text);
    }
    printf("chat template: %d / %zu conversations match transformers\n", ok, json_array_size(cases));
    json_array_foreach(errors, i, c) {
        char *msgs = json_dumps(json_object_get(c, "messages"), 0), *out = NULL;
        qrt_chat_opts o = {.add_generation_prompt = 1, .enable_thinking = 1};
        qrt_status st = qrt_chat_render_json(msgs, &o, &out);
        const char *hf = json_string_value(json_object_get(c, "hf_error"));
        CHECK(st == QRT_ERR_ARG && !out && strstr(qrt_last_error(), hf), "chat error case %s: got '%s', want '%s'",
              json_string_value(json_object_get(c, "name")), qrt_last_error(), hf);
        free(msgs);
    }
    printf("chat template: %zu invalid conversations refused with the template's message\n", json_array_size(errors));
    /* OpenAI-style string arguments render like an object */
    const char *as_string = "[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"\","
                            "\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\": 1.5}\"}}]}]";
    const char *as_object = "[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"\","
                            "\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":{\"x\": 1.5}}}]}]";
    char *a = NULL, *b = NULL;
    qrt_chat_opts o = {.enable_thinking = 1};
    CHECK(qrt_chat_render_json(as_string, &o, &a) == QRT_OK && qrt_chat_render_json(as_object, &o, &b) == QRT_OK &&
          !strcmp(a, b) && strstr(a, "<parameter=x>\n1.5\n</parameter>"), "string tool arguments");
    free(a), free(b);
    CHECK(qrt_chat_render_json("{not json", &o, &a) == QRT_ERR_ARG, "bad messages JSON accepted");
    qrt_chat_message m = {.role = "user", .content = "hi"};
    o.tools = "{\"not\": \"a list\"}";
    CHECK(qrt_chat_render(&m, 1, &o, &a) == QRT_ERR_ARG, "tools that are not a list accepted");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DATA_DIR\n", argv[0]);
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    json_t *enc = load_json("encode_cases.json");
    json_t *cases = json_object_get(enc, "cases"), *dec = json_object_get(enc, "decode");
    test_encode("small", "tok-small.json", cases, 1);
    test_encode("large", "tok-large.json", cases, 1);
    test_encode("variant", "tok-variant.json", cases, 0); /* ignore_merges, lstrip/rstrip, normalized added token */
    test_decode("small", "tok-small.json", json_object_get(dec, "small"));
    test_decode("large", "tok-large.json", json_object_get(dec, "large"));
    test_decode("variant", "tok-variant.json", json_object_get(dec, "variant"));
    test_invalid_utf8(json_object_get(enc, "invalid_utf8_hex"));
    test_malformed();
    json_decref(enc);
    json_t *chat = load_json("chat_cases.json");
    test_chat(chat);
    json_decref(chat);
    return test_exit("tokenizer");
}
