// What the diagnostic probes share (each .cu in scripts/probes is a program of its own; this header is not one).
// Define PROBE_NAME, the program's name for its error messages, before including it.
#pragma once
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

// Exits with the file, line and CUDA's message when a CUDA call fails.
#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, PROBE_NAME ": %s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                   \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

// One 16-byte asynchronous copy from global to shared memory, through the L2 only (as the GEMV rings copy).
__device__ __forceinline__ void cp_async16(uint4 *smem, const uint4 *gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((unsigned)__cvta_generic_to_shared(smem)),
                 "l"(gmem));
}
// This thread's share of n 16-byte units from gmem into smem (the block's threads split them), as one cp.async group.
__device__ __forceinline__ void probe_copy_issue(uint4 *smem, const uint4 *gmem, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) cp_async16(smem + i, gmem + i);
    asm volatile("cp.async.commit_group;\n" ::);
}
// Returns once this thread's copies have landed.
__device__ __forceinline__ void probe_copy_wait(void) { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// One launch's per-block cycle counts, copied back and sorted; appended to runs unless it is the warm-up (rep 0).
static inline void probe_collect(const long long *cycles_dev, int blocks, int rep,
                                 std::vector<std::vector<long long>> &runs) {
    std::vector<long long> c(blocks);
    CK(cudaMemcpy(c.data(), cycles_dev, blocks * sizeof(long long), cudaMemcpyDeviceToHost));
    std::sort(c.begin(), c.end());
    if (rep) runs.push_back(c);
}
// The median over launches of each launch's p10, p50, p90 and max over its `blocks` blocks.
static inline void probe_quantiles(const std::vector<std::vector<long long>> &runs, int blocks, long long (&q)[4]) {
    const size_t at[4] = {(size_t)blocks / 10, (size_t)blocks / 2, (size_t)blocks * 9 / 10, (size_t)blocks - 1};
    for (int i = 0; i < 4; i++) {
        std::vector<long long> m;
        for (auto &r : runs) m.push_back(r[at[i]]);
        std::sort(m.begin(), m.end());
        q[i] = m[m.size() / 2];
    }
}
