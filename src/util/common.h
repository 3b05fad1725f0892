/* Shared helpers: error reporting, allocation, small math.
 *
 * Dimension letters used across qwenrt (shape comments on every pointer use them):
 *   T  tokens in the current call           V  vocabulary rows (padded)      D  hidden size
 *   F  MLP intermediate size                 L  decoder layers                C  max context (session)
 *   Hq/Hkv attention heads / kv heads        Dh attention head dim            R  rotary dims (Dh * factor)
 *   Hk/Hv  GDN key heads / value heads       Dk/Dv GDN key / value head dim   Ck conv kernel width (4)
 *   N  output features of a linear           K  input features of a linear
 */
#ifndef QRT_COMMON_H
#define QRT_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "qwenrt.h"

/* Record a failure message for qrt_last_error() and return st, so callers write
 * `return qrt_fail(QRT_ERR_FORMAT, "%s: header length %llu exceeds the file size", path, n);` */
qrt_status qrt_fail(qrt_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void qrt_clear_error(void);

/* Allocation that never returns NULL silently: on failure it records QRT_ERR_MEMORY and returns NULL. */
void *qrt_calloc(size_t n, size_t size);
void *qrt_alloc_aligned(size_t bytes); /* 64-byte aligned, zeroed; free with free() */

/* Monotonic clock in milliseconds. */
double qrt_now_ms(void);
/* The CLOCK_REALTIME moment seconds from now: the deadline pthread_cond_timedwait takes. */
struct timespec qrt_deadline_after(double seconds);

#define QRT_TRY(expr)                 \
    do {                              \
        qrt_status st_ = (expr);      \
        if (st_ != QRT_OK) return st_; \
    } while (0)

#define QRT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define QRT_MAX(a, b) ((a) > (b) ? (a) : (b))
#define QRT_CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

/* Programming errors (not input errors): abort with the location. */
#define QRT_ASSERT(cond)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "qwenrt: internal error at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

#endif
