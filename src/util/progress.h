/* A progress bar on stderr for long loads: "loading  [#####.....]  2.1/4.2 GB  1.3 s". Drawn only when
 * stderr is a terminal or QRT_PROGRESS=1, so logs and tests stay clean. */
#ifndef QRT_PROGRESS_H
#define QRT_PROGRESS_H
#include <stdint.h>

typedef struct {
    const char *label;
    uint64_t total, done;
    double t0_ms, last_draw_ms;
    int enabled;
} qrt_progress;

void qrt_progress_begin(qrt_progress *p, const char *label, uint64_t total, int want);
void qrt_progress_add(qrt_progress *p, uint64_t n);
void qrt_progress_end(qrt_progress *p);
#endif
