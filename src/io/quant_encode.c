#include "io/quant_encode.h"

#include <float.h>
#include <math.h>

#include "io/dtype.h"
#include "util/common.h"

/* Nearest of the non-negative values v[0..n) (increasing) to a ≥ 0, ties to the even index. Midpoints are
 * exact in double, so the comparison is exact. */
static int nearest_even(const float *v, int n, float a) {
    int lo = 0, hi = n - 1;
    if (a >= v[hi]) return hi;
    while (hi - lo > 1) { /* v[lo] <= a < v[hi] */
        int mid = (lo + hi) / 2;
        if (v[mid] <= a) lo = mid;
        else hi = mid;
    }
    double m = ((double)v[lo] + (double)v[hi]) / 2;
    if ((double)a < m) return lo;
    if ((double)a > m) return hi;
    return lo % 2 == 0 ? lo : hi;
}

uint8_t qrt_e4m3_encode(float x) {
    int sign = signbit(x) ? 0x80 : 0;
    float a = fabsf(x);
    if (a > 448.0f) a = 448.0f;
    return (uint8_t)(sign | nearest_even(qrt_e4m3_lut, 127, a) /* codes 0..0x7e: the non-negative values, increasing */);
}

uint8_t qrt_e2m1_encode(float x) {
    static const float pos[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    int sign = signbit(x) ? 8 : 0;
    return (uint8_t)(sign | nearest_even(pos, 8, fabsf(x)));
}

float qrt_nvfp4_global_scale(float amax) {
    float g = 2688.0f / fmaxf(amax, FLT_MIN);
    return isfinite(g) ? g : 1.0f;
}

void qrt_nvfp4_quantize_row(const float *x, int64_t K, float global, uint8_t *codes, uint8_t *scales) {
    for (int64_t g = 0; g < K / 16; g++) {
        const float *xb = x + g * 16;
        float amax = 0;
        for (int j = 0; j < 16; j++) amax = fmaxf(amax, fabsf(xb[j]));
        /* the order compressed-tensors computes in: (amax / 6) · global, then cast to e4m3 */
        uint8_t sc = qrt_e4m3_encode((amax / 6.0f) * global);
        if ((sc & 0x7f) == 0) sc = 0x20; /* 0.125: compressed-tensors replaces a zero scale by the e4m3 eps */
        scales[g] = sc;
        const float div = qrt_e4m3_lut[sc] / global;
        for (int j = 0; j < 16; j += 2) {
            uint8_t lo = qrt_e2m1_encode(xb[j] / div), hi = qrt_e2m1_encode(xb[j + 1] / div);
            codes[g * 8 + j / 2] = (uint8_t)(lo | (hi << 4));
        }
    }
}

void qrt_fp8_quantize_band(const float *x, int rows, int64_t K, uint8_t *codes, float *scales) {
    for (int64_t c0 = 0; c0 < K; c0 += 128) {
        int64_t cn = QRT_MIN(128, K - c0);
        float amax = 0;
        for (int r = 0; r < rows; r++)
            for (int64_t c = c0; c < c0 + cn; c++) amax = fmaxf(amax, fabsf(x[(size_t)r * K + c]));
        float s = amax > 0 ? amax / 448.0f : 1.0f;
        scales[c0 / 128] = s;
        for (int r = 0; r < rows; r++)
            for (int64_t c = c0; c < c0 + cn; c++) codes[(size_t)r * K + c] = qrt_e4m3_encode(x[(size_t)r * K + c] / s);
    }
}
