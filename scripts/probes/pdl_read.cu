// Does a plain streaming read reach more of the read bandwidth per launch when its loads go out before
// griddepcontrol.wait, so that the next launch streams while this one's tail still runs? And which way of streaming
// into shared memory with one block per SM (the GEMV kernels' shape) keeps up with the read bandwidth: per-warp
// cp.async rings of 4608-byte slice blocks (mma_cl's) or one bulk-copy (TMA) ring per block, fed by one thread?
// The launches are timed as tilebench times the GEMMs: back to back in one CUDA graph with programmatic dependent
// launch, rotating over copies that together are more than 4x the L2. Diagnostic only (not a test; scripts/test.sh
// compiles it). On a GPU:
//   nvcc -std=c++17 -O3 -arch=sm_90a -o pdl_read scripts/probes/pdl_read.cu && ./pdl_read
// Percentages are of this program's own 2 GiB streaming read (as membw measures it). Results: docs/benchmarks.md,
// sessions 10 and 11.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define PROBE_NAME "pdl_read"
#include "probe.cuh"

#define SLICE_BYTES 4608 // one NVFP4 slice block: 16 rows x 512 codes and their scales
#define SLICE_U4 (SLICE_BYTES / 16)

__device__ __forceinline__ uint4 ld_stream(const uint4 *p) {
    uint4 r;
    asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
__device__ __forceinline__ void pdl_wait_release(void) {
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
// What a GEMV block does after the wait before its first mma: read x (another kernel's output, in L2), xb bytes,
// every load in flight at once (as fp4_prep_block issues them: one round trip).
__device__ __forceinline__ unsigned read_x(const uint4 *x, int xb) {
    constexpr int M = 24; // enough for 70 KB over 256 threads
    uint4 v[M];
#pragma unroll
    for (int j = 0; j < M; j++) {
        const int i = threadIdx.x + j * blockDim.x;
        v[j] = i < xb / 16 ? __ldcg(x + i) : uint4{};
    }
    unsigned acc = 0;
#pragma unroll
    for (int j = 0; j < M; j++) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
    return acc;
}

// Block b reads uint4s [b·per, (b+1)·per) of p, U loads in flight per thread. EARLY: the loads before the wait.
template <bool EARLY, int U>
__global__ void read_kernel(const uint4 *p /* [n] */, size_t n, size_t per, unsigned *sink) {
    if (!EARLY) pdl_wait_release();
    const size_t b0 = blockIdx.x * per, b1 = b0 + per < n ? b0 + per : n;
    unsigned acc = 0;
    for (size_t i = b0 + threadIdx.x; i < b1; i += (size_t)blockDim.x * U) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = i + u * blockDim.x < b1 ? ld_stream(p + i + u * blockDim.x) : uint4{};
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (EARLY) pdl_wait_release();
    if (acc == 0x12345678u) sink[0] = acc; // keeps the loads
}

// mma_cl's memory side: every warp streams an equal run of slice blocks through its own ring of D slots, one
// cp.async group per slot; a slot is read back (each lane its 9 uint4) and refilled with the unit D ahead. EARLY:
// slot 0 before the wait (as mma_cl does), the rest after x's loads.
template <bool EARLY, int D>
__global__ void cp_ring_kernel(const uint4 *p, int units, const uint4 *x, int xb, unsigned *sink) {
    extern __shared__ uint4 smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wpb = blockDim.x >> 5;
    const int64_t gw = (int64_t)blockIdx.x * wpb + warp, warps = (int64_t)gridDim.x * wpb;
    const int u0 = (int)(gw * units / warps), u1 = (int)((gw + 1) * units / warps);
    uint4 *ring = smem + (size_t)warp * D * SLICE_U4;
    const uint4 *next = p + (size_t)u0 * SLICE_U4 + lane;
    auto copy = [&](int j) {
        if (u0 + j < u1)
            for (int k = 0; k < 9; k++) cp_async16(ring + (j % D) * SLICE_U4 + lane + 32 * k, next + 32 * k);
        next += SLICE_U4;
        asm volatile("cp.async.commit_group;\n" ::);
    };
    if (EARLY) copy(0);
    pdl_wait_release();
    unsigned acc = read_x(x, xb);
    for (int j = EARLY ? 1 : 0; j < D; j++) copy(j);
    for (int u = u0, k = 0; u < u1; u++, k = k == D - 1 ? 0 : k + 1) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(D - 1));
        const uint4 *slot = ring + k * SLICE_U4 + lane;
        for (int j = 0; j < 9; j++) acc ^= slot[32 * j].x ^ slot[32 * j].w;
        copy(u - u0 + D);
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
    if (acc == 0x12345678u) sink[0] = acc;
}

// mbarriers and bulk copies (sm_90)
__device__ __forceinline__ unsigned smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint64_t *b, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(b)), "r"(count));
}
__device__ __forceinline__ void mbar_expect(uint64_t *b, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *b, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(smem_addr(b)), "r"(parity)
                     : "memory");
}
__device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned bytes, uint64_t *full) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(smem_addr(full))
                 : "memory");
}
// One ring of NS stages of SB bytes per block, filled by bulk copies that one thread (warp 0, lane 0) issues; warps
// 1.. read each stage (a share each) and release it. The block's chunks: an equal run of the SB-byte chunks. EARLY:
// every stage's first fill before the wait.
template <bool EARLY>
__global__ void tma_ring_kernel(const uint8_t *p, int chunks, int NS, int SB, const uint4 *x, int xb, unsigned *sink) {
    extern __shared__ uint4 smem[];
    uint64_t *full = reinterpret_cast<uint64_t *>(smem), *empty = full + NS;
    uint8_t *stages = reinterpret_cast<uint8_t *>(smem) + 1024;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, consumers = (blockDim.x >> 5) - 1;
    const int c0 = (int)((int64_t)blockIdx.x * chunks / gridDim.x), c1 = (int)((int64_t)(blockIdx.x + 1) * chunks / gridDim.x);
    if (threadIdx.x == 0) {
        for (int i = 0; i < NS; i++) mbar_init(full + i, 1), mbar_init(empty + i, consumers);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    unsigned acc = 0;
    if (warp == 0) {
        if (lane == 0) {
            auto fill = [&](int c) {
                const int st = (c - c0) % NS;
                mbar_expect(full + st, SB);
                bulk_copy(stages + (size_t)st * SB, p + (size_t)c * SB, SB, full + st);
            };
            int c = c0;
            if (EARLY)
                for (; c < c1 && c < c0 + NS; c++) fill(c);
            pdl_wait_release();
            for (; c < c1; c++) {
                if (c - c0 >= NS) mbar_wait(empty + (c - c0) % NS, ((c - c0) / NS - 1) & 1);
                fill(c);
            }
        } else pdl_wait_release();
    } else {
        pdl_wait_release();
        acc = read_x(x, xb);
        const int t = threadIdx.x - 32, nt = consumers * 32;
        for (int c = c0; c < c1; c++) {
            const int st = (c - c0) % NS;
            mbar_wait(full + st, ((c - c0) / NS) & 1);
            const uint4 *s = reinterpret_cast<const uint4 *>(stages + (size_t)st * SB);
            for (int i = t; i < SB / 16; i += nt) acc ^= s[i].x ^ s[i].w;
            __syncwarp();
            if (lane == 0) mbar_arrive(empty + st);
        }
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

// Median µs per launch of `launches` launches, launch(i) recorded back to back in one graph.
template <typename F> static double time_graph(F launch, int launches) {
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < launches; i++) launch(i, s);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> us;
    for (int r = 0; r < 15; r++) {
        CK(cudaEventRecord(a, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (r >= 3) us.push_back(ms * 1e3f / launches); // the first replays upload the graph and warm up
    }
    std::sort(us.begin(), us.end());
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(s));
    return us[us.size() / 2];
}
// A launch configuration with programmatic dependent launch allowed, in clusters of `cluster` blocks.
struct pdl_launch {
    cudaLaunchAttribute attr[2];
    cudaLaunchConfig_t cfg;
    pdl_launch(int blocks, int threads, size_t smem, cudaStream_t s, int cluster = 1) : attr(), cfg() {
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        attr[1].id = cudaLaunchAttributeClusterDimension;
        attr[1].val.clusterDim.x = (unsigned)cluster, attr[1].val.clusterDim.y = 1, attr[1].val.clusterDim.z = 1;
        cfg.gridDim = blocks, cfg.blockDim = threads, cfg.dynamicSmemBytes = smem, cfg.stream = s;
        cfg.attrs = attr, cfg.numAttrs = cluster > 1 ? 2 : 1;
    }
};

template <bool EARLY>
static double time_reads(const std::vector<uint4 *> &bufs, size_t bytes, int blocks, int threads, int launches,
                         unsigned *sink) {
    const size_t n = bytes / 16, per = (n + blocks - 1) / blocks;
    return time_graph(
        [&](int i, cudaStream_t s) {
            pdl_launch l(blocks, threads, 0, s);
            CK(cudaLaunchKernelEx(&l.cfg, read_kernel<EARLY, 4>, (const uint4 *)bufs[i % bufs.size()], n, per, sink));
        },
        launches);
}

static double pct(size_t bytes, double us, double peak_gbs) { return 100 * bytes / (us * 1e-6) / 1e9 / peak_gbs; }

int main() {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    unsigned *sink;
    CK(cudaMalloc(&sink, 4));
    uint4 *x;
    CK(cudaMalloc(&x, 1 << 20));
    CK(cudaMemset(x, 2, 1 << 20));
    double peak_gbs;
    { // the reference: one 2 GiB buffer, read once per launch
        const size_t bytes = (size_t)2 << 30;
        std::vector<uint4 *> big(1);
        CK(cudaMalloc(&big[0], bytes));
        CK(cudaMemset(big[0], 1, bytes));
        peak_gbs = bytes / (time_reads<false>(big, bytes, 2 * sms, 1024, 3, sink) * 1e-6) / 1e9;
        CK(cudaFree(big[0]));
    }
    printf("read bandwidth: %.1f GB/s (2 GiB streaming read)\n", peak_gbs);
    struct config {
        const char *name;
        int threads;
        size_t chunk_u4; // uint4s per block; 0: one block per SM slot (2 x 1024 or 1 x 384 threads per SM)
        int per_sm;
    } const configs[] = {{"persistent 2 x 1024 per SM", 1024, 0, 2},
                         {"persistent 1 x 384 per SM", 384, 0, 1},
                         {"64 KB per 256-thread block", 256, 4096, 0},
                         {"256 KB per 256-thread block", 256, 16384, 0},
                         {"1 MB per 512-thread block", 512, 65536, 0}};
    struct ring {
        int warps, depth; // cp.async: warps x depth slots of one slice block
    } const rings[] = {{12, 2}, {8, 3}, {16, 3}, {16, 2}, {8, 4}, {12, 3}};
    struct tma {
        int stages, slices; // bulk copies: stages of `slices` slice blocks, 8 consumer warps
    } const tmas[] = {{8, 4}, {4, 10}};
    for (size_t mb : {50, 100}) { // about down_proj's and gate|up's NVFP4 bytes
        const int units = (int)(mb * 1000000 / SLICE_BYTES);
        const size_t bytes = (size_t)units * SLICE_BYTES;
        const int copies = (int)(4 * 64e6 / bytes) + 1;
        std::vector<uint4 *> bufs(copies);
        for (auto &p : bufs) {
            CK(cudaMalloc(&p, bytes));
            CK(cudaMemset(p, 1, bytes));
        }
        for (const config &c : configs) {
            const size_t n = bytes / 16;
            const int blocks = c.chunk_u4 ? (int)((n + c.chunk_u4 - 1) / c.chunk_u4) : c.per_sm * sms;
            const double late = time_reads<false>(bufs, bytes, blocks, c.threads, 24, sink);
            const double early = time_reads<true>(bufs, bytes, blocks, c.threads, 24, sink);
            printf("%3zu MB  %-34s %5d blocks: loads after the wait %7.2f us (%5.1f%%), before %7.2f us (%5.1f%%)\n",
                   mb, c.name, blocks, late, pct(bytes, late, peak_gbs), early, pct(bytes, early, peak_gbs));
        }
        // x: none, a quarter, half and all of down's (17408 f32), or gate|up's (5120 f32)
        const int xbs[4] = {0, mb == 50 ? 17408 : 0, mb == 50 ? 34816 : 0, mb == 50 ? 69632 : 20480};
        for (const ring &r : rings) {
            const size_t smem = (size_t)r.warps * r.depth * SLICE_BYTES;
            for (int early = 0; early < 2; early++)
                for (int xi = 0; xi < 4; xi++) {
                    const int xb = xbs[xi];
                    if (xi > 0 && xb == 0) continue;
                    auto kernel = early ? (r.depth == 2 ? cp_ring_kernel<true, 2> : r.depth == 3 ? cp_ring_kernel<true, 3>
                                                                                                 : cp_ring_kernel<true, 4>)
                                        : (r.depth == 2 ? cp_ring_kernel<false, 2> : r.depth == 3 ? cp_ring_kernel<false, 3>
                                                                                                  : cp_ring_kernel<false, 4>);
                    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
                    const double us = time_graph(
                        [&](int i, cudaStream_t s) {
                            pdl_launch l(sms, r.warps * 32, smem, s);
                            CK(cudaLaunchKernelEx(&l.cfg, kernel, (const uint4 *)bufs[i % bufs.size()], units,
                                                  (const uint4 *)x, xb, sink));
                        },
                        24);
                    printf("%3zu MB  cp.async rings %2d warps x %d slots %s, x %5d B: %7.2f us (%5.1f%%)\n", mb, r.warps,
                           r.depth, early ? "slot 0 before the wait" : "all after the wait   ", xb, us,
                           pct(bytes, us, peak_gbs));
                }
        }
        // The ring of mma_cl8x3 (slot 0 before the wait) as tilebench launches it: in clusters of 2, 8 launches a graph
        for (int xi = 0; xi < 4; xi += 3)
            for (int cluster = 1; cluster <= 2; cluster++)
                for (int launches : {8, 24}) {
                    const size_t smem = (size_t)8 * 3 * SLICE_BYTES;
                    auto kernel = cp_ring_kernel<true, 3>;
                    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
                    const double us = time_graph(
                        [&](int i, cudaStream_t s) {
                            pdl_launch l(sms, 8 * 32, smem, s, cluster);
                            CK(cudaLaunchKernelEx(&l.cfg, kernel, (const uint4 *)bufs[i % bufs.size()], units,
                                                  (const uint4 *)x, xbs[xi], sink));
                        },
                        launches);
                    printf("%3zu MB  cp.async rings  8 warps x 3 slots, slot 0 before, x %5d B, clusters of %d, %2d "
                           "launches a graph: %7.2f us (%5.1f%%)\n",
                           mb, xbs[xi], cluster, launches, us, pct(bytes, us, peak_gbs));
                }
        for (const tma &t : tmas) {
            const int SB = t.slices * SLICE_BYTES, chunks = units / t.slices;
            const size_t smem = 1024 + (size_t)t.stages * SB, tb = (size_t)chunks * SB;
            for (int early = 0; early < 2; early++)
                for (int xi = 0; xi < 4; xi++) {
                    const int xb = xbs[xi];
                    if (xi > 0 && xb == 0) continue;
                    auto kernel = early ? tma_ring_kernel<true> : tma_ring_kernel<false>;
                    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
                    const double us = time_graph(
                        [&](int i, cudaStream_t s) {
                            pdl_launch l(sms, 9 * 32, smem, s);
                            CK(cudaLaunchKernelEx(&l.cfg, kernel, (const uint8_t *)bufs[i % bufs.size()], chunks,
                                                  t.stages, SB, (const uint4 *)x, xb, sink));
                        },
                        24);
                    printf("%3zu MB  bulk-copy ring %2d stages x %5d B %s, x %5d B: %7.2f us (%5.1f%%)\n", mb, t.stages,
                           SB, early ? "all stages before the wait" : "all after the wait        ", xb, us,
                           pct(tb, us, peak_gbs));
                }
        }
        for (auto p : bufs) CK(cudaFree(p));
    }
    CK(cudaFree(x));
    CK(cudaFree(sink));
    return 0;
}
