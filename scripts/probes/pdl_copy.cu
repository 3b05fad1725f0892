// How long does a copy asked for before griddepcontrol.wait take to land? Session 17's timeline was read as
// mma_ck12x2's ring slot 0 (55 KB per block, 7.3 MB over 132 blocks) landing ~3.3 us after the launch wait, asked for
// ~1.3 us before it (docs/benchmarks.md, session 17, item 5; corrected in session 18), while the same copies on an
// idle GPU take 2.1 us (tlb_read.cu). This probe runs a streaming
// kernel (`prev`, every block reading its share of 50 MB, equal shares or with half of the blocks given 1.5x) and then
// `next`, which copies 55 KB per block into shared memory: issued at its entry, before griddepcontrol.wait, and
// waited for after it. Stamps (%globaltimer, ns): next's entry, its wait's return, the copy's arrival, and prev's block
// exits. Launched with programmatic dependent launch (next's blocks start as prev's leave) or plainly (next starts once
// prev is done: its copy then runs on an idle GPU). Run in session 18 (H200; us after prev's last block exit, p50):
// plain, next enters at 1.79 and its copy lands at 3.84 (2.05 after entry); PDL, next's blocks enter at -2.05 (as
// prev's blocks leave), the wait returns at 0.77 and the copy has landed by then (landed - wait 0.00 at p90); uneven
// prev, next enters at -6.14 and likewise. So a copy asked for before the wait is not held back by it: once a block
// is on its SM a microsecond or two before the wait returns, its first 55 KB are there. Diagnostic only (not a test;
// scripts/test.sh compiles it). On a GPU:
//   nvcc -std=c++17 -O3 -arch=sm_90a -o pdl_copy scripts/probes/pdl_copy.cu && ./pdl_copy
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define PROBE_NAME "pdl_copy"
#include "probe.cuh"

#define THREADS 384    // mma_ck12x2's 12 warps
#define COPY_U4 3456   // 55 KB per block (12 warps x 4608 bytes)
#define PREV_BYTES (50ull << 20)
#define ROUNDS 40
#define PREV_SMEM (180 << 10) // prev holds its SM as mma_ck does: next's block (55 KB) starts only once it leaves

__device__ __forceinline__ unsigned long long gtime(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Block b reads its share of src (uneven: odd blocks read 1.5x the others), then stamps its exit. Its shared memory is
// unused: it only keeps next's block off the SM.
__global__ void __launch_bounds__(THREADS) prev_kernel(const uint4 *src, size_t n_u4, int uneven,
                                                      unsigned long long *exit_ns, unsigned *sink) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    // shares in halves: 2 per block, 3 for odd blocks when uneven; the blocks below b hold b / 2 odd ones
    auto halves_below = [&](size_t b) { return 2 * b + (uneven ? b / 2 : 0); };
    const size_t total = halves_below(gridDim.x);
    const size_t lo = n_u4 * halves_below(blockIdx.x) / total, hi = n_u4 * halves_below(blockIdx.x + 1) / total;
    unsigned acc = 0;
    for (size_t i = lo + threadIdx.x; i < hi; i += 4 * THREADS) {
        uint4 v[4];
#pragma unroll
        for (int j = 0; j < 4; j++) v[j] = i + j * THREADS < hi ? __ldcs(src + i + j * THREADS) : uint4{};
#pragma unroll
        for (int j = 0; j < 4; j++) acc ^= v[j].x;
    }
    if (acc == 0x12345678u) sink[0] = acc;
    __syncthreads();
    if (threadIdx.x == 0) exit_ns[blockIdx.x] = gtime();
}

// Each block copies its 55 KB: asked for at entry, before the wait; stamps[b] = {entry, wait returned, landed}.
__global__ void __launch_bounds__(THREADS) next_kernel(const uint4 *region, unsigned long long *stamps) {
    extern __shared__ uint4 smem[];
    const unsigned long long t0 = gtime();
    probe_copy_issue(smem, region + (size_t)blockIdx.x * COPY_U4, COPY_U4);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const unsigned long long t1 = gtime();
    probe_copy_wait();
    __syncthreads();
    const unsigned long long t2 = gtime();
    if (threadIdx.x == 0) {
        stamps[blockIdx.x * 3 + 0] = t0;
        stamps[blockIdx.x * 3 + 1] = t1;
        stamps[blockIdx.x * 3 + 2] = t2;
    }
}

static double pct(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v[(size_t)(p * (v.size() - 1))];
}

int main() {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int blocks = sms;
    const size_t region_bytes = (size_t)blocks * COPY_U4 * 16;
    uint8_t *prev_src, *regions;
    unsigned long long *exit_ns, *stamps;
    unsigned *sink;
    CK(cudaMalloc(&prev_src, PREV_BYTES * ROUNDS));
    CK(cudaMemset(prev_src, 1, PREV_BYTES * ROUNDS));
    CK(cudaMalloc(&regions, region_bytes * ROUNDS));
    CK(cudaMemset(regions, 1, region_bytes * ROUNDS));
    CK(cudaMalloc(&exit_ns, blocks * sizeof(unsigned long long)));
    CK(cudaMalloc(&stamps, blocks * 3 * sizeof(unsigned long long)));
    CK(cudaMalloc(&sink, sizeof(unsigned)));
    const size_t smem = COPY_U4 * 16;
    CK(cudaFuncSetAttribute(next_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CK(cudaFuncSetAttribute(prev_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, PREV_SMEM));
    printf("pdl_copy: prev reads 50 MB over %d blocks, then next copies 55 KB per block (asked for before its wait)\n",
           blocks);
    printf("us, p10 / p50 / p90 over blocks and %d rounds; times after prev's last block exit (0)\n", ROUNDS - 1);
    for (int uneven = 0; uneven < 2; uneven++)
        for (int pdl = 0; pdl < 2; pdl++) {
            std::vector<double> entry, wait, land, land_after_wait, land_after_entry, prev_exit;
            for (int r = 0; r < ROUNDS; r++) {
                prev_kernel<<<blocks, THREADS, PREV_SMEM>>>(
                    reinterpret_cast<const uint4 *>(prev_src + (size_t)r * PREV_BYTES), PREV_BYTES / 16, uneven,
                    exit_ns, sink);
                CK(cudaGetLastError());
                cudaLaunchConfig_t cfg = {};
                cfg.gridDim = dim3(blocks), cfg.blockDim = dim3(THREADS), cfg.dynamicSmemBytes = smem;
                cudaLaunchAttribute attr;
                attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
                attr.val.programmaticStreamSerializationAllowed = pdl;
                cfg.attrs = &attr, cfg.numAttrs = 1;
                CK(cudaLaunchKernelEx(&cfg, next_kernel,
                                      reinterpret_cast<const uint4 *>(regions + (size_t)r * region_bytes), stamps));
                std::vector<unsigned long long> ex(blocks), st(blocks * 3);
                CK(cudaMemcpy(ex.data(), exit_ns, blocks * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(st.data(), stamps, blocks * 3 * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
                if (!r) continue; // warm-up
                const unsigned long long last = *std::max_element(ex.begin(), ex.end());
                for (int b = 0; b < blocks; b++) {
                    prev_exit.push_back(((double)ex[b] - (double)last) * 1e-3);
                    entry.push_back(((double)st[3 * b] - (double)last) * 1e-3);
                    wait.push_back(((double)st[3 * b + 1] - (double)last) * 1e-3);
                    land.push_back(((double)st[3 * b + 2] - (double)last) * 1e-3);
                    land_after_wait.push_back(((double)st[3 * b + 2] - (double)st[3 * b + 1]) * 1e-3);
                    land_after_entry.push_back(((double)st[3 * b + 2] - (double)st[3 * b]) * 1e-3);
                }
            }
            printf("%s, %s launch\n", uneven ? "uneven prev (1.5x on odd blocks)" : "even prev", pdl ? "PDL" : "plain");
            const char *names[6] = {"prev exits", "next entry", "wait back", "copy landed", "landed - wait",
                                    "landed - entry"};
            std::vector<double> *cols[6] = {&prev_exit, &entry, &wait, &land, &land_after_wait, &land_after_entry};
            for (int i = 0; i < 6; i++)
                printf("  %-15s %7.2f / %7.2f / %7.2f\n", names[i], pct(*cols[i], 0.1), pct(*cols[i], 0.5),
                       pct(*cols[i], 0.9));
        }
    return 0;
}
