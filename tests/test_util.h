/* The test harness of every test program: CHECK counts the check, records a failure and goes on; main returns
 * test_exit(), which prints the counts and exits non-zero when any check failed. Reference tensors come from
 * safetensors files read with the same parser the engine uses. */
#ifndef QRT_TEST_UTIL_H
#define QRT_TEST_UTIL_H
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "io/safetensors.h"

static int test_failures, test_checks;

/* The CPU tests run the reference backend even in a CUDA build on a GPU machine. */
static const qrt_load_opts test_cpu = {.device = QRT_DEVICE_CPU};

/* Failures printed in full; the rest are only counted, so a broken build does not bury the first ones. */
#define TEST_SHOWN_FAILURES 30

#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        test_checks++;                                                                        \
        if (!(cond) && ++test_failures <= TEST_SHOWN_FAILURES) {                              \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                   \
            fprintf(stderr, __VA_ARGS__);                                                     \
            fprintf(stderr, "\n");                                                            \
            if (test_failures == TEST_SHOWN_FAILURES) fprintf(stderr, "(further failures are only counted)\n"); \
        }                                                                                     \
    } while (0)

#define CHECK_OK(expr)                                                                   \
    do {                                                                                 \
        qrt_status st_ = (expr);                                                         \
        CHECK(st_ == QRT_OK, "%s returned %s: %s", #expr, qrt_status_str(st_), qrt_last_error()); \
    } while (0)

static inline int test_exit(const char *name) {
    printf("%s: %d checks, %d failures\n", name, test_checks, test_failures);
    return test_failures ? 1 : 0;
}

/* A reference tensor by name; NULL (and a failure) if absent or not of dtype dt. */
static inline const qrt_st_tensor *ref_tensor(const qrt_st_set *ref, const char *name, qrt_dtype dt) {
    const qrt_st_tensor *t = qrt_st_find(ref, name);
    CHECK(t && t->dtype == dt, "reference tensor %s missing or not %s", name, qrt_dtype_name(dt));
    return t && t->dtype == dt ? t : NULL;
}

/* max |a-b| / max |ref| over a row: the error relative to the row's scale. */
static inline double row_rel_err(const float *got, const float *ref, int n) {
    double maxd = 0, maxr = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (!(d <= maxd)) maxd = d; /* NaN propagates as a failure */
        if (fabs(ref[i]) > maxr) maxr = fabs(ref[i]);
    }
    return maxr > 0 ? maxd / maxr : maxd;
}
#endif
