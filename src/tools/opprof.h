/* Per-category op timing for benchmarks: a copy of a backend's op table whose every op is timed while
 * recording is on. Only `qwenrt bench` swaps it in, for one extra profiled generation; the normal path
 * never sees it. On CUDA each op is bracketed by two CUDA events (kernel time, not host time); on the CPU by
 * the monotonic clock (ops are synchronous there). */
#ifndef QRT_OPPROF_H
#define QRT_OPPROF_H
#include "backend/backend.h"

typedef enum {
    QRT_OPCAT_W4A16 = 0, /* NVFP4 matmuls (W4A16 GEMM/GEMV) */
    QRT_OPCAT_DENSE,     /* BF16/F16/F32 matmuls (dense GEMV) */
    QRT_OPCAT_FP8,       /* FP8 block matmuls */
    QRT_OPCAT_GDN,       /* Gated DeltaNet: recurrence (or the chunked form), gated norm */
    QRT_OPCAT_CONV,      /* the GDN layers' causal conv1d + SiLU */
    QRT_OPCAT_ATTN,      /* attention and RoPE */
    QRT_OPCAT_OTHER,     /* norms, elementwise, embedding, copies, logits download */
    QRT_OPCAT_COUNT
} qrt_opcat;

const char *qrt_opcat_name(int cat);

typedef struct {
    double ms[QRT_OPCAT_COUNT];
    uint64_t calls[QRT_OPCAT_COUNT];
    uint64_t bytes[QRT_OPCAT_COUNT]; /* matmul weight bytes read (qrt_linear_bytes), for effective GB/s */
} qrt_opprof_result;

/* The timed copy of real (one at a time per process: the wrappers share global state). */
const qrt_backend *qrt_opprof_backend(const qrt_backend *real);
/* Clear the totals and start timing. */
void qrt_opprof_start(void);
/* Stop timing and return the totals since qrt_opprof_start. */
void qrt_opprof_stop(qrt_opprof_result *r);

#ifdef QRT_HAVE_CUDA
/* CUDA event timing (opprof_cuda.cu): begin before an op, end(cat) after it; collect waits for the GPU and adds
 * every pair's elapsed time to ms[cat]. Events come from a fixed pool, recycled by collecting when full. */
void qrt_opprof_cuda_begin(void);
void qrt_opprof_cuda_end(int cat);
void qrt_opprof_cuda_collect(double *ms /* [QRT_OPCAT_COUNT] */);
#endif
#endif
