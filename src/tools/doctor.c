/* qwenrt doctor: is this machine able to decode at the speed its memory allows? It prints the device, its
 * clocks now and max, temperature and power, measures read and copy bandwidth against the spec sheet, reads
 * the clocks while a sustained read runs, times the NVFP4 GEMV the autotuner picks on the 27B lm_head shape,
 * and ends with a verdict naming what looks wrong. Every check the seed thread needed a human for. */
#include <jansson.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tools/membw.h"
#include "tools/tools.h"
#include "util/common.h"

static const char *usage =
    "usage: qwenrt doctor [--device auto|cpu|cuda] [--quick] [--json FILE]\n"
    "\n"
    "Is this machine able to decode at the speed its memory allows? Prints the device (name, SMs, clocks\n"
    "now/max, memory, driver and runtime, temperature, power, clock-limit reasons; NVML when\n"
    "libnvidia-ml.so.1 is present), measures copy, read and write bandwidth at 1 GiB and a sustained read for\n"
    "2 s with the clocks sampled under that load, compares with the spec sheet of known devices, times the\n"
    "autotuned NVFP4 GEMV on the 27B lm_head shape [248320, 5120] at M = 1, and prints a verdict.\n"
    "On the CPU: cores, memory and measured host bandwidth.\n"
    "  --device D   cuda, cpu, or auto (default: cuda when this build has CUDA and a GPU is present)\n"
    "  --quick      64 MiB and a 0.5 s sustained read, no GEMV (for tests)\n"
    "  --json FILE  everything as JSON (docs/bench-schema.md)\n"
    "metrics: GB/s = 1e9 bytes per second; copy counts read + write; GEMV GB/s = weight bytes (codes +\n"
    "  scales) / time, and its % is of the read bandwidth measured here.\n"
    "verdict: names each of: SM clock under load < 90% of max; memory clock < 95% of max; read bandwidth\n"
    "  < 80% of the spec sheet; sustained read min < 90% of its max (a drop under load); the NVFP4 GEMV\n"
    "  < 80% of the measured read; temperature >= 85 C; driver clock-limit reasons other than idle or\n"
    "  application clocks; NVML missing. \"nothing looks wrong\" when none applies. Exit status 0, 1, 2.\n";

#define MAX_FINDINGS 16

typedef struct {
    int n;
    char line[MAX_FINDINGS][256];
} findings;

static void note(findings *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(findings *f, const char *fmt, ...) {
    if (f->n == MAX_FINDINGS) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->line[f->n++], sizeof f->line[0], fmt, ap);
    va_end(ap);
}

int qrt_tool_doctor(int argc, char **argv) {
    const char *device = "auto", *json_path = NULL;
    int quick = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return fputs(usage, stdout), 0;
        if (!strcmp(a, "--quick")) quick = 1;
        else if (!strcmp(a, "--device") && v) device = v, i++;
        else if (!strcmp(a, "--json") && v) json_path = v, i++;
        else return fprintf(stderr, "qwenrt doctor: unknown option or missing value: '%s' (see --help)\n", a), 2;
    }
    int gpu = qrt_tool_pick_gpu("doctor", device);
    if (gpu < 0) return 2;
    qrt_devinfo d;
    qrt_devinfo_get(&d, gpu);
    const qrt_devinfo idle = d; /* the state before any load */
    char line[512], thr[256];
    qrt_devinfo_line(&d, line, sizeof line);
    printf("device:   %s\n", line);
    printf("host:     %s, %d cores, %.1f GB memory, %d OpenMP threads\n", d.cpu_name, d.cpu_cores, d.host_mem_gb,
           omp_get_max_threads());
    if (gpu) {
        qrt_devinfo_throttle_str(d.throttle, thr, sizeof thr);
        printf("state:    %.1f GB free of %.1f; temperature %d C; power %.0f W of %.0f W limit; P%d; clock "
               "limits: %s\n", d.mem_free_gb, d.mem_gb, d.temp_c, d.power_w, d.power_limit_w, d.pstate, thr);
        if (d.spec_bw_gbs > 0) printf("spec:     %.0f GB/s memory bandwidth (spec sheet)\n", d.spec_bw_gbs);
        else printf("spec:     this device is not in the spec table; %% of spec is not shown\n");
    }
    size_t size = quick ? (size_t)64 << 20 : (size_t)1 << 30;
    qrt_membw_result r;
    if (qrt_membw_measure(gpu, &size, 1, gpu && !quick ? (size_t)2 << 30 : size, quick ? 0.5 : 2.0, quick ? 0.25 : 0.5,
                          &d, &r))
        return 1;
    const qrt_bw_point *p = &r.points[0];
    const double spec = gpu ? d.spec_bw_gbs : 0;
    printf("measured: read %.0f GB/s, copy %.0f GB/s (read + write), write %.0f GB/s at %.0f MB", p->read_gbs,
           p->copy_gbs, p->write_gbs, p->bytes / 1048576.0);
    if (spec > 0) printf(" = %.0f%% / %.0f%% / %.0f%% of spec", 100 * p->read_gbs / spec, 100 * p->copy_gbs / spec,
                         100 * p->write_gbs / spec);
    printf("\nsustained read %.1f s: min %.0f, mean %.0f, max %.0f GB/s; last window %.0f%% of the first\n",
           r.n_samples ? r.samples[r.n_samples - 1].t_s : 0, r.sus_min, r.sus_mean, r.sus_max,
           r.sus_first > 0 ? 100 * r.sus_last / r.sus_first : 0);
    unsigned min_sm = 0, min_mem = 0;
    for (int i = 0; i < r.n_samples; i++) {
        if (!min_sm || r.samples[i].sm_mhz < min_sm) min_sm = r.samples[i].sm_mhz;
        if (!min_mem || r.samples[i].mem_mhz < min_mem) min_mem = r.samples[i].mem_mhz;
    }
    if (gpu && d.have_nvml)
        printf("under load: SM clock min %u of max %u MHz, memory clock min %u of max %u MHz, temperature %d C, "
               "power %.0f W\n", min_sm, d.sm_max_mhz, min_mem, d.mem_max_mhz, d.temp_c, d.power_w);
    double fp4_ms = 0, fp4_gbs = 0;
    const char *fp4_variant = "";
#ifdef QRT_HAVE_CUDA
    double fp4_bytes = 0;
    if (gpu && !quick && qrt_membw_cuda_nvfp4_lm_head(&fp4_ms, &fp4_bytes, &fp4_variant) == 0) {
        fp4_gbs = fp4_bytes / (fp4_ms * 1e-3) / 1e9;
        printf("NVFP4 GEMV lm_head [248320, 5120] M=1 (autotuned '%s'): %.3f ms, %.0f GB/s = %.0f%% of measured "
               "read\n", fp4_variant, fp4_ms, fp4_gbs, 100 * fp4_gbs / p->read_gbs);
    }
#endif
    /* the verdict: what looks wrong, most decisive first */
    findings f = {0};
    if (gpu && d.have_nvml && d.sm_max_mhz && min_sm < 0.9 * d.sm_max_mhz)
        note(&f, "SM clock fell to %u MHz under load (max %u): check power mode and application clocks "
             "(nvidia-smi -q -d CLOCK,PERFORMANCE; on Jetson: nvpmodel -m 0 and jetson_clocks)", min_sm, d.sm_max_mhz);
    if (gpu && d.have_nvml && d.mem_max_mhz && min_mem < 0.95 * d.mem_max_mhz)
        note(&f, "memory clock fell to %u MHz under load (max %u): memory-bound decode slows by the same ratio "
             "(Jetson: EMC; check jetson_clocks --show)", min_mem, d.mem_max_mhz);
    if (spec > 0 && p->read_gbs < 0.80 * spec)
        note(&f, "read bandwidth %.0f GB/s is below 80%% of the spec sheet (%.0f GB/s): memory clock, power mode "
             "or memory training; reboot and compare", p->read_gbs, spec);
    if (!gpu && r.n_samples > 1 && r.sus_min < 0.90 * r.sus_max)
        note(&f, "host read bandwidth varied from %.1f to %.1f GB/s: other processes or CPU frequency scaling; "
             "measure on an idle machine", r.sus_min, r.sus_max);
    if (gpu && r.n_samples > 1 && r.sus_min < 0.90 * r.sus_max)
        note(&f, "sustained read dropped to %.0f GB/s from %.0f GB/s: the device throttles under continuous "
             "load (thermal, power, or memory controller); long GEMVs such as lm_head will run at the low rate",
             r.sus_min, r.sus_max);
    if (fp4_gbs > 0 && fp4_gbs < 0.80 * p->read_gbs)
        note(&f, "NVFP4 GEMV variant '%s' reaches %.0f%% of measured read bandwidth (%.0f GB/s): the kernel, not "
             "the memory, limits decode (see qwenrt tilebench)", fp4_variant, 100 * fp4_gbs / p->read_gbs, fp4_gbs);
    if (gpu && d.temp_c >= 85)
        note(&f, "temperature %d C is high: thermal slowdown is likely; check cooling", d.temp_c);
    qrt_devinfo_throttle_str(d.throttle & ~0x3ull, thr, sizeof thr); /* idle and app-clock bits are benign */
    if (gpu && d.have_nvml && (d.throttle & ~0x3ull))
        note(&f, "the driver reports clock limits under load: %s", thr);
    if (gpu && !d.have_nvml)
        note(&f, "NVML (libnvidia-ml.so.1) is not available: clocks now, temperature and power are unknown; on "
             "Jetson use tegrastats and jetson_clocks --show");
    printf("verdict:  ");
    if (!f.n) printf("nothing looks wrong%s\n", gpu ? ": clocks held under load, bandwidth near spec, no drop" : "");
    else
        for (int i = 0; i < f.n; i++) printf("%s- %s\n", i ? "          " : "\n          ", f.line[i]);
    int rc = 0;
    if (json_path) {
        json_t *verdict = json_array();
        for (int i = 0; i < f.n; i++) json_array_append_new(verdict, json_string(f.line[i]));
        json_t *j = json_pack("{s:s, s:o, s:o, s:o, s:o, s:{s:i, s:i}}", "tool", "doctor", "device",
                              qrt_devinfo_json(&idle), "device_under_load", qrt_devinfo_json(&d), "membw",
                              qrt_membw_json(&r, &d), "verdict", verdict, "under_load", "sm_mhz_min", (int)min_sm,
                              "mem_mhz_min", (int)min_mem);
        if (fp4_ms > 0)
            json_object_set_new(j, "nvfp4_lm_head",
                                json_pack("{s:s, s:o, s:o, s:o}", "variant", fp4_variant, "ms", qrt_json_real(fp4_ms),
                                          "gbs", qrt_json_real(fp4_gbs), "pct_of_read",
                                          qrt_json_real(100 * fp4_gbs / p->read_gbs)));
        rc = qrt_write_json(j, json_path);
        json_decref(j);
    }
    return rc;
}
