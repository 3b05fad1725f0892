#include "backend/linear.h"

#include "util/common.h"

static const char *format_names[QRT_WF_COUNT] = {"F32", "F16", "BF16", "NVFP4", "FP8-block128"};

const char *qrt_wformat_name(qrt_wformat f) { return f < QRT_WF_COUNT ? format_names[f] : "?"; }

uint64_t qrt_linear_bytes(const qrt_linear *w) {
    const uint64_t n = (uint64_t)w->n, k = (uint64_t)w->k;
    switch (w->fmt) {
    case QRT_WF_F32: return n * k * 4;
    case QRT_WF_F16:
    case QRT_WF_BF16: return n * k * 2;
    case QRT_WF_NVFP4: return n * k / 2 + n * (k / 16) + sizeof(float); /* codes + e4m3 block scales + scale2 */
    case QRT_WF_FP8B: return n * k + QRT_CEIL_DIV(n, 128) * QRT_CEIL_DIV(k, 128) * sizeof(float);
    default: return 0;
    }
}
