/* Error messages (thread-local), checked allocation, clocks. */
#include <stdarg.h>
#include <string.h>
#include <time.h>

#include "util/common.h"

static _Thread_local char last_error[2048];

const char *qrt_status_str(qrt_status st) {
    switch (st) {
    case QRT_OK: return "ok";
    case QRT_ERR_ARG: return "invalid argument";
    case QRT_ERR_IO: return "I/O error";
    case QRT_ERR_FORMAT: return "format error";
    case QRT_ERR_CONFIG: return "config error";
    case QRT_ERR_WEIGHTS: return "weights error";
    case QRT_ERR_MEMORY: return "out of memory";
    case QRT_ERR_CONTEXT: return "context full";
    case QRT_ERR_UNSUPPORTED: return "unsupported";
    case QRT_ERR_NONFINITE: return "non-finite values";
    }
    return "unknown status";
}

const char *qrt_last_error(void) { return last_error; }

void qrt_clear_error(void) { last_error[0] = 0; }

qrt_status qrt_fail(qrt_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return st;
}

void *qrt_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) qrt_fail(QRT_ERR_MEMORY, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *qrt_alloc_aligned(size_t bytes) {
    size_t rounded = QRT_CEIL_DIV(bytes ? bytes : 1, 64) * 64;
    void *p = aligned_alloc(64, rounded);
    if (!p) {
        qrt_fail(QRT_ERR_MEMORY, "out of memory allocating %zu bytes", bytes);
        return NULL;
    }
    memset(p, 0, rounded);
    return p;
}

double qrt_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

struct timespec qrt_deadline_after(double seconds) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    const time_t whole = (time_t)seconds;
    t.tv_sec += whole;
    t.tv_nsec += (long)((seconds - (double)whole) * 1e9);
    if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
    return t;
}
