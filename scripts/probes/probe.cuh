// What the diagnostic probes share (each .cu in scripts/probes is a program of its own; this header is not one).
// Define PROBE_NAME, the program's name for its error messages, before including it.
#pragma once
#include <cstdio>
#include <cstdlib>

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
