# Diagnostic, not part of the build: stamps %globaltimer at 12 points of each mma_ck warp (and inside fp4_prep_block)
# and prints, at exit, the last launch's percentiles after the first warp past the launch wait. Applied to main f6d49ae
# in session 17 (docs/benchmarks.md, session 17, item 5):
#   python3 docs/results/ck-xprep-timeline-session17.py   (in a scratch worktree, from its root; then build qwenrt)
#   QRT_NVFP4_VARIANT=11 qwenrt tilebench --m 1 --formats nvfp4 --shapes mlp_down --variants mma_ck12x2
# fp4_prep_block's stamps are written by every kernel that calls it: force one variant so that only mma_ck runs.
def rep(p,old,new,cnt=1):
    s=open(p).read(); assert old in s,(p,old); s=s.replace(old,new,cnt); open(p,'w').write(s)
P='src/backend/cuda/matmul.cu'
rep(P,'''#include <algorithm>
''','''#include <algorithm>
#include <vector>
''')
# timeline array + macro before fp4_prep_block
rep(P,'''#define FP4_PREP_BATCH 3   /* B of the 4-warp kernels */''','''/* timeline diagnostic: each warp's %globaltimer at 12 points of the last mma_ck launch (QRT_NVFP4_VARIANT forced) */
__device__ unsigned long long fp4_xtl[4096][12];
__device__ __forceinline__ unsigned long long fp4_gtime(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#define XTL(i) do { if ((threadIdx.x & 31) == 0) fp4_xtl[blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)][i] = fp4_gtime(); } while (0)
static void fp4_xtl_dump(void) {
    static unsigned long long h[4096][12];
    if (cudaMemcpyFromSymbol(h, fp4_xtl, sizeof h) != cudaSuccess) return;
    const char *names[12] = {"entry", "after wait", "loads issued", "after_loads", "1st convert", "prep stored",
                             "prep barrier", "late copies", "cl wait", "first unit", "loop end", "exit"};
    unsigned long long t0 = ~0ull, last = 0;
    for (int w = 0; w < 4096; w++) last = h[w][0] > last ? h[w][0] : last;
    for (int w = 0; w < 4096; w++) if (h[w][0] + 20000 < last) h[w][0] = 0;
    int n = 0;
    for (int w = 0; w < 4096; w++) if (h[w][0]) n++, t0 = h[w][0] < t0 ? h[w][0] : t0;
    unsigned long long wait0 = ~0ull;
    for (int w = 0; w < 4096; w++) if (h[w][0] && h[w][1] < wait0) wait0 = h[w][1];
    fprintf(stderr, "timeline mma_ck: %d warps (us after the first warp past the wait: min p10 p50 p90 max)\\n", n);
    for (int i = 0; i < 12; i++) {
        std::vector<double> v;
        for (int w = 0; w < 4096; w++) if (h[w][0] && h[w][i] >= h[w][0]) v.push_back(((double)h[w][i] - (double)wait0) * 1e-3);
        std::sort(v.begin(), v.end());
        if (v.empty()) continue;
        const size_t m = v.size() - 1;
        fprintf(stderr, "  %-12s %4zu  %7.2f %7.2f %7.2f %7.2f %7.2f\\n", names[i], v.size(), v[0], v[m / 10], v[m / 2],
                v[m * 9 / 10], v[m]);
    }
    /* per warp, the steps: median over warps of (point i - point i-1) */
    fprintf(stderr, "  per-warp step medians:");
    for (int i = 1; i < 12; i++) {
        std::vector<double> v;
        for (int w = 0; w < 4096; w++) if (h[w][0] && h[w][i] >= h[w][0] && h[w][i - 1] >= h[w][0]) v.push_back(((double)h[w][i] - (double)h[w][i - 1]) * 1e-3);
        std::sort(v.begin(), v.end());
        if (!v.empty()) fprintf(stderr, " %s %.2f;", names[i], v[v.size() / 2]);
    }
    fprintf(stderr, "\\n");
}
#define FP4_PREP_BATCH 3   /* B of the 4-warp kernels */''')
rep(P,'''        if (first) after_loads();
        first = false;''','''        if (first) {
            XTL(2);
            after_loads();
            XTL(3);
        }''')
rep(P,'''            fp4_prep_convert(v[b], u, down);''','''            fp4_prep_convert(v[b], u, down);
            if (first && b == 0) XTL(4);''')
rep(P,'''            if (lane == 0) xsc[s] = down;
        }
    }
    __syncthreads();
}''','''            if (lane == 0) xsc[s] = down;
        }
        first = false;
    }
    XTL(5);
    __syncthreads();
    XTL(6);
}''')
# mma_ck points
rep(P,'''    cluster_arrive_relaxed(); /* waited on before the first store into another block: every block of the cluster runs */
    /* [WPB][D][FP4_BLOCK_U4] rings, [ceil(S/CL)][32][4] uint4 and [ceil(S/CL)] f32 of x, then [tiles of the cluster]''','''    cluster_arrive_relaxed(); /* waited on before the first store into another block: every block of the cluster runs */
    XTL(0);
    /* [WPB][D][FP4_BLOCK_U4] rings, [ceil(S/CL)][32][4] uint4 and [ceil(S/CL)] f32 of x, then [tiles of the cluster]''')
rep(P,'''    copy_next(0); /* slot 0 before the wait, as mma_cl (the weights are written only at load) */
    pdl_start();
    auto copy_slots_after_0''','''    copy_next(0); /* slot 0 before the wait, as mma_cl (the weights are written only at load) */
    pdl_start();
    XTL(1);
    auto copy_slots_after_0''')
rep(P,'''    if (LATE) copy_slots_after_0();
    const fp4_xsrc xs = {xsh, reinterpret_cast<const float *>(xsh + Sb * 128)};
    const uint2 *xf_lane[1];
    fp4_x_lanes<1, true>(xs, Sb, 1, 0, lane, xf_lane);
    cluster_wait();''','''    if (LATE) copy_slots_after_0();
    XTL(7);
    const fp4_xsrc xs = {xsh, reinterpret_cast<const float *>(xsh + Sb * 128)};
    const uint2 *xf_lane[1];
    fp4_x_lanes<1, true>(xs, Sb, 1, 0, lane, xf_lane);
    cluster_wait();
    XTL(8);''')
rep(P,'''                                      copy_next); /* unit v + D */
        if ((lane & 3) == 0) { /* lanes 4g hold token 0: rows g, g + 8 */
            const unsigned at = sums_at''','''                                      copy_next); /* unit v + D */
        if (v == v0) XTL(9);
        if ((lane & 3) == 0) { /* lanes 4g hold token 0: rows g, g + 8 */
            const unsigned at = sums_at''')
rep(P,'''    cp_async_wait<0>();
    cluster_arrive();
    if (r != CL - 1) return; /* nothing reads this block's shared memory */
    cluster_wait();          /* every unit's p is in this block's shared memory */''','''    XTL(10);
    cp_async_wait<0>();
    cluster_arrive();
    if (r != CL - 1) {
        XTL(11);
        return;
    }
    cluster_wait();          /* every unit's p is in this block's shared memory */''')
rep(P,'''        fp4_store<1, PAIR>(fp4_tile_target(seg, t0 + j), 1, 0, lane & ~3, acc); /* lane & ~3: as token 0's lane */
    }
}

/* Variant mma_il<WPB, D>''','''        fp4_store<1, PAIR>(fp4_tile_target(seg, t0 + j), 1, 0, lane & ~3, acc); /* lane & ~3: as token 0's lane */
    }
    XTL(11);
}

/* Variant mma_il<WPB, D>''')
rep(P,'''    QRT_LAUNCH_CLUSTER(CL, kernel, (unsigned)(clusters * CL), WPB * 32, smem, blocks, seg, x, K, S, clusters);
    return true;
}

template <bool PAIR>
static void launch_gemm(''','''    static bool tl = false;
    if (!tl) tl = true, atexit(fp4_xtl_dump);
    QRT_LAUNCH_CLUSTER(CL, kernel, (unsigned)(clusters * CL), WPB * 32, smem, blocks, seg, x, K, S, clusters);
    return true;
}

template <bool PAIR>
static void launch_gemm(''')
