/* Device description for bench, membw and doctor. NVML is opened with dlopen (libnvidia-ml.so.1 ships with
 * the driver; the binaries link the CUDA runtime statically and must run where NVML is absent, e.g. Jetson),
 * and only the few entry points used here are declared, with the types of nvml.h. */
#include "tools/devinfo.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef void *nvml_device;
typedef int (*nvml_fn_void)(void);
typedef int (*nvml_fn_handle_pci)(const char *, nvml_device *);
typedef int (*nvml_fn_handle_index)(unsigned, nvml_device *);
typedef int (*nvml_fn_clock)(nvml_device, int, unsigned *);
typedef int (*nvml_fn_uint)(nvml_device, unsigned *);
typedef int (*nvml_fn_temp)(nvml_device, int, unsigned *);
typedef int (*nvml_fn_ull)(nvml_device, unsigned long long *);
typedef int (*nvml_fn_int)(nvml_device, int *);
typedef int (*nvml_fn_str)(char *, unsigned);

enum { NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2, NVML_TEMPERATURE_GPU = 0 };

static struct {
    int tried, ok;
    char driver[80]; /* NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE */
    nvml_device dev;
    nvml_fn_clock clock, max_clock;
    nvml_fn_temp temp;
    nvml_fn_uint power, power_limit;
    nvml_fn_ull throttle;
    nvml_fn_int pstate;
} nv;

static void *sym(void *lib, const char *a, const char *b) {
    void *p = dlsym(lib, a);
    return p || !b ? p : dlsym(lib, b);
}

/* The kernel module's version from /proc/driver/nvidia/version ("... Kernel Module  580.159.04  ..."): the
 * driver string when NVML is absent or does not answer. */
static void proc_driver_version(char *buf, size_t n) {
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    if (!f) return;
    char line[512];
    if (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "Kernel Module");
        if (p) {
            p += strlen("Kernel Module");
            p += strspn(p, " \t");
            snprintf(buf, n, "%.*s", (int)strcspn(p, " \t\n"), p);
        }
    }
    fclose(f);
}

/* Open NVML and find the device by PCI bus id (the CUDA device 0), else NVML's device 0. What it finds is
 * kept in nv and copied out by every refresh: NVML is opened once per process, but each qrt_devinfo_get starts
 * from a cleared struct. */
static void nvml_open(const qrt_devinfo *d) {
    nv.tried = 1;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    nvml_fn_void init = (nvml_fn_void)sym(lib, "nvmlInit_v2", "nvmlInit");
    nvml_fn_handle_pci by_pci = (nvml_fn_handle_pci)sym(lib, "nvmlDeviceGetHandleByPciBusId_v2", NULL);
    nvml_fn_handle_index by_index = (nvml_fn_handle_index)sym(lib, "nvmlDeviceGetHandleByIndex_v2", NULL);
    nvml_fn_str driver = (nvml_fn_str)sym(lib, "nvmlSystemGetDriverVersion", NULL);
    nv.clock = (nvml_fn_clock)sym(lib, "nvmlDeviceGetClockInfo", NULL);
    nv.max_clock = (nvml_fn_clock)sym(lib, "nvmlDeviceGetMaxClockInfo", NULL);
    nv.temp = (nvml_fn_temp)sym(lib, "nvmlDeviceGetTemperature", NULL);
    nv.power = (nvml_fn_uint)sym(lib, "nvmlDeviceGetPowerUsage", NULL);
    nv.power_limit = (nvml_fn_uint)sym(lib, "nvmlDeviceGetEnforcedPowerLimit", NULL);
    nv.throttle = (nvml_fn_ull)sym(lib, "nvmlDeviceGetCurrentClocksEventReasons",
                                   "nvmlDeviceGetCurrentClocksThrottleReasons");
    nv.pstate = (nvml_fn_int)sym(lib, "nvmlDeviceGetPerformanceState", NULL);
    if (!init || init() != 0) return;
    if (driver && driver(nv.driver, sizeof nv.driver) != 0) nv.driver[0] = 0;
    if (!nv.clock || !nv.max_clock) return;
    int found = d->pci_bus_id[0] && by_pci && by_pci(d->pci_bus_id, &nv.dev) == 0;
    if (!found) found = by_index && by_index(0, &nv.dev) == 0;
    if (!found) return;
    nv.ok = 1;
}

void qrt_devinfo_refresh(qrt_devinfo *d) {
    if (!nv.tried) {
        nvml_open(d);
        if (!nv.driver[0]) proc_driver_version(nv.driver, sizeof nv.driver);
    }
    snprintf(d->nvml_driver, sizeof d->nvml_driver, "%s", nv.driver);
    d->have_nvml = nv.ok;
    d->temp_c = -1, d->power_w = -1, d->power_limit_w = -1, d->pstate = -1;
    if (!nv.ok) return;
    unsigned v;
    if (nv.clock(nv.dev, NVML_CLOCK_SM, &v) == 0) d->sm_mhz = v;
    if (nv.clock(nv.dev, NVML_CLOCK_MEM, &v) == 0) d->mem_mhz = v;
    if (nv.max_clock(nv.dev, NVML_CLOCK_SM, &v) == 0) d->sm_max_mhz = v;
    if (nv.max_clock(nv.dev, NVML_CLOCK_MEM, &v) == 0) d->mem_max_mhz = v;
    if (nv.temp && nv.temp(nv.dev, NVML_TEMPERATURE_GPU, &v) == 0) d->temp_c = (int)v;
    if (nv.power && nv.power(nv.dev, &v) == 0) d->power_w = v / 1000.0;
    if (nv.power_limit && nv.power_limit(nv.dev, &v) == 0) d->power_limit_w = v / 1000.0;
    unsigned long long r;
    if (nv.throttle && nv.throttle(nv.dev, &r) == 0) d->throttle = r;
    int p;
    if (nv.pstate && nv.pstate(nv.dev, &p) == 0) d->pstate = p;
}

static void cpu_info(qrt_devinfo *d) {
    d->cpu_cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    d->host_mem_gb = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) / 1e9;
    snprintf(d->cpu_name, sizeof d->cpu_name, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon || (strncmp(line, "model name", 10) && strncmp(line, "Model", 5))) continue;
        colon += 1 + (colon[1] == ' ');
        colon[strcspn(colon, "\n")] = 0;
        snprintf(d->cpu_name, sizeof d->cpu_name, "%s", colon);
        break;
    }
    fclose(f);
}

void qrt_devinfo_get(qrt_devinfo *d, int gpu_wanted) {
    memset(d, 0, sizeof *d);
    d->temp_c = -1, d->power_w = -1, d->power_limit_w = -1, d->pstate = -1;
    cpu_info(d);
#ifdef QRT_HAVE_CUDA
    if (gpu_wanted) qrt_devinfo_cuda(d);
#endif
    if (d->gpu) {
        qrt_devinfo_refresh(d);
        d->spec_bw_gbs = qrt_spec_bandwidth(d->name);
    }
}

/* Memory bandwidth from vendor spec sheets, GB/s. Longer (more specific) names first. */
double qrt_spec_bandwidth(const char *name) {
    static const struct {
        const char *match;
        double gbs;
    } table[] = {
        {"H200", 4800},         {"H100 NVL", 3900},      {"H100 PCIe", 2000},  {"H100", 3350},
        {"GH200", 4000},        {"B200", 8000},          {"B300", 8000},       {"A100-SXM4-80GB", 2039},
        {"A100 80GB PCIe", 1935}, {"A100", 1555},        {"L40S", 864},        {"L4", 300},
        {"RTX 5090", 1792},     {"RTX 4090", 1008},      {"RTX 3090", 936},    {"RTX PRO 6000", 1792},
        {"Thor", 273},          {"GB10", 273},           {"DGX Spark", 273},   {"Orin", 205},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strstr(name, table[i].match)) return table[i].gbs;
    return 0;
}

void qrt_devinfo_throttle_str(unsigned long long r, char *buf, int n) {
    static const struct {
        unsigned long long bit;
        const char *what;
    } reasons[] = {{0x1, "gpu idle"},          {0x2, "application clocks setting"}, {0x4, "sw power cap"},
                   {0x8, "hw slowdown"},       {0x10, "sync boost"},                {0x20, "sw thermal slowdown"},
                   {0x40, "hw thermal slowdown"}, {0x80, "hw power brake"},         {0x100, "display clock setting"}};
    int len = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
        if ((r & reasons[i].bit) && len < n)
            len += snprintf(buf + len, (size_t)(n - len), "%s%s", len ? ", " : "", reasons[i].what);
    if (!len) snprintf(buf, (size_t)n, "none");
}

void qrt_devinfo_line(const qrt_devinfo *d, char *buf, int n) {
    if (!d->gpu) {
        snprintf(buf, (size_t)n, "CPU: %s, %d cores, %.1f GB memory", d->cpu_name, d->cpu_cores, d->host_mem_gb);
        return;
    }
    char clocks[160];
    if (d->have_nvml)
        snprintf(clocks, sizeof clocks, "SM %u/%u MHz, mem %u/%u MHz now/max (NVML)", d->sm_mhz, d->sm_max_mhz,
                 d->mem_mhz, d->mem_max_mhz);
    else
        snprintf(clocks, sizeof clocks, "SM max %d MHz, mem %d MHz (CUDA attributes; NVML not available: clocks "
                 "now unknown)", d->clock_max_mhz_cuda, d->mem_clock_mhz_cuda);
    snprintf(buf, (size_t)n, "%s, sm_%d%d, %d SMs, %.0f MB L2, %.1f GB; %s; driver %s (CUDA %d.%d), runtime %d.%d",
             d->name, d->cc_major, d->cc_minor, d->sms, d->l2_mb, d->mem_gb, clocks,
             d->nvml_driver[0] ? d->nvml_driver : "?", d->driver_version / 1000, d->driver_version % 1000 / 10,
             d->runtime_version / 1000, d->runtime_version % 1000 / 10);
}
