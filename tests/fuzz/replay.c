/* Runs a fuzz target without libFuzzer, so every build exercises it (CI runs this under ASan/UBSan):
 * each seed file as is, then ITERATIONS deterministic mutations of it (byte flips, truncations, length
 * field rewrites, insertions of JSON-ish tokens). The real coverage-guided run is the QRT_FUZZ build. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ITERATIONS 3000

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static const char *tokens[] = {"{", "}", "[", "]", ",", ":", "\"", "-1", "1e309", "null", "\"F8_E4M3\"",
                               "\"data_offsets\"", "\"shape\"", "\"dtype\"", "18446744073709551615", "\\u0000"};

static void mutate(uint8_t *buf, size_t *size, size_t cap) {
    switch (next() % 5) {
    case 0: /* flip bytes */
        for (int i = 0, n = 1 + (int)(next() % 8); i < n && *size; i++) buf[next() % *size] ^= (uint8_t)(1u << (next() % 8));
        break;
    case 1: /* truncate */
        if (*size) *size = next() % *size;
        break;
    case 2: /* rewrite the first 8 bytes (the safetensors length field) */
        for (int i = 0; i < 8 && i < (int)*size; i++) buf[i] = (uint8_t)next();
        break;
    case 3: { /* insert a token */
        const char *t = tokens[next() % (sizeof tokens / sizeof tokens[0])];
        size_t len = strlen(t), at = *size ? next() % *size : 0;
        if (*size + len > cap) break;
        memmove(buf + at + len, buf + at, *size - at);
        memcpy(buf + at, t, len);
        *size += len;
        break;
    }
    default: /* overwrite a digit with another */
        for (size_t i = 0; i < *size; i++)
            if (buf[i] >= '0' && buf[i] <= '9' && next() % 16 == 0) buf[i] = (uint8_t)('0' + next() % 10);
    }
}

int main(int argc, char **argv) {
    int runs = 0;
    for (int a = 1; a < argc; a++) {
        FILE *f = fopen(argv[a], "rb");
        if (!f) {
            fprintf(stderr, "replay: cannot open %s\n", argv[a]);
            return 1;
        }
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        /* a seed is cut to its first 64 KB: the parsers' interesting part is the header */
        size_t size = (size_t)(n < 65536 ? n : 65536), cap = size + 4096;
        uint8_t *seed = malloc(size + 1), *buf = malloc(cap);
        if (fread(seed, 1, size, f) != size) size = 0;
        fclose(f);
        LLVMFuzzerTestOneInput(seed, size);
        for (int i = 0; i < ITERATIONS; i++, runs++) {
            size_t cur = size;
            memcpy(buf, seed, size);
            for (int k = 0, m = 1 + (int)(next() % 4); k < m; k++) mutate(buf, &cur, cap);
            /* exact-size copy so ASan sees reads past the end */
            uint8_t *exact = malloc(cur ? cur : 1);
            memcpy(exact, buf, cur);
            LLVMFuzzerTestOneInput(exact, cur);
            free(exact);
        }
        free(seed);
        free(buf);
    }
    printf("replay: %d mutated inputs, no crash\n", runs);
    return 0;
}
