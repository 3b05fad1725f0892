/* The greedy choice over a row of logits, and the check that a row holds only numbers. */
#ifndef QRT_ARGMAX_H
#define QRT_ARGMAX_H
#include <stddef.h>
#include <stdint.h>

int32_t qrt_argmax(const float *x, int32_t n); /* first index of the largest value */
int qrt_all_finite(const float *x, size_t n);  /* 1 when no value is NaN or ±Inf */
#endif
