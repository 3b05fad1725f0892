/* libFuzzer target for the tokenizer (built with -DQRT_FUZZ=ON and clang).
 * The first input byte picks what to fuzz:
 *   even: the bytes are a tokenizer.json — load it, and when it loads, encode and decode a fixed text;
 *   odd:  the bytes are text (encoded with the small fixture tokenizer) and then token ids (decoded, also
 *         through the streaming decoder).
 * Run: build-fuzz/bin/fuzz_tokenizer -max_total_time=30 tests/data/tokenizer/ */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

static qrt_tokenizer *fixture;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    if (qrt_tokenizer_load(QRT_FUZZ_TOKENIZER, &fixture) != QRT_OK) abort();
    return 0;
}

static void encode_decode(const qrt_tokenizer *t, const char *text, size_t len) {
    int32_t *ids;
    size_t n;
    if (qrt_tokenize(t, text, len, &ids, &n) != QRT_OK) return;
    char *back;
    if (qrt_detokenize(t, ids, n, &back, NULL) == QRT_OK) free(back);
    free(ids);
}

static void decode_ids(const qrt_tokenizer *t, const uint8_t *data, size_t size) {
    size_t n = size / 4;
    int32_t *ids = malloc(n * sizeof *ids + 1);
    for (size_t i = 0; i < n; i++) {
        uint32_t v;
        memcpy(&v, data + 4 * i, 4);
        ids[i] = (int32_t)(v % (uint32_t)(qrt_tokenizer_vocab(t) + 8)); /* mostly valid, a few past the end */
    }
    char *text;
    if (qrt_detokenize(t, ids, n, &text, NULL) == QRT_OK) free(text);
    qrt_detok_stream *s;
    if (qrt_detok_stream_new(t, &s) == QRT_OK) {
        const char *piece;
        size_t len;
        for (size_t i = 0; i < n; i++) qrt_detok_stream_push(s, ids[i], &piece, &len);
        qrt_detok_stream_flush(s, &len);
        qrt_detok_stream_free(s);
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const uint8_t mode = data[0];
    data++, size--;
    if (mode % 2 == 0) {
        qrt_tokenizer *t;
        if (qrt_tokenizer_load_buffer((const char *)data, size, "fuzz.json", &t) != QRT_OK) return 0;
        static const char text[] = "Hello, wörld! 你好 <|im_end|> 123 don't\n\n  x";
        encode_decode(t, text, sizeof text - 1);
        qrt_tokenizer_free(t);
    } else {
        encode_decode(fixture, (const char *)data, size);
        decode_ids(fixture, data, size);
    }
    return 0;
}
