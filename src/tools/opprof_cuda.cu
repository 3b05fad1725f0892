/* CUDA event timing of backend ops by category, for qwenrt bench's kernel breakdown (opprof.c).
 * Each op is bracketed by an event pair recorded on the default stream, so the time is the GPU's time for
 * that op's kernels, not the host's launch time. Pairs are folded into the totals only when the pool is
 * full or at collect, so timing adds no synchronization inside the window beyond one per POOL ops. */
#include "backend/cuda/cuda_internal.cuh"

extern "C" {
#include "tools/opprof.h"
}

#define POOL 4096

static cudaEvent_t ev_begin[POOL], ev_end[POOL];
static int ev_cat[POOL];
static int used = 0, created = 0;
static double pending_ms[QRT_OPCAT_COUNT];

static void create_pool(void) {
    for (int i = 0; i < POOL; i++) {
        QRT_CUDA_CHECK(cudaEventCreate(&ev_begin[i]));
        QRT_CUDA_CHECK(cudaEventCreate(&ev_end[i]));
    }
    created = 1;
}

static void fold(void) {
    if (!used) return;
    QRT_CUDA_CHECK(cudaEventSynchronize(ev_end[used - 1]));
    for (int i = 0; i < used; i++) {
        float ms = 0;
        QRT_CUDA_CHECK(cudaEventElapsedTime(&ms, ev_begin[i], ev_end[i]));
        pending_ms[ev_cat[i]] += ms;
    }
    used = 0;
}

extern "C" void qrt_opprof_cuda_begin(void) {
    if (!created) create_pool();
    if (used == POOL) fold();
    QRT_CUDA_CHECK(cudaEventRecord(ev_begin[used], 0));
}

extern "C" void qrt_opprof_cuda_end(int cat) {
    QRT_CUDA_CHECK(cudaEventRecord(ev_end[used], 0));
    ev_cat[used++] = cat;
}

extern "C" void qrt_opprof_cuda_collect(double *ms) {
    fold();
    for (int c = 0; c < QRT_OPCAT_COUNT; c++) {
        ms[c] += pending_ms[c];
        pending_ms[c] = 0;
    }
}
