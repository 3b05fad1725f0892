/* qwenrt membw: copy, read-only and write-only bandwidth at several sizes, and a sustained read reported per
 * window, on the GPU (CUDA events) or on the host (OpenMP threads, monotonic clock).
 *
 * Why: decode speed is memory bandwidth. The seed thread's user had locked clocks and a normal short copy
 * test, yet a 3 ms continuous read ran at 71% of what the same board reached elsewhere; only a sustained
 * read shows that. Each size rotates over a region of fresh memory (≥ 1 GiB on the GPU, ≥ 8× the size on
 * the host) so no repetition reads what the last one left in cache. */
#include "tools/membw.h"

#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/tools.h"
#include "util/common.h"

static const char *usage =
    "usage: qwenrt membw [--device auto|cpu|cuda] [--sizes 16M,64M,256M,1G,4G] [--sustain-s 5]\n"
    "                    [--interval-s 0.5] [--sustain-size 4G] [--json FILE]\n"
    "\n"
    "Copy, read-only and write-only bandwidth at each size, then a sustained read reported per window with\n"
    "the GPU's clocks, temperature and power (NVML) sampled while it runs, to catch a drop under sustained load.\n"
    "  --device D        cuda, cpu, or auto (default: cuda when this build has CUDA and a GPU is present)\n"
    "  --sizes LIST      buffer sizes, comma-separated, with K, M or G (powers of 2; default\n"
    "                    16M,64M,256M,1G,4G on the GPU, 16M,64M,256M,1G on the host)\n"
    "  --sustain-s S     length of the sustained read in seconds (0..600, default 5; 0 skips it)\n"
    "  --interval-s S    one reported window of the sustained read (0.001..60, default 0.5)\n"
    "  --sustain-size B  buffer of the sustained read (default 4G on the GPU, 1G on the host)\n"
    "  --json FILE       everything as JSON (docs/bench-schema.md)\n"
    "method: each size rotates over a region of fresh memory (>= 1 GiB on the GPU, >= 8x the size on the host)\n"
    "  so no repetition reads what the last left in cache; the median of 5 batches is shown. GPU: CUDA events,\n"
    "  cudaMemcpyAsync for copy, a 16-byte streaming-load kernel for read, cudaMemsetAsync for write. CPU:\n"
    "  OpenMP threads (memcpy / 8-byte loads / memset per thread), monotonic clock.\n"
    "metrics: GB/s = 1e9 bytes per second; copy counts read + write bytes (the payload is half); %spec = of\n"
    "  the device's spec-sheet bandwidth when it is known (GPUs only); sustained min/mean/max over the windows\n"
    "  and the last window as % of the first.\n";

/* "16M,1G" → sizes; 0 or a count on success, -1 with a message. */
static int parse_sizes(const char *s, size_t *out, int cap) {
    int n = 0;
    while (*s) {
        char *end;
        double v = strtod(s, &end);
        size_t mult = 1;
        if (*end == 'K' || *end == 'k') mult = 1 << 10, end++;
        else if (*end == 'M' || *end == 'm') mult = 1 << 20, end++;
        else if (*end == 'G' || *end == 'g') mult = (size_t)1 << 30, end++;
        const int in_range = v > 0 && v * (double)mult <= (double)((size_t)1 << 40); /* false for NaN too */
        if (end == s || !in_range || (*end && *end != ',') || n == cap) {
            fprintf(stderr, "qwenrt membw: sizes '%s' are not a list like 16M,1G (at most %d, each up to 1024G)\n", s,
                    cap);
            return -1;
        }
        out[n++] = ((size_t)(v * mult) + 4095) / 4096 * 4096; /* whole 16-byte vectors and pages */
        s = *end ? end + 1 : end;
    }
    return n;
}

/* ---- host ---------------------------------------------------------------------------------------- */

typedef enum { H_COPY, H_READ, H_WRITE } host_op;

static uint64_t host_sink;

/* One pass of op over bytes at src/dst, split evenly over the OpenMP threads. */
static void host_pass(host_op op, const uint8_t *src, uint8_t *dst, size_t bytes) {
    uint64_t acc = 0;
#pragma omp parallel reduction(^ : acc)
    {
        const int nt = omp_get_num_threads(), t = omp_get_thread_num();
        const size_t words = bytes / 8, lo = words * (size_t)t / (size_t)nt, hi = words * (size_t)(t + 1) / (size_t)nt;
        if (op == H_COPY) memcpy(dst + lo * 8, src + lo * 8, (hi - lo) * 8);
        else if (op == H_WRITE) memset(dst + lo * 8, t, (hi - lo) * 8);
        else {
            const uint64_t *p = (const uint64_t *)src;
            uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
            size_t i = lo;
            for (; i + 4 <= hi; i += 4) a0 ^= p[i], a1 ^= p[i + 1], a2 ^= p[i + 2], a3 ^= p[i + 3];
            for (; i < hi; i++) a0 ^= p[i];
            acc ^= a0 ^ a1 ^ a2 ^ a3;
        }
    }
    host_sink ^= acc; /* keeps the loads */
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double host_time_op(host_op op, uint8_t *src, uint8_t *dst, size_t bytes, int slots) {
    size_t want = ((size_t)1 << 30) / bytes;
    int iters = want < 2 ? 2 : want > 64 ? 64 : (int)want;
    double per[5];
    for (int rep = -1; rep < 5; rep++) {
        double t0 = qrt_now_ms();
        for (int i = 0; i < iters; i++) {
            size_t off = (size_t)((rep + 1) * iters + i) % (size_t)slots * bytes;
            host_pass(op, src + off, dst + off, bytes);
        }
        double ms = qrt_now_ms() - t0;
        if (rep >= 0) per[rep] = (double)bytes * (op == H_COPY ? 2 : 1) * iters / (ms * 1e-3) / 1e9;
    }
    qsort(per, 5, sizeof per[0], cmp_double);
    return per[2];
}

/* Region of fresh memory a size rotates over: ≥ 8× the size, or the size alone once that is ≥ 256 MiB. */
static size_t host_region(size_t bytes) { return bytes * 8 >= ((size_t)1 << 28) ? bytes : bytes * 8; }

static uint8_t *host_buffer(size_t region) {
    uint8_t *p = qrt_alloc_aligned(region);
    if (!p) fprintf(stderr, "qwenrt membw: cannot allocate %.0f MB of host memory; use smaller sizes\n", region / 1e6);
    else host_pass(H_WRITE, NULL, p, region); /* touch every page before timing */
    return p;
}

static int host_point(qrt_bw_point *p) {
    const size_t bytes = p->bytes, region = host_region(bytes);
    const int slots = (int)(region / bytes);
    uint8_t *src = host_buffer(region), *dst = src ? host_buffer(region) : NULL;
    if (!dst) return free(src), 1;
    p->copy_gbs = host_time_op(H_COPY, src, dst, bytes, slots);
    p->read_gbs = host_time_op(H_READ, src, dst, bytes, slots);
    p->write_gbs = host_time_op(H_WRITE, src, dst, bytes, slots);
    free(src), free(dst);
    return 0;
}

int qrt_membw_read(int gpu, size_t bytes, double *gbs) {
#ifdef QRT_HAVE_CUDA
    if (gpu) return qrt_membw_cuda_read(bytes, gbs);
#endif
    const size_t region = host_region(bytes);
    uint8_t *src = host_buffer(region);
    if (!src) return 1;
    *gbs = host_time_op(H_READ, src, src, bytes, (int)(region / bytes)); /* dst unused by a read */
    free(src);
    return 0;
}

static int host_sustained(size_t bytes, double sustain_s, double interval_s, qrt_membw_result *r) {
    uint8_t *buf = qrt_alloc_aligned(bytes);
    if (!buf) {
        fprintf(stderr, "qwenrt membw: cannot allocate %.0f MB for the sustained read; use a smaller "
                "--sustain-size\n", bytes / 1e6);
        return 1;
    }
    host_pass(H_WRITE, NULL, buf, bytes);
    double t = 0;
    r->n_samples = 0;
    while (t < sustain_s - 1e-9 && r->n_samples < QRT_MEMBW_MAX_SAMPLES) {
        double t0 = qrt_now_ms(), ms;
        int passes = 0;
        do {
            host_pass(H_READ, buf, NULL, bytes);
            passes++;
        } while ((ms = qrt_now_ms() - t0) < interval_s * 1e3);
        t += ms * 1e-3;
        qrt_bw_sample *s = &r->samples[r->n_samples++];
        memset(s, 0, sizeof *s);
        s->temp_c = -1, s->power_w = -1;
        s->t_s = t;
        s->gbs = (double)bytes * passes / (ms * 1e-3) / 1e9;
    }
    free(buf);
    return 0;
}

/* ---- both ---------------------------------------------------------------------------------------- */

int qrt_membw_measure(int gpu, const size_t *sizes, int n_sizes, size_t sustain_bytes, double sustain_s,
                      double interval_s, qrt_devinfo *dev, qrt_membw_result *r) {
    memset(r, 0, sizeof *r);
    r->gpu = gpu;
    for (int i = 0; i < n_sizes && i < QRT_MEMBW_MAX_SIZES; i++) {
        qrt_bw_point *p = &r->points[r->n_points++];
        p->bytes = sizes[i];
#ifdef QRT_HAVE_CUDA
        if (gpu) {
            if (qrt_membw_cuda_point(p)) return 1;
            continue;
        }
#endif
        if (host_point(p)) return 1;
    }
    r->sustain_bytes = sustain_bytes;
    if (sustain_s > 0) {
#ifdef QRT_HAVE_CUDA
        if (gpu) {
            if (qrt_membw_cuda_sustained(sustain_bytes, sustain_s, interval_s, dev, r)) return 1;
        } else
#endif
            if (host_sustained(sustain_bytes, sustain_s, interval_s, r))
            return 1;
    }
    if (r->n_samples) {
        r->sus_min = 1e30;
        for (int i = 0; i < r->n_samples; i++) {
            double g = r->samples[i].gbs;
            r->sus_min = g < r->sus_min ? g : r->sus_min;
            r->sus_max = g > r->sus_max ? g : r->sus_max;
            r->sus_mean += g / r->n_samples;
        }
        r->sus_first = r->samples[0].gbs;
        r->sus_last = r->samples[r->n_samples - 1].gbs;
    }
    return 0;
}

static void pct(double v, double spec, char *buf, size_t n) {
    if (spec > 0) snprintf(buf, n, "%5.1f%%", 100 * v / spec);
    else snprintf(buf, n, "    - ");
}

static void print_result(const qrt_membw_result *r, const qrt_devinfo *d) {
    const double spec = r->gpu ? d->spec_bw_gbs : 0;
    if (spec > 0) printf("spec-sheet bandwidth: %.0f GB/s\n", spec);
    else printf("spec-sheet bandwidth: unknown for this device (%% spec not shown)\n");
    printf("%10s %12s %7s %10s %7s %10s %7s\n", "size", "copy GB/s", "%spec", "read GB/s", "%spec", "write GB/s",
           "%spec");
    for (int i = 0; i < r->n_points; i++) {
        const qrt_bw_point *p = &r->points[i];
        char a[16], b[16], c[16];
        pct(p->copy_gbs, spec, a, sizeof a), pct(p->read_gbs, spec, b, sizeof b), pct(p->write_gbs, spec, c, sizeof c);
        printf("%7.0f MB %12.0f %7s %10.0f %7s %10.0f %7s\n", p->bytes / 1048576.0, p->copy_gbs, a, p->read_gbs, b,
               p->write_gbs, c);
    }
    if (!r->n_samples) return;
    printf("sustained read of %.0f MB, per window:\n%8s %10s %7s %7s %8s %6s %8s\n", r->sustain_bytes / 1048576.0,
           "t_s", "read GB/s", "%spec", "SM MHz", "mem MHz", "temp", "power W");
    for (int i = 0; i < r->n_samples; i++) {
        const qrt_bw_sample *s = &r->samples[i];
        char a[16];
        pct(s->gbs, spec, a, sizeof a);
        printf("%8.2f %10.0f %7s %7u %8u %6d %8.0f\n", s->t_s, s->gbs, a, s->sm_mhz, s->mem_mhz, s->temp_c, s->power_w);
    }
    printf("sustained: min %.0f, mean %.0f, max %.0f GB/s; last window %.1f%% of the first\n", r->sus_min, r->sus_mean,
           r->sus_max, r->sus_first > 0 ? 100 * r->sus_last / r->sus_first : 0);
}

json_t *qrt_membw_json(const qrt_membw_result *r, const qrt_devinfo *d) {
    json_t *pts = json_array(), *sam = json_array();
    for (int i = 0; i < r->n_points; i++) {
        const qrt_bw_point *p = &r->points[i];
        json_array_append_new(pts, json_pack("{s:I, s:o, s:o, s:o}", "bytes", (json_int_t)p->bytes, "copy_gbs",
                                             qrt_json_real(p->copy_gbs), "read_gbs", qrt_json_real(p->read_gbs),
                                             "write_gbs", qrt_json_real(p->write_gbs)));
    }
    for (int i = 0; i < r->n_samples; i++) {
        const qrt_bw_sample *s = &r->samples[i];
        json_array_append_new(sam,
                              json_pack("{s:o, s:o, s:i, s:i, s:i, s:o}", "t_s", qrt_json_real(s->t_s), "read_gbs",
                                        qrt_json_real(s->gbs), "sm_mhz", (int)s->sm_mhz, "mem_mhz", (int)s->mem_mhz,
                                        "temp_c", s->temp_c, "power_w", qrt_json_real(s->power_w)));
    }
    return json_pack("{s:s, s:o, s:o, s:{s:I, s:o, s:o, s:o, s:o, s:o, s:o}}", "where", r->gpu ? "gpu" : "cpu",
                     "spec_gbs", qrt_json_real(r->gpu ? d->spec_bw_gbs : 0.0), "sizes", pts, "sustained", "bytes",
                     (json_int_t)r->sustain_bytes, "samples", sam, "min_gbs", qrt_json_real(r->sus_min), "mean_gbs",
                     qrt_json_real(r->sus_mean), "max_gbs", qrt_json_real(r->sus_max), "first_gbs",
                     qrt_json_real(r->sus_first), "last_gbs", qrt_json_real(r->sus_last));
}

json_t *qrt_devinfo_json(const qrt_devinfo *d) {
    char thr[256];
    qrt_devinfo_throttle_str(d->throttle, thr, sizeof thr);
    json_t *cpu = json_pack("{s:s, s:i, s:o}", "name", d->cpu_name, "cores", d->cpu_cores, "mem_gb",
                            qrt_json_real(d->host_mem_gb));
    if (!d->gpu) return json_pack("{s:s, s:o}", "kind", "cpu", "cpu", cpu);
    json_t *g =
        json_pack("{s:s, s:s, s:i, s:o, s:o, s:o, s:s, s:s, s:s, s:b, s:o}", "kind", "gpu", "name", d->name, "sms",
                  d->sms, "mem_gb", qrt_json_real(d->mem_gb), "mem_free_gb", qrt_json_real(d->mem_free_gb), "l2_mb",
                  qrt_json_real(d->l2_mb), "compute_capability", "", "driver", d->nvml_driver, "pci_bus_id",
                  d->pci_bus_id, "nvml", d->have_nvml, "spec_bw_gbs", qrt_json_real(d->spec_bw_gbs));
    char cc[16], ver[32];
    snprintf(cc, sizeof cc, "%d.%d", d->cc_major, d->cc_minor);
    json_object_set_new(g, "compute_capability", json_string(cc));
    snprintf(ver, sizeof ver, "%d.%d", d->driver_version / 1000, d->driver_version % 1000 / 10);
    json_object_set_new(g, "driver_cuda", json_string(ver));
    snprintf(ver, sizeof ver, "%d.%d", d->runtime_version / 1000, d->runtime_version % 1000 / 10);
    json_object_set_new(g, "runtime", json_string(ver));
    json_object_set_new(g, "clocks", json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "sm_mhz", (int)d->sm_mhz,
                                               "sm_max_mhz", d->have_nvml ? (int)d->sm_max_mhz : d->clock_max_mhz_cuda,
                                               "mem_mhz", (int)d->mem_mhz, "mem_max_mhz",
                                               d->have_nvml ? (int)d->mem_max_mhz : d->mem_clock_mhz_cuda,
                                               "pstate", d->pstate, "temp_c", d->temp_c));
    json_object_set_new(g, "power_w", qrt_json_real(d->power_w));
    json_object_set_new(g, "power_limit_w", qrt_json_real(d->power_limit_w));
    json_object_set_new(g, "throttle", json_string(thr));
    json_object_set_new(g, "cpu", cpu);
    return g;
}

json_t *qrt_json_real(double v) { return isfinite(v) ? json_real(v) : json_null(); }

int qrt_write_json(json_t *j, const char *path) {
    int rc = json_dump_file(j, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (rc) fprintf(stderr, "qwenrt: cannot write %s; check the folder exists and is writable\n", path);
    return rc ? 1 : 0;
}

/* --device: -1 auto, 0 cpu, 1 cuda; returns whether to use the GPU, or -1 after a message. */
int qrt_tool_pick_gpu(const char *tool, const char *device) {
    int want = !device || !strcmp(device, "auto") ? -1 : !strcmp(device, "cuda") ? 1 : !strcmp(device, "cpu") ? 0 : -2;
    if (want == -2) {
        fprintf(stderr, "qwenrt %s: --device expects auto, cpu or cuda, got '%s'\n", tool, device);
        return -1;
    }
    qrt_devinfo d;
    qrt_devinfo_get(&d, want != 0);
    if (want == 1 && !d.gpu) {
        fprintf(stderr, "qwenrt %s: no CUDA device (this build %s CUDA, or no GPU/driver); use --device cpu\n", tool,
#ifdef QRT_HAVE_CUDA
                "has"
#else
                "lacks"
#endif
        );
        return -1;
    }
    return want == 0 ? 0 : d.gpu;
}

int qrt_tool_membw(int argc, char **argv) {
    const char *device = "auto", *json_path = NULL, *sizes_s = NULL, *sus_size_s = NULL;
    double sustain_s = 5, interval_s = 0.5;
    for (int i = 0; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return fputs(usage, stdout), 0;
        if (!v) return fprintf(stderr, "qwenrt membw: unknown option or missing value: '%s' (see --help)\n", a), 2;
        if (!strcmp(a, "--device")) device = v;
        else if (!strcmp(a, "--json")) json_path = v;
        else if (!strcmp(a, "--sizes")) sizes_s = v;
        else if (!strcmp(a, "--sustain-size")) sus_size_s = v;
        else if (!strcmp(a, "--sustain-s")) {
            if (!qrt_tool_number("membw", a, v, 0, 600, &sustain_s)) return 2;
        } else if (!strcmp(a, "--interval-s")) {
            if (!qrt_tool_number("membw", a, v, 0.001, 60, &interval_s)) return 2;
        } else return fprintf(stderr, "qwenrt membw: unknown option '%s' (see qwenrt membw --help)\n", a), 2;
    }
    int gpu = qrt_tool_pick_gpu("membw", device);
    if (gpu < 0) return 2;
    qrt_devinfo d;
    qrt_devinfo_get(&d, gpu);
    size_t sizes[QRT_MEMBW_MAX_SIZES], sus = gpu ? (size_t)4 << 30 : (size_t)1 << 30;
    int n = parse_sizes(sizes_s ? sizes_s : gpu ? "16M,64M,256M,1G,4G" : "16M,64M,256M,1G", sizes, QRT_MEMBW_MAX_SIZES);
    if (n < 0) return 2;
    if (!n) return fprintf(stderr, "qwenrt membw: --sizes is empty; expected a list like 16M,1G\n"), 2;
    if (sus_size_s) {
        size_t one;
        if (parse_sizes(sus_size_s, &one, 1) != 1) return 2;
        sus = one;
    }
    char line[512];
    qrt_devinfo_line(&d, line, sizeof line);
    printf("membw on %s\n", line);
    if (!gpu) printf("host threads: %d (OMP_NUM_THREADS)\n", omp_get_max_threads());
    qrt_membw_result r;
    if (qrt_membw_measure(gpu, sizes, n, sus, sustain_s, interval_s, &d, &r)) return 1;
    print_result(&r, &d);
    int rc = 0;
    if (json_path) {
        json_t *j = json_pack("{s:s, s:o, s:o}", "tool", "membw", "device", qrt_devinfo_json(&d), "membw",
                              qrt_membw_json(&r, &d));
        rc = qrt_write_json(j, json_path);
        json_decref(j);
    }
    return rc;
}
