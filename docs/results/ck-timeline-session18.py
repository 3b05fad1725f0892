# Diagnostic, not part of the build: on top of ck-xprep-timeline-session17.py (apply that first, in a scratch worktree
# of main 5b09c2d, then this one), adds to each mma_ck warp's stamps: slot 0's arrival (a cp.async wait_group ahead of
# the first unit's own), its SM (%smid), its run's unit count and its cluster's tiles; the dump then also prints the
# loop ends by run length and per SM (the slowest and fastest SMs by their last warp's loop end), and
# QRT_XTL_NOEVICT=1 makes the ring copies plain cp.async.cg (no evict-first L2 hint). Session 18 (docs/benchmarks.md):
#   python3 docs/results/ck-xprep-timeline-session17.py && python3 docs/results/ck-timeline-session18.py
#   QRT_NVFP4_VARIANT=11 qwenrt tilebench --m 1 --formats nvfp4 --shapes mlp_down --variants mma_ck12x2
def rep(p,old,new,cnt=1):
    s=open(p).read(); assert old in s,(p,old); s=s.replace(old,new,cnt); open(p,'w').write(s)
P='src/backend/cuda/matmul.cu'
rep(P,'__device__ unsigned long long fp4_xtl[4096][12];','__device__ unsigned long long fp4_xtl[4096][16];\n__device__ int fp4_noevict;')
rep(P,'    static unsigned long long h[4096][12];','    static unsigned long long h[4096][16];')
rep(P,'const char *names[12] = {"entry"','const char *names[13] = {"entry"')
rep(P,'''                             "prep barrier", "late copies", "cl wait", "first unit", "loop end", "exit"};''',
      '''                             "prep barrier", "late copies", "cl wait", "first unit", "loop end", "exit",
                             "slot0 landed"};''')
rep(P,'''    for (int i = 0; i < 12; i++) {
        std::vector<double> v;''','''    for (int i = 0; i < 13; i++) {
        std::vector<double> v;''')
rep(P,'''    fprintf(stderr, "\\n");
}
#define FP4_PREP_BATCH 3''','''    fprintf(stderr, "\\n");
    /* slot 0's copy time from entry, and the loop ends by run length */
    {
        std::vector<double> v;
        for (int w = 0; w < 4096; w++) if (h[w][0] && h[w][12] >= h[w][0]) v.push_back(((double)h[w][12] - (double)h[w][0]) * 1e-3);
        std::sort(v.begin(), v.end());
        if (!v.empty()) fprintf(stderr, "  slot0 landed - entry: p10 %.2f p50 %.2f p90 %.2f\\n", v[(v.size() - 1) / 10], v[(v.size() - 1) / 2], v[(v.size() - 1) * 9 / 10]);
    }
    for (unsigned u = 1; u < 40; u++) {
        std::vector<double> v;
        for (int w = 0; w < 4096; w++) if (h[w][0] && h[w][14] == u && h[w][10] >= h[w][0]) v.push_back(((double)h[w][10] - (double)wait0) * 1e-3);
        std::sort(v.begin(), v.end());
        if (!v.empty()) fprintf(stderr, "  loop end, runs of %2u units: %4zu warps  p10 %.2f p50 %.2f p90 %.2f max %.2f\\n", u, v.size(), v[(v.size() - 1) / 10], v[(v.size() - 1) / 2], v[(v.size() - 1) * 9 / 10], v.back());
    }
    /* per SM: its last warp's loop end, and its first warp's entry */
    std::vector<std::pair<double, int>> sm;
    for (int s = 0; s < 256; s++) {
        double end = -1e9, ent = 1e9;
        int tiles = 0;
        for (int w = 0; w < 4096; w++) if (h[w][0] && (int)h[w][13] == s && h[w][10] >= h[w][0]) {
            end = std::max(end, ((double)h[w][10] - (double)wait0) * 1e-3);
            ent = std::min(ent, ((double)h[w][0] - (double)wait0) * 1e-3);
            tiles = (int)h[w][15];
        }
        if (end > -1e9) sm.push_back({end, s * 1000 + tiles * 100000 + (int)std::lround((ent + 10.0) * 10)});
    }
    std::sort(sm.begin(), sm.end());
    fprintf(stderr, "  SMs by last loop end (smid:tiles:end us:entry us), fastest 12:");
    for (size_t i = 0; i < sm.size() && i < 12; i++) fprintf(stderr, " %d:%d:%.2f:%.1f", sm[i].second / 1000 % 100 + 0, sm[i].second / 100000, sm[i].first, (sm[i].second % 1000) / 10.0 - 10.0);
    fprintf(stderr, "\\n  slowest 24:");
    for (size_t i = sm.size() > 24 ? sm.size() - 24 : 0; i < sm.size(); i++) fprintf(stderr, " %d:%d:%.2f:%.1f", sm[i].second / 1000 % 100, sm[i].second / 100000, sm[i].first, (sm[i].second % 1000) / 10.0 - 10.0);
    fprintf(stderr, "\\n");
}
#define FP4_PREP_BATCH 3''')
# smid fits 0..99 in the packing above only if < 100: store smid % 1000 differently -> use a direct map instead
rep(P,'''sm.push_back({end, s * 1000 + tiles * 100000 + (int)std::lround((ent + 10.0) * 10)});''','''sm.push_back({end, (s % 100) * 1000 + tiles * 100000 + (int)std::lround((ent + 10.0) * 10) + (s >= 100 ? 100000000 : 0)});''')
rep(P,'''sm[i].second / 1000 % 100 + 0, sm[i].second / 100000,''','''sm[i].second / 1000 % 100 + (sm[i].second >= 100000000 ? 100 : 0), sm[i].second / 100000 % 1000,''')
rep(P,'''sm[i].second / 1000 % 100, sm[i].second / 100000,''','''sm[i].second / 1000 % 100 + (sm[i].second >= 100000000 ? 100 : 0), sm[i].second / 100000 % 1000,''')
# plain copies when asked
rep(P,'''    for (int j = 0; j < 9; j++) cp_async16_stream(slot_lane + j * 32, block_lane + j * 32, policy);''',
      '''    for (int j = 0; j < 9; j++) {
        if (fp4_noevict) cp_async16(slot_lane + j * 32, block_lane + j * 32);
        else cp_async16_stream(slot_lane + j * 32, block_lane + j * 32, policy);
    }''')
# smid, run length, tiles after the wait
rep(P,'''    pdl_start();
    XTL(1);''','''    pdl_start();
    XTL(1);
    if (lane == 0) {
        unsigned smid;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
        const int wid = blockIdx.x * (blockDim.x >> 5) + warp;
        fp4_xtl[wid][13] = smid, fp4_xtl[wid][14] = (unsigned long long)(v1 - v0), fp4_xtl[wid][15] = (unsigned long long)nt;
    }''')
# slot 0's arrival
rep(P,'''    for (int v = v0, k = 0; v < v1; v++, k = k == D - 1 ? 0 : k + 1) {
        float p[1][2];
        fp4_slot_p<1, D, true, EARLY>(''','''    for (int v = v0, k = 0; v < v1; v++, k = k == D - 1 ? 0 : k + 1) {
        float p[1][2];
        if (v == v0) {
            cp_async_wait<D - 1>();
            XTL(12);
        }
        fp4_slot_p<1, D, true, EARLY>(''')
rep(P,'''    static bool tl = false;
    if (!tl) tl = true, atexit(fp4_xtl_dump);''','''    static bool tl = false;
    if (!tl) {
        tl = true, atexit(fp4_xtl_dump);
        const char *ne = getenv("QRT_XTL_NOEVICT");
        const int on = ne && *ne == '1';
        QRT_CUDA_CHECK(cudaMemcpyToSymbol(fp4_noevict, &on, sizeof on));
    }''')
