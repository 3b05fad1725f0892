#include "backend/cpu/cpu_quant.h"

#include <string.h>

#include "io/dtype.h"
#include "util/common.h"

const float qrt_e2m1_lut[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

static void float_row(const qrt_linear *W, int64_t r, int64_t off, int64_t n, float *out) {
    const size_t at = (size_t)r * (size_t)W->k + (size_t)off;
    switch (W->fmt) {
    case QRT_WF_F32: memcpy(out, (const float *)W->data + at, sizeof(float) * (size_t)n); break;
    case QRT_WF_BF16: {
        const uint16_t *p = (const uint16_t *)W->data + at;
        for (int64_t i = 0; i < n; i++) out[i] = qrt_bf16_to_f32(p[i]);
        break;
    }
    case QRT_WF_F16: {
        const uint16_t *p = (const uint16_t *)W->data + at;
        for (int64_t i = 0; i < n; i++) out[i] = qrt_f16_to_f32(p[i]);
        break;
    }
    default: QRT_ASSERT(!"not a float format");
    }
}

/* Two codes per byte, the even element in the low nibble; one e4m3 scale per 16 elements. e2m1 · scale is
 * exact in f32 (2 × 4 significant bits), so the only rounding is the multiply by scale2. */
static void nvfp4_row(const qrt_linear *W, int64_t r, int64_t off, int64_t n, float *out) {
    QRT_ASSERT(off % 16 == 0 && (n % 16 == 0 || off + n == W->k));
    const uint8_t *codes = (const uint8_t *)W->data + (size_t)r * (size_t)(W->k / 2);
    const uint8_t *scales = (const uint8_t *)W->scales + (size_t)r * (size_t)(W->k / 16);
    const float scale2 = W->scale2;
    for (int64_t g = off / 16; g * 16 < off + n; g++) {
        const float s = qrt_e4m3_lut[scales[g]];
        const uint8_t *c = codes + g * 8;
        float *o = out + (g * 16 - off);
        for (int j = 0; j < 8; j++) {
            o[2 * j] = (qrt_e2m1_lut[c[j] & 15] * s) * scale2;
            o[2 * j + 1] = (qrt_e2m1_lut[c[j] >> 4] * s) * scale2;
        }
    }
}

static void fp8_block_row(const qrt_linear *W, int64_t r, int64_t off, int64_t n, float *out) {
    const uint8_t *codes = (const uint8_t *)W->data + (size_t)r * (size_t)W->k;
    const int64_t scale_cols = QRT_CEIL_DIV(W->k, 128);
    const float *scales = (const float *)W->scales + (size_t)(r / 128) * (size_t)scale_cols;
    for (int64_t c = off; c < off + n; c++) out[c - off] = qrt_e4m3_lut[codes[c]] * scales[c / 128];
}

void qrt_cpu_row_to_f32(const qrt_linear *W, int64_t r, int64_t off, int64_t n, float *out) {
    switch (W->fmt) {
    case QRT_WF_NVFP4: nvfp4_row(W, r, off, n, out); break;
    case QRT_WF_FP8B: fp8_block_row(W, r, off, n, out); break;
    default: float_row(W, r, off, n, out); break;
    }
}
