# Diagnostic, not part of the build: stamps %globaltimer at 11 points of each fp4_mma_ck warp (main 731cf06's kernel,
# the hold variants) and prints, at exit, the last launch's percentiles in us after the first warp past the launch
# wait, with each warp's SM and run length. In a scratch worktree of main 731cf06, from its root:
#   python3 docs/results/ck-timeline-session19.py
#   cmake -S . -B build -DQRT_CUDA=ON -DCMAKE_BUILD_TYPE=Release && cmake --build build --target qwenrt_cli
#   QRT_NVFP4_VARIANT=mma_ck12x2eht build/bin/qwenrt tilebench --m 1 --formats nvfp4 --shapes mlp_down \
#       --variants mma_ck12x2eht
# Force the variant: every mma_ck launch writes the stamps, the last one is printed. The stamps slow a launch down.
# QRT_CTL_CSV=FILE also writes every warp of the last launch as a CSV line: slot, the 11 stamps in ns after the first
# warp past the wait (-1: not reached), %smid, run length (session 20).
def rep(p, old, new, cnt=1):
    s = open(p).read(); assert old in s, (p, old); s = s.replace(old, new, cnt); open(p, 'w').write(s)
P = 'src/backend/cuda/matmul.cu'
rep(P, '''#define FP4_CK_PAD 8
''', '''#define FP4_CK_PAD 8
/* timeline diagnostic (docs/results/ck-timeline-session19.py) */
__device__ unsigned long long fp4_ctl[4096][12];
__device__ __forceinline__ unsigned long long fp4_gtime(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#define CTL(i) do { if ((threadIdx.x & 31) == 0) fp4_ctl[blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)][i] = fp4_gtime(); } while (0)
static void fp4_ctl_dump(void) {
    static unsigned long long h[4096][12];
    if (cudaMemcpyFromSymbol(h, fp4_ctl, sizeof h) != cudaSuccess) return;
    const char *names[11] = {"entry", "past the wait", "x loads issued", "slots 1.. issued", "unit 0 held, slot 0 refill",
                             "x prepared (barrier)", "cluster wait", "first unit done", "loop end", "tail done", "exit"};
    unsigned long long last = 0, t0 = ~0ull;
    for (int w = 0; w < 4096; w++) last = h[w][0] > last ? h[w][0] : last;
    int n = 0;
    for (int w = 0; w < 4096; w++) {
        if (!h[w][0] || h[w][0] + 50000 < last) continue; /* another launch's warp */
        if (h[w][1] && h[w][1] < t0) t0 = h[w][1];
        n++;
    }
    if (const char *csv = getenv("QRT_CTL_CSV")) { /* every warp of the last launch: slot, 11 stamps (ns), smid, run */
        FILE *f = fopen(csv, "w");
        for (int w = 0; f && w < 4096; w++)
            if (h[w][0] && h[w][0] + 50000 >= last) {
                fprintf(f, "%d", w);
                for (int i = 0; i < 11; i++) fprintf(f, ",%lld", h[w][i] ? (long long)(h[w][i] - t0) : -1ll);
                fprintf(f, ",%llu,%llu\\n", h[w][11] >> 16, h[w][11] & 0xffff);
            }
        if (f) fclose(f);
    }
    printf("timeline: %d warps of the last launch, us after the first warp past the wait (p10 p50 p90 max)\\n", n);
    for (int i = 0; i < 11; i++) {
        std::vector<double> v;
        for (int w = 0; w < 4096; w++)
            if (h[w][0] && h[w][0] + 50000 >= last && h[w][i]) v.push_back(((double)h[w][i] - (double)t0) / 1000.0);
        if (v.empty()) continue;
        std::sort(v.begin(), v.end());
        const size_t m = v.size() - 1;
        printf("  %-28s %7.2f %7.2f %7.2f %7.2f (%zu)\\n", names[i], v[m / 10], v[m / 2], v[m * 9 / 10], v[m], v.size());
    }
    for (int run = 0; run < 64; run++) { /* loop end by run length */
        std::vector<double> v;
        for (int w = 0; w < 4096; w++)
            if (h[w][0] && h[w][0] + 50000 >= last && h[w][8] && (int)(h[w][11] & 0xffff) == run)
                v.push_back(((double)h[w][8] - (double)t0) / 1000.0);
        if (v.empty()) continue;
        std::sort(v.begin(), v.end());
        const size_t m = v.size() - 1;
        printf("  loop end, runs of %2d units    %7.2f %7.2f %7.2f %7.2f (%zu)\\n", run, v[m / 10], v[m / 2], v[m * 9 / 10],
               v[m], v.size());
    }
}
''')
rep(P, '''#include <algorithm>
''', '''#include <algorithm>
#include <vector>
''')
K = 'fp4_mma_ck(const uint8_t *blocks'
s = open(P).read()
k0 = s.index(K)
def krep(old, new):
    global s
    i = s.index(old, k0); s = s[:i] + new + s[i + len(old):]
krep('''    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, Si = (int)S, g = lane >> 2;
''', '''    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, Si = (int)S, g = lane >> 2;
    CTL(0);
''')
krep('''    copy_next(0); /* slot 0 before the wait, as mma_cl (the weights are written only at load) */
    pdl_start();
''', '''    copy_next(0); /* slot 0 before the wait, as mma_cl (the weights are written only at load) */
    pdl_start();
    CTL(1);
    if ((threadIdx.x & 31) == 0) {
        unsigned smid;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
        fp4_ctl[blockIdx.x * (blockDim.x >> 5) + warp][11] = ((unsigned long long)smid << 16) | (unsigned)(v1 - v0);
    }
''')
krep('''    auto after_x_loads = [&] { /* each warp, once its x loads are in flight */
''', '''    auto after_x_loads = [&] { /* each warp, once its x loads are in flight */
        CTL(2);
''')
krep('''        copy_slots_after_0();
        if (v0 < v1) {''', '''        copy_slots_after_0();
        CTL(3);
        if (v0 < v1) {''')
krep('''            copy_next(fp4_slice_words(cur0)); /* unit v0 + D into slot 0 */
        }
    };''', '''            copy_next(fp4_slice_words(cur0)); /* unit v0 + D into slot 0 */
        }
        CTL(4);
    };''')
krep('''    if (SLOTS == FP4_CK_AFTER_X) copy_slots_after_0();
''', '''    CTL(5);
    if (SLOTS == FP4_CK_AFTER_X) copy_slots_after_0();
''')
krep('''    cluster_wait();
    int lt = v0 / Sb''', '''    cluster_wait();
    CTL(6);
    int lt = v0 / Sb''')
krep('''        put_p(p);
        v++, k = 1 % D;
    }''', '''        put_p(p);
        v++, k = 1 % D;
        CTL(7);
    }''')
krep('''    cp_async_wait<0>();
    if (TAIL && tj >= 0 && Ub > 0) {''', '''    cp_async_wait<0>();
    CTL(8);
    if (TAIL && tj >= 0 && Ub > 0) {''')
krep('''    if (ASYNC) {
        if (r != CL - 1) return;''', '''    CTL(9);
    if (ASYNC) {
        if (r != CL - 1) { CTL(10); return; }''')
krep('''        fp4_store<1, PAIR>(fp4_tile_target(seg, t0 + j), 1, 0, lane & ~3, acc); /* lane & ~3: as token 0's lane */
    }
}''', '''        fp4_store<1, PAIR>(fp4_tile_target(seg, t0 + j), 1, 0, lane & ~3, acc); /* lane & ~3: as token 0's lane */
    }
    CTL(10);
}''')
krep('''    QRT_LAUNCH_CLUSTER(CL, kernel, (unsigned)(clusters * CL), WPB * 32, smem, blocks, seg, x, K, S, clusters);''',
     '''    static bool ctl = false;
    if (!ctl) ctl = true, atexit(fp4_ctl_dump);
    QRT_LAUNCH_CLUSTER(CL, kernel, (unsigned)(clusters * CL), WPB * 32, smem, blocks, seg, x, K, S, clusters);''')
open(P, 'w').write(s)
print('patched')
