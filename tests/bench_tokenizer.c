/* Tokenizer speed: load time of a tokenizer.json and single-thread encode MB/s over a text file.
 * Usage: bench_tokenizer TOKENIZER.json TEXT_FILE [REPEATS]   (see docs/benchmarks.md, "Tokenizer") */
#include <stdio.h>
#include <stdlib.h>

#include "util/common.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER.json TEXT_FILE [REPEATS]\n", argv[0]);
        return 2;
    }
    int repeats = argc > 3 ? atoi(argv[3]) : 3;
    double t0 = qrt_now_ms();
    qrt_tokenizer *t;
    if (qrt_tokenizer_load(argv[1], &t) != QRT_OK) {
        fprintf(stderr, "%s\n", qrt_last_error());
        return 1;
    }
    double load_ms = qrt_now_ms() - t0;
    FILE *f = fopen(argv[2], "rb");
    if (!f) return perror(argv[2]), 1;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) return fprintf(stderr, "read error\n"), 1;
    fclose(f);
    double best = 1e30;
    size_t n = 0;
    for (int r = 0; r < repeats; r++) {
        int32_t *ids;
        t0 = qrt_now_ms();
        if (qrt_tokenize(t, text, (size_t)size, &ids, &n) != QRT_OK) return fprintf(stderr, "%s\n", qrt_last_error()), 1;
        double ms = qrt_now_ms() - t0;
        best = ms < best ? ms : best;
        free(ids);
    }
    double mb = size / 1e6;
    printf("qwenrt: load %.1f ms (vocab %d); encode %.2f MB -> %zu ids in %.1f ms = %.2f MB/s (best of %d)\n", load_ms,
           qrt_tokenizer_vocab(t), mb, n, best, mb / best * 1e3, repeats);
    qrt_tokenizer_free(t);
    free(text);
    return 0;
}
