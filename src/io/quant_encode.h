/* Encoding weights to NVFP4 and FP8 block-128 exactly as the reference quantizers do (compressed-tensors
 * for NVFP4; the fine-grained FP8 recipe for block-128; docs/model.md §4). Used by `qwenrt quantize`,
 * `qwenrt synth` and the tests. */
#ifndef QRT_QUANT_ENCODE_H
#define QRT_QUANT_ENCODE_H
#include <stdint.h>

/* Call qrt_dtype_init() first (the encoders read its e4m3 table). */

/* Round to the nearest e4m3fn value, ties to even, |x| clamped to 448 first (no NaN out for finite x). */
uint8_t qrt_e4m3_encode(float x);
/* Round to the nearest E2M1 value, ties to the even code (what compressed-tensors' cast_to_fp4 does: 0.25→0,
 * 0.75→1, 1.25→1, 1.75→2, 2.5→2, 3.5→4, 5→4), |x| clamped to 6; bit 3 = sign bit of x. */
uint8_t qrt_e2m1_encode(float x);

/* compressed-tensors generate_gparam: 448·6 / amax(|W|) (1 when that is not finite). */
float qrt_nvfp4_global_scale(float amax);
/* One row of K (multiple of 16) values → K/2 code bytes (low nibble = even element) and K/16 e4m3 scales:
 * scale = e4m3((amax_block / 6) · global) (0 → 0.125, as compressed-tensors), code = e2m1(x / (scale / global)). */
void qrt_nvfp4_quantize_row(const float *x, int64_t K, float global, uint8_t *codes, uint8_t *scales);

/* One band of up to 128 rows [rows][K] → e4m3 codes [rows][K] and f32 scales [ceil(K/128)]:
 * scale = amax_block / 448 (1 for an all-zero block), code = e4m3(x / scale). */
void qrt_fp8_quantize_band(const float *x, int rows, int64_t K, uint8_t *codes, float *scales);
#endif
