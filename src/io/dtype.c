#include "io/dtype.h"

#include <math.h>

static const struct {
    const char *name;
    qrt_dtype dt;
    size_t size;
} dtypes[] = {
    {"F32", QRT_DT_F32, 4},    {"F16", QRT_DT_F16, 2}, {"BF16", QRT_DT_BF16, 2}, {"F8_E4M3", QRT_DT_F8_E4M3, 1},
    {"U8", QRT_DT_U8, 1},      {"I8", QRT_DT_I8, 1},   {"I32", QRT_DT_I32, 4},   {"I64", QRT_DT_I64, 8},
    {"F64", QRT_DT_F64, 8},    {"I16", QRT_DT_I16, 2}, {"BOOL", QRT_DT_BOOL, 1},
};

qrt_dtype qrt_dtype_from_name(const char *name) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(dtypes[i].name, name) == 0) return dtypes[i].dt;
    return QRT_DT_UNKNOWN;
}

const char *qrt_dtype_name(qrt_dtype dt) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (dtypes[i].dt == dt) return dtypes[i].name;
    return "unknown";
}

size_t qrt_dtype_size(qrt_dtype dt) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (dtypes[i].dt == dt) return dtypes[i].size;
    return 0;
}

float qrt_f16_to_f32(uint16_t h) {
    int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
    float v;
    if (exp == 0) v = ldexpf((float)man, -24);
    else if (exp == 31) v = man ? NAN : INFINITY;
    else v = ldexpf((float)(man | 1024), exp - 25);
    return sign ? -v : v;
}

float qrt_e4m3_lut[256];

static float e4m3_to_f32(uint8_t b) {
    int sign = b >> 7, exp = (b >> 3) & 15, man = b & 7;
    float v;
    if (exp == 15 && man == 7) v = NAN;
    else if (exp == 0) v = ldexpf((float)man, -9); /* m/8 * 2^-6 */
    else v = ldexpf((float)(man | 8), exp - 10);   /* (1 + m/8) * 2^(e-7) */
    return sign ? -v : v;
}

void qrt_dtype_init(void) {
    for (int i = 0; i < 256; i++) qrt_e4m3_lut[i] = e4m3_to_f32((uint8_t)i);
}
