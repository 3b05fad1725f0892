// Does a plain streaming read reach more of the read bandwidth per launch when its loads go out before
// griddepcontrol.wait, so that the next launch streams while this one's tail still runs? The launches are timed as
// tilebench times the GEMMs: back to back in one CUDA graph with programmatic dependent launch, rotating over copies
// that together are more than 4x the L2. Diagnostic only (not a test; scripts/test.sh compiles it). On a GPU:
//   nvcc -std=c++17 -O3 -arch=sm_90a -o pdl_read scripts/probes/pdl_read.cu && ./pdl_read
// Percentages are of this program's own 2 GiB streaming read (as membw measures it). Results: docs/benchmarks.md,
// session 10.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "pdl_read: %s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                      \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

__device__ __forceinline__ uint4 ld_stream(const uint4 *p) {
    uint4 r;
    asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
__device__ __forceinline__ void pdl_wait_release(void) {
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
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

// Median µs per launch of `launches` launches recorded back to back in one graph over the buffers.
template <bool EARLY>
static double time_reads(const std::vector<uint4 *> &bufs, size_t bytes, int blocks, int threads, int launches) {
    const size_t n = bytes / 16, per = (n + blocks - 1) / blocks;
    unsigned *sink;
    CK(cudaMalloc(&sink, 4));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaLaunchAttribute pdl;
    pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = blocks, cfg.blockDim = threads, cfg.stream = s, cfg.attrs = &pdl, cfg.numAttrs = 1;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < launches; i++)
        CK(cudaLaunchKernelEx(&cfg, read_kernel<EARLY, 4>, (const uint4 *)bufs[i % bufs.size()], n, per, sink));
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
    CK(cudaFree(sink));
    return us[us.size() / 2];
}

int main() {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    double peak_gbs;
    { // the reference: one 2 GiB buffer, read once per launch
        const size_t bytes = (size_t)2 << 30;
        std::vector<uint4 *> big(1);
        CK(cudaMalloc(&big[0], bytes));
        CK(cudaMemset(big[0], 1, bytes));
        peak_gbs = bytes / (time_reads<false>(big, bytes, 2 * sms, 1024, 3) * 1e-6) / 1e9;
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
    for (size_t mb : {50, 100}) { // about down_proj's and gate|up's NVFP4 bytes
        const size_t bytes = mb * 1000000 / 4608 * 4608;
        const int copies = (int)(4 * 64e6 / bytes) + 1;
        std::vector<uint4 *> bufs(copies);
        for (auto &p : bufs) {
            CK(cudaMalloc(&p, bytes));
            CK(cudaMemset(p, 1, bytes));
        }
        for (const config &c : configs) {
            const size_t n = bytes / 16;
            const int blocks = c.chunk_u4 ? (int)((n + c.chunk_u4 - 1) / c.chunk_u4) : c.per_sm * sms;
            const double late = time_reads<false>(bufs, bytes, blocks, c.threads, 24);
            const double early = time_reads<true>(bufs, bytes, blocks, c.threads, 24);
            printf("%3zu MB  %-28s %5d blocks: loads after the wait %7.2f us (%5.1f%%), before %7.2f us (%5.1f%%)\n", mb,
                   c.name, blocks, late, 100 * bytes / (late * 1e-6) / 1e9 / peak_gbs, early,
                   100 * bytes / (early * 1e-6) / 1e9 / peak_gbs);
        }
        for (auto p : bufs) CK(cudaFree(p));
    }
    return 0;
}
