/* Element types as safetensors names them, and scalar conversions to f32. */
#ifndef QRT_DTYPE_H
#define QRT_DTYPE_H
#include <stdint.h>
#include <string.h>

typedef enum {
    QRT_DT_UNKNOWN = 0,
    QRT_DT_F32,
    QRT_DT_F16,
    QRT_DT_BF16,
    QRT_DT_F8_E4M3, /* float8_e4m3fn: no infinities, 0x7f/0xff are NaN */
    QRT_DT_U8,
    QRT_DT_I8,
    QRT_DT_I32,
    QRT_DT_I64,
    QRT_DT_F64,
    QRT_DT_I16,
    QRT_DT_BOOL,
    QRT_DT_COUNT
} qrt_dtype;

qrt_dtype qrt_dtype_from_name(const char *name); /* "BF16" -> QRT_DT_BF16; QRT_DT_UNKNOWN if not known */
const char *qrt_dtype_name(qrt_dtype dt);
size_t qrt_dtype_size(qrt_dtype dt);             /* bytes per element */

static inline float qrt_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even, NaN kept quiet. */
static inline uint16_t qrt_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

float qrt_f16_to_f32(uint16_t h);
extern float qrt_e4m3_lut[256]; /* filled by qrt_dtype_init() */
void qrt_dtype_init(void);
#endif
