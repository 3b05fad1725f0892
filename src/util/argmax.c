#include "util/argmax.h"

#include <math.h>

int32_t qrt_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int qrt_all_finite(const float *x, size_t n) {
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= isfinite(x[i]) != 0; /* no early exit: the loop vectorizes */
    return ok;
}
