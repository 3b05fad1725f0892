/* Helpers the model commands share (generate, chat): prompts from a file or stdin, a random seed that the
 * user can repeat. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tools/tools.h"
#include "util/common.h"
#include "util/mix64.h"

char *qrt_cli_read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap + 1);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *more = realloc(buf, (cap *= 2) + 1);
            if (!more) free(buf);
            buf = more;
        }
    }
    if (buf) buf[n] = 0; /* callers may treat the prompt as a C string */
    *len = n;
    return buf;
}

char *qrt_cli_read_prompt(const char *cmd, const char *flag, const char *path) {
    int from_stdin = !strcmp(path, "-");
    FILE *f = from_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "qwenrt %s: %s: cannot open '%s'; give a readable text file (or - for stdin)\n", cmd, flag,
                path);
        return NULL;
    }
    size_t len;
    char *text = qrt_cli_read_all(f, &len);
    int failed = ferror(f);
    if (!from_stdin) fclose(f);
    if (!text || failed || strlen(text) != len) {
        fprintf(stderr, "qwenrt %s: %s: cannot read '%s'%s\n", cmd, flag, path,
                text && !failed ? " (it holds a NUL byte; the prompt must be text)" : "");
        free(text);
        return NULL;
    }
    return text;
}

uint64_t qrt_cli_random_seed(uint64_t max) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    /* splitmix64 of time and pid: two runs started in the same second still differ */
    uint64_t z = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
    z = qrt_mix64(z);
    return max == UINT64_MAX ? z : z % (max + 1);
}
