/* Models without checkpoint files, for the benchmark tools (synthetic.c). */
#ifndef QRT_SYNTHETIC_H
#define QRT_SYNTHETIC_H
#include "model/model.h"

/* A model of a preset shape with random weights made in memory (no files): for benchmarks, where weights
 * only need the right shapes, formats and sane magnitudes. preset: "tiny" or "qwen3.6-27b"; format: "bf16",
 * "nvfp4" (every linear NVFP4: attention, MLP, GDN projections, lm_head, MTP; the embedding stays BF16) or
 * "fp8" (FP8 block-128 linears). With mtp, an MTP head. opts as for qrt_model_load. */
qrt_status qrt_model_synthetic(const char *preset, const char *format, int mtp, const qrt_load_opts *opts,
                               qrt_model **out);
/* Fill cfg with a preset's shape; QRT_ERR_ARG naming the presets when preset is unknown. */
qrt_status qrt_config_preset(const char *preset, qrt_config *cfg);
#endif
