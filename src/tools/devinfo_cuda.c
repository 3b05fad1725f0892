/* The CUDA runtime's description of device 0 (built only with -DQRT_CUDA=ON). */
#include <cuda_runtime.h>
#include <stdio.h>

#include "backend/cuda/cuda_backend.h"
#include "tools/devinfo.h"

void qrt_devinfo_cuda(qrt_devinfo *d) {
    if (qrt_cuda_device_count() < 1) return;
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    d->gpu = 1;
    snprintf(d->name, sizeof d->name, "%s", p.name);
    d->cc_major = p.major, d->cc_minor = p.minor, d->sms = p.multiProcessorCount;
    d->mem_gb = p.totalGlobalMem / 1e9;
    d->l2_mb = p.l2CacheSize / 1e6;
    cudaDriverGetVersion(&d->driver_version);
    cudaRuntimeGetVersion(&d->runtime_version);
    int v = 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, 0) == cudaSuccess) d->clock_max_mhz_cuda = v / 1000;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMemoryClockRate, 0) == cudaSuccess) d->mem_clock_mhz_cuda = v / 1000;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrGlobalMemoryBusWidth, 0) == cudaSuccess) d->bus_width_bits = v;
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) d->mem_free_gb = free_b / 1e9;
    cudaDeviceGetPCIBusId(d->pci_bus_id, sizeof d->pci_bus_id, 0);
    cudaGetLastError();
}
