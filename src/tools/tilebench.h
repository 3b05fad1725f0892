/* The GPU side of qwenrt tilebench (tilebench_cuda.c, built only with -DQRT_CUDA=ON): timing one launch with
 * CUDA events and the device's L2 size. Every CUDA call is checked; a failure returns non-zero after a message. */
#ifndef QRT_TILEBENCH_H
#define QRT_TILEBENCH_H
#include <stddef.h>

/* Run launch(ctx) between two events on the default stream, wait, and write its time to *ms. */
int qrt_tilebench_cuda_time(void (*launch)(void *ctx), void *ctx, double *ms);
/* L2 bytes of device 0 (0 when the query fails). */
size_t qrt_tilebench_cuda_l2(void);
#endif
