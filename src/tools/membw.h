/* Memory bandwidth measurement shared by `qwenrt membw` and `qwenrt doctor`. */
#ifndef QRT_MEMBW_H
#define QRT_MEMBW_H
#include <jansson.h>
#include <stddef.h>

#include "tools/devinfo.h"

#define QRT_MEMBW_MAX_SIZES 16
#define QRT_MEMBW_MAX_SAMPLES 256

typedef struct {
    size_t bytes;
    double copy_gbs;  /* read + write bytes per second of a copy (payload is half) */
    double read_gbs;  /* read-only streaming kernel / loop */
    double write_gbs; /* write-only (memset) */
} qrt_bw_point;

typedef struct {
    double t_s, gbs;               /* end of the window, read bandwidth in it */
    unsigned sm_mhz, mem_mhz;      /* NVML at mid-window (0 when unknown) */
    int temp_c;
    double power_w;
} qrt_bw_sample;

typedef struct {
    int gpu;
    int n_points;
    qrt_bw_point points[QRT_MEMBW_MAX_SIZES];
    size_t sustain_bytes;
    int n_samples;
    qrt_bw_sample samples[QRT_MEMBW_MAX_SAMPLES];
    double sus_min, sus_mean, sus_max, sus_first, sus_last; /* GB/s over the samples */
} qrt_membw_result;

/* Measure copy/read/write at each size, then a sustained read of sustain_bytes for sustain_s seconds in
 * windows of interval_s (sustain_s = 0 skips it). On the GPU when gpu is set (dev describes it). Returns 0, or
 * 1 after printing why to stderr. */
int qrt_membw_measure(int gpu, const size_t *sizes, int n_sizes, size_t sustain_bytes, double sustain_s,
                      double interval_s, qrt_devinfo *dev, qrt_membw_result *r);

/* Read-only bandwidth at one size (GB/s, the same method as qrt_membw_measure's read column): tilebench's
 * peak. Returns 0, or 1 after printing why. */
int qrt_membw_read(int gpu, size_t bytes, double *gbs);

/* JSON of a result and of a device (docs/bench-schema.md), and writing it to a file (1 after a message). */
json_t *qrt_membw_json(const qrt_membw_result *r, const qrt_devinfo *d);
json_t *qrt_devinfo_json(const qrt_devinfo *d);
int qrt_write_json(json_t *j, const char *path);
/* A JSON number, or null for NaN or Inf: json_real refuses those (NULL), and one NULL in a json_pack loses the
 * whole object, so every float a tool writes goes through this. */
json_t *qrt_json_real(double v);
/* --device auto|cpu|cuda → 1 to use the GPU, 0 the CPU, -1 after a message (asked for cuda, none there). */
int qrt_tool_pick_gpu(const char *tool, const char *device);

#ifdef QRT_HAVE_CUDA
/* membw_cuda.c: one size on the GPU (rotating over a region of fresh memory ≥ 1 GiB so no rep reads L2). */
int qrt_membw_cuda_point(qrt_bw_point *p);
int qrt_membw_cuda_read(size_t bytes, double *gbs);
/* Sustained read; fills r->samples. */
int qrt_membw_cuda_sustained(size_t bytes, double sustain_s, double interval_s, qrt_devinfo *dev,
                             qrt_membw_result *r);
/* The NVFP4 GEMV the autotuner picks for the 27B lm_head shape [248320, 5120] at M = 1, on random weights:
 * its median time and variant name. */
int qrt_membw_cuda_nvfp4_lm_head(double *ms, double *weight_bytes, const char **variant);
#endif
#endif
