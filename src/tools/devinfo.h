/* What the benchmark tools print about the machine: the device, its clocks and state (NVML, opened with
 * dlopen when present; never linked), the CPU, and the spec-sheet bandwidth of known devices. */
#ifndef QRT_DEVINFO_H
#define QRT_DEVINFO_H
#include <stdint.h>

typedef struct {
    int gpu;                 /* a CUDA device was found and described */
    char name[256];
    int cc_major, cc_minor, sms;
    double mem_gb, mem_free_gb, l2_mb;
    int driver_version, runtime_version; /* CUDA's: 13000 = 13.0 */
    int clock_max_mhz_cuda;  /* SM clock peak per the CUDA attribute (0 when unknown) */
    int mem_clock_mhz_cuda, bus_width_bits;
    char pci_bus_id[32];
    /* NVML (have_nvml = 0 when libnvidia-ml.so.1 is absent or does not know the device) */
    int have_nvml;
    char nvml_driver[80];    /* driver version: NVML's, else /proc/driver/nvidia/version's; "" when unknown */
    unsigned sm_mhz, sm_max_mhz, mem_mhz, mem_max_mhz;
    int temp_c;              /* -1 when unknown */
    double power_w, power_limit_w; /* < 0 when unknown */
    int pstate;              /* -1 when unknown */
    unsigned long long throttle; /* clock event reasons bitmask */
    /* CPU */
    char cpu_name[128];
    int cpu_cores;
    double host_mem_gb;
    /* spec sheet */
    double spec_bw_gbs;      /* 0 when the device is not in the table */
} qrt_devinfo;

/* Fill everything that can be found: the CUDA device when gpu_wanted and one exists, else the CPU only. */
void qrt_devinfo_get(qrt_devinfo *d, int gpu_wanted);
/* Re-read the NVML clocks, temperature, power and throttle reasons (e.g. while a kernel runs). */
void qrt_devinfo_refresh(qrt_devinfo *d);
/* The throttle reasons as words ("sw power cap, hw thermal"), or "none". */
void qrt_devinfo_throttle_str(unsigned long long reasons, char *buf, int n);
/* One line: "NVIDIA H200, sm_90, 132 SMs, SM 1980/1980 MHz, mem 3201/3201 MHz (NVML), driver ..., CUDA 13.0". */
void qrt_devinfo_line(const qrt_devinfo *d, char *buf, int n);
/* Spec-sheet memory bandwidth in GB/s for a device name (0 when unknown). */
double qrt_spec_bandwidth(const char *name);

#ifdef QRT_HAVE_CUDA
void qrt_devinfo_cuda(qrt_devinfo *d); /* devinfo_cuda.c: the CUDA runtime's view of device 0 */
#endif
#endif
