/* Weight-row decoding for the CPU backend, every format of qrt_wformat: the matmul widens a block of a
 * weight row to f32 and runs the same fixed-order dot product whatever the storage. */
#ifndef QRT_CPU_QUANT_H
#define QRT_CPU_QUANT_H
#include "backend/linear.h"

/* The E2M1 (FP4) code → value table: bits 0–2 index [0, 0.5, 1, 1.5, 2, 3, 4, 6], bit 3 is the sign. */
extern const float qrt_e2m1_lut[16];

/* out[0..n) = W[r][off .. off+n) as f32. For NVFP4 off and n must be multiples of 16 (or n reach the row's
 * end); FP8 block rows may start anywhere. Values are exactly those of docs/model.md §4:
 *   NVFP4: (e2m1(code) · f32(scale)) · scale2      FP8: f32(e4m3(code)) · scale[r/128][c/128] */
void qrt_cpu_row_to_f32(const qrt_linear *W, int64_t r, int64_t off, int64_t n, float *out);
#endif
