/* Helpers the model commands share (generate, chat): prompts from a file or stdin, a random seed that the
 * user can repeat, and a ticking line on stderr while a long prompt is prefilled. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tools/tools.h"
#include "util/common.h"

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
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return max == UINT64_MAX ? z : z % (max + 1);
}

/* ------------------------------------------------------------------------------------------------
 * The prefill ticker: qrt_generate gives no word until the first token, which on a long prompt can take
 * minutes on the CPU; a line with the elapsed time says the run is alive. */

struct qrt_cli_ticker {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int n_tokens;
    double t0_ms;
};

static void *tick(void *arg) {
    qrt_cli_ticker *t = arg;
    pthread_mutex_lock(&t->mu);
    while (!t->done) {
        fprintf(stderr, "\rprefill: %d prompt tokens, %.1f s", t->n_tokens, (qrt_now_ms() - t->t0_ms) / 1e3);
        fflush(stderr);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 250 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&t->cv, &t->mu, &until);
    }
    fputs("\r\033[K", stderr); /* the line goes away; the summary after generation has the prefill time */
    fflush(stderr);
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

qrt_cli_ticker *qrt_cli_ticker_start(int n_tokens) {
    if (n_tokens <= QRT_CLI_LONG_PROMPT || !isatty(2)) return NULL;
    qrt_cli_ticker *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->n_tokens = n_tokens;
    t->t0_ms = qrt_now_ms();
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    if (pthread_create(&t->thread, NULL, tick, t) != 0) {
        pthread_mutex_destroy(&t->mu), pthread_cond_destroy(&t->cv), free(t);
        return NULL;
    }
    return t;
}

void qrt_cli_ticker_stop(qrt_cli_ticker **tp) {
    qrt_cli_ticker *t = *tp;
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->done = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    pthread_mutex_destroy(&t->mu), pthread_cond_destroy(&t->cv), free(t);
    *tp = NULL;
}
