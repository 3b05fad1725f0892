#include "util/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/common.h"

static void draw(qrt_progress *p, int final) {
    const int width = 30;
    double frac = p->total ? (double)p->done / (double)p->total : 1.0;
    int filled = (int)(frac * width);
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
    bar[width] = 0;
    fprintf(stderr, "\r%-10s [%s] %6.2f/%.2f GB %6.1f s%s", p->label, bar, p->done / 1e9, p->total / 1e9,
            (qrt_now_ms() - p->t0_ms) / 1e3, final ? "\n" : "");
    fflush(stderr);
}

void qrt_progress_begin(qrt_progress *p, const char *label, uint64_t total, int want) {
    const char *env = getenv("QRT_PROGRESS");
    memset(p, 0, sizeof *p);
    p->label = label;
    p->total = total;
    p->t0_ms = qrt_now_ms();
    p->enabled = want && ((env && strcmp(env, "1") == 0) || isatty(2));
}

void qrt_progress_add(qrt_progress *p, uint64_t n) {
    p->done += n;
    if (!p->enabled) return;
    double now = qrt_now_ms();
    if (now - p->last_draw_ms < 100) return;
    p->last_draw_ms = now;
    draw(p, 0);
}

void qrt_progress_end(qrt_progress *p) {
    if (p->enabled) draw(p, 1);
}
