// Why does mma_ck's x preparation take 1.7 us after the launch wait on down_proj (docs/benchmarks.md, session 16)?
// Every block reads its half of the same 70 KB x (35 KB, one L2 round trip with all loads in flight) at the same
// moment, so each 128-byte line of x is asked for by 66 SMs at once. This probe times that read alone, in SM cycles
// per block (clock64 from the first load to the block barrier after the last):
//   alone, copies 1   every block reads its half of one x (as mma_ck does; x made hot in the L2 by the launch before)
//   alone, copies R   the blocks of pair c read copy c % R of x (R = 2, 8, blocks / 2): the same bytes per block, R
//                     times fewer readers of each line
//   + stream          the same, with 55 KB of weight copies per block (cp.async, as mma_ck12x2's ring slot 1) issued
//                     right behind x's loads, from memory that is not in the L2
// If copies 1 is much slower than copies 66, the L2's serving of hot lines is the limit (a producer could store h in
// copies); if all are alike, it is the round trip's latency. Diagnostic only (not a test; scripts/test.sh compiles
// it). Run in session 17 (H200, docs/results/x-read-h200-session17.log; cycles p50 at 1980 MHz): copies 1 1100
// (0.56 us), 2 1109, 8 1353, 66 1322; with the weight copies behind, 1089 / 1089 / 1431 / 1458. One hot x is no slower
// than 66 copies, and the read alone is a third of the 1.7 us: neither the L2's serving of hot lines nor one round
// trip is what mma_ck's x preparation waits on. On a GPU:
//   nvcc -std=c++17 -O3 -arch=sm_90a -o x_read scripts/probes/x_read.cu && ./x_read
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define PROBE_NAME "x_read"
#include "probe.cuh"

#define K_ELEMS 17408  // down_proj's K: x is 70 KB of f32
#define SLICE 512      // elements per slice; a block reads 17 slices (its half of K)
#define THREADS 384    // mma_ck12x2's 12 warps
#define STREAM_U4 3456 // 55 KB of weight copies per block (12 warps x 4608 bytes)

// Block b reads half (b % 2) of copy (b / 2) % copies of x: warp w its slices w and w + 12 of the half, each lane 4
// float4 of a slice, every load in flight at once (fp4_prep_block's one round trip). cycles[b]: first load to barrier.
template <bool STREAM>
__global__ void __launch_bounds__(THREADS) x_read_kernel(const float4 *x /* [copies][K / 4] */, int copies,
                                                         const uint4 *weights /* [blocks][STREAM_U4] */,
                                                         long long *cycles, unsigned *sink) {
    extern __shared__ uint4 smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, half = blockIdx.x % 2;
    const float4 *mine = x + (size_t)((blockIdx.x / 2) % copies) * (K_ELEMS / 4) + half * (K_ELEMS / 8);
    const int slices = K_ELEMS / 2 / SLICE; // 17
    __syncthreads();
    const long long t0 = clock64();
    float4 v[2][4];
#pragma unroll
    for (int b = 0; b < 2; b++) {
        const int s = warp + 12 * b;
#pragma unroll
        for (int q = 0; q < 4; q++) v[b][q] = s < slices ? __ldcg(mine + s * (SLICE / 4) + q * 32 + lane) : float4{};
    }
    if (STREAM) probe_copy_issue(smem, weights + (size_t)blockIdx.x * STREAM_U4, STREAM_U4);
    float acc = 0.0f;
#pragma unroll
    for (int b = 0; b < 2; b++)
#pragma unroll
        for (int q = 0; q < 4; q++) acc += v[b][q].x + v[b][q].y + v[b][q].z + v[b][q].w;
    __syncthreads();
    const long long t1 = clock64();
    if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
    if (STREAM) probe_copy_wait();
    if (acc == 1234.5f) sink[0] = 1; // keeps the loads
}

// Reads every copy of x once, so that the timed launch finds x in the L2 (as down_proj finds h, just written).
__global__ void warm_kernel(const float4 *x, size_t n, unsigned *sink) {
    float acc = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        acc += __ldcg(x + i).x;
    if (acc == 1234.5f) sink[0] = 1;
}

int main() {
    int sms = 0, khz = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    const int blocks = sms - sms % 2, max_copies = blocks / 2;
    float4 *x;
    uint4 *weights;
    long long *cycles;
    unsigned *sink;
    const size_t wbytes = (size_t)blocks * STREAM_U4 * 16 * 64; // 64 rounds of fresh weights, far over the L2
    CK(cudaMalloc(&x, (size_t)max_copies * K_ELEMS * sizeof(float)));
    CK(cudaMemset(x, 0, (size_t)max_copies * K_ELEMS * sizeof(float)));
    CK(cudaMalloc(&weights, wbytes));
    CK(cudaMemset(weights, 0, wbytes));
    CK(cudaMalloc(&cycles, blocks * sizeof(long long)));
    CK(cudaMalloc(&sink, sizeof(unsigned)));
    const size_t smem = STREAM_U4 * 16;
    CK(cudaFuncSetAttribute(x_read_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    printf("x_read: %d blocks of %d threads, each reading 35 KB of a 70 KB x; SM clock %.0f MHz (nominal)\n", blocks,
           THREADS, khz / 1e3);
    printf("%-10s %6s  cycles p10 / p50 / p90 / max (median over 20 launches)   us at p50\n", "setting", "copies");
    const int settings[] = {1, 2, 8, max_copies};
    for (int stream = 0; stream < 2; stream++)
        for (int copies : settings) {
            std::vector<std::vector<long long>> runs;
            for (int rep = 0; rep < 21; rep++) {
                warm_kernel<<<sms, 256>>>(x, (size_t)copies * K_ELEMS / 4, sink);
                const uint4 *w = weights + (size_t)(rep % 64) * blocks * STREAM_U4;
                if (stream) x_read_kernel<true><<<blocks, THREADS, smem>>>(x, copies, w, cycles, sink);
                else x_read_kernel<false><<<blocks, THREADS, 0>>>(x, copies, w, cycles, sink);
                CK(cudaGetLastError());
                probe_collect(cycles, blocks, rep, runs);
            }
            long long q[4];
            probe_quantiles(runs, blocks, q);
            printf("%-10s %6d  %6lld / %6lld / %6lld / %6lld   %.2f\n", stream ? "+ stream" : "alone", copies, q[0],
                   q[1], q[2], q[3], q[1] / (khz / 1e3));
        }
    return 0;
}
