/* The prefill line (qrt_cli_ticker, tools.h): qrt_generate gives no word until the first token, which on a long
 * prompt can take minutes on the CPU; a line with the tokens done and the elapsed time says the run is alive and how
 * far it has got. A thread redraws it, so it keeps ticking inside a piece that takes long. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tools/tools.h"
#include "util/common.h"

struct qrt_cli_ticker {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int n_tokens, n_done;
    double t0_ms;
};

static void *tick(void *arg) {
    qrt_cli_ticker *t = arg;
    pthread_mutex_lock(&t->mu);
    while (!t->done) {
        const double s = (qrt_now_ms() - t->t0_ms) / 1e3;
        if (t->n_done > 0)
            fprintf(stderr, "\rprefill: %d of %d prompt tokens (%.0f%%), %.1f s", t->n_done, t->n_tokens,
                    100.0 * t->n_done / t->n_tokens, s);
        else
            fprintf(stderr, "\rprefill: %d prompt tokens, %.1f s", t->n_tokens, s);
        fflush(stderr);
        const struct timespec until = qrt_deadline_after(0.25);
        pthread_cond_timedwait(&t->cv, &t->mu, &until);
    }
    fputs("\r\033[K", stderr); /* the line goes away; the summary after generation has the prefill time */
    fflush(stderr);
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

qrt_cli_ticker *qrt_cli_ticker_start(int n_tokens) {
    const char *env = getenv("QRT_PROGRESS");
    if (n_tokens <= QRT_CLI_LONG_PROMPT || !((env && !strcmp(env, "1")) || isatty(2))) return NULL;
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

void qrt_cli_ticker_progress(qrt_cli_ticker *t, int n_done) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->n_done = n_done;
    pthread_mutex_unlock(&t->mu);
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
