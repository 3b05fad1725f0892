// Written for a question session 17's timeline seemed to raise (docs/benchmarks.md, session 17, item 5): why would
// mma_ck12x2's ring slot 0 land ~3.3 us after the launch wait on down_proj, asked for ~1.3 us before it, when the
// DRAM then serves only the 132 blocks' slot 0 (7.3 MB, 1.6 us of reads)? (Session 18's timeline showed slot 0 has
// in fact landed before the loop starts; that reading was wrong.) One candidate: every launch's first copies touch
// weight pages whose address translations are not cached (a token streams ~15 GB of weights; tilebench rotates
// copies over more than 4x the L2), and 132 SMs' page walks at once are slow. This probe times that first copy
// alone, in SM cycles per block (clock64 from the first cp.async to its arrival), all blocks at once on an otherwise
// idle GPU, from 55 KB per block (12 warps x 4608 bytes, as slot 0 of every mma_ck12x2 warp) of a region that is,
// before the timed launch:
//   l2 hot       read whole (in the L2, its translations cached)
//   tlb warm     touched once per 64 KB (translations cached, data in the DRAM)
//   tlb cold     not touched (translations evicted by a walk over 32 GB, one line per 2 MB page)
// each for all blocks and for one block alone. If tlb cold is much slower than tlb warm, the launch ramp pays page
// walks, and a kernel could touch its weights' pages earlier (e.g. the kernel before it, or a graph node ahead).
// Run in session 18 (H200, cycles p50 at 1980 MHz; docs/benchmarks.md, session 18): 132 blocks l2 hot 2166 (1.09 us),
// tlb warm 4091 (2.07 us), tlb cold 4075 (2.06 us); one block alone 1101-1243, 1569-1573, 1547-1561. Cold translations
// cost nothing measurable: page walks are not what the launch ramp waits on.
// Diagnostic only (not a test; scripts/test.sh compiles it). On a GPU:
//   nvcc -std=c++17 -O3 -arch=sm_90a -o tlb_read scripts/probes/tlb_read.cu && ./tlb_read
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define PROBE_NAME "tlb_read"
#include "probe.cuh"

#define THREADS 384                 // mma_ck12x2's 12 warps
#define COPY_U4 3456                // 55 KB per block (12 warps x 4608 bytes)
#define REGION_STRIDE (256ull << 20) // regions of successive launches this far apart
#define REGIONS 48
#define THRASH_BYTES (32ull << 30)  // walked once per 2 MB page to evict cached translations
#define PAGE (2ull << 20)

// Block b copies its 55 KB of the region into shared memory; cycles[b] from the first copy to its arrival.
__global__ void __launch_bounds__(THREADS) copy_kernel(const uint4 *region /* [blocks][COPY_U4] */, long long *cycles) {
    extern __shared__ uint4 smem[];
    __syncthreads();
    const long long t0 = clock64();
    probe_copy_issue(smem, region + (size_t)blockIdx.x * COPY_U4, COPY_U4);
    probe_copy_wait();
    __syncthreads();
    const long long t1 = clock64();
    if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

// One 16-byte load every `stride` bytes of [p, p + bytes): fills the translation caches (and those lines of the L2).
__global__ void touch_kernel(const uint8_t *p, size_t bytes, size_t stride, unsigned *sink) {
    unsigned acc = 0;
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * stride; i < bytes;
         i += (size_t)gridDim.x * blockDim.x * stride)
        acc += __ldcg(reinterpret_cast<const uint4 *>(p + i)).x;
    if (acc == 0x12345678u) sink[0] = acc;
}

int main() {
    int sms = 0, khz = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    const int blocks = sms;
    uint8_t *weights, *thrash;
    long long *cycles;
    unsigned *sink;
    const size_t wbytes = REGIONS * REGION_STRIDE;
    CK(cudaMalloc(&weights, wbytes));
    CK(cudaMemset(weights, 1, wbytes));
    CK(cudaMalloc(&thrash, THRASH_BYTES));
    CK(cudaMemset(thrash, 1, THRASH_BYTES));
    CK(cudaMalloc(&cycles, blocks * sizeof(long long)));
    CK(cudaMalloc(&sink, sizeof(unsigned)));
    const size_t smem = COPY_U4 * 16;
    CK(cudaFuncSetAttribute(copy_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    printf("tlb_read: %d blocks of %d threads, each copying 55 KB; SM clock %.0f MHz (nominal)\n", blocks, THREADS,
           khz / 1e3);
    printf("%-9s %6s  cycles p10 / p50 / p90 / max (median over %d launches)   us at p50\n", "setting", "blocks",
           REGIONS - 1);
    const char *names[3] = {"l2 hot", "tlb warm", "tlb cold"};
    const int counts[2] = {blocks, 1};
    for (int mode = 0; mode < 3; mode++)
        for (int nb : counts) {
            std::vector<std::vector<long long>> runs;
            for (int rep = 0; rep < REGIONS; rep++) {
                const uint8_t *region = weights + (size_t)rep * REGION_STRIDE;
                const size_t rbytes = (size_t)nb * COPY_U4 * 16;
                touch_kernel<<<sms * 4, 256>>>(thrash, THRASH_BYTES, PAGE, sink);
                if (mode == 0) touch_kernel<<<sms * 4, 256>>>(region, rbytes, 16, sink);
                if (mode == 1) touch_kernel<<<sms * 4, 256>>>(region, rbytes, 65536, sink);
                copy_kernel<<<nb, THREADS, smem>>>(reinterpret_cast<const uint4 *>(region), cycles);
                CK(cudaGetLastError());
                probe_collect(cycles, nb, rep, runs);
            }
            long long q[4];
            probe_quantiles(runs, nb, q);
            printf("%-9s %6d  %6lld / %6lld / %6lld / %6lld   %.2f\n", names[mode], nb, q[0], q[1], q[2], q[3],
                   q[1] / (khz / 1e3));
        }
    return 0;
}
