/* The splitmix64 generator: a counter advanced by a fixed odd step, each value passed through a finalizer that
 * makes every output bit depend on every input bit. The finalizer alone is a good 64-bit hash, and counter-based
 * draws (the finalizer of seed + i · step) let any thread make element i of a stream on its own. Every random
 * fill in qwenrt (synthetic weights, sampling, benchmark inputs, the hash map of BPE merges) uses these, so its
 * values are the same bits on the CPU and the GPU. */
#ifndef QRT_MIX64_H
#define QRT_MIX64_H
#include <stdint.h>

#ifdef __CUDACC__
#define QRT_HOST_DEVICE __host__ __device__
#else
#define QRT_HOST_DEVICE
#endif

/* The counter's step: 2^64 / φ, odd, so the counter visits every value once per 2^64 steps. */
#define QRT_MIX64_STEP 0x9E3779B97F4A7C15ull

/* The finalizer: a bijection of 64-bit words. */
static inline QRT_HOST_DEVICE uint64_t qrt_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The next value of the stream whose counter is *state. */
static inline QRT_HOST_DEVICE uint64_t qrt_splitmix64(uint64_t *state) { return qrt_mix64(*state += QRT_MIX64_STEP); }
#endif
