/* Writing quantized tensors band by band, shared by `qwenrt quantize` (rows widened from a checkpoint) and
 * `qwenrt synth` (rows drawn at random): nothing larger than QRT_BAND_ROWS rows is held in memory. */
#ifndef QRT_QUANT_WRITER_H
#define QRT_QUANT_WRITER_H
#include <jansson.h>

#include "io/st_writer.h"
#include "util/progress.h"

#define QRT_BAND_ROWS 1024 /* rows produced at once: a multiple of the FP8 block (128) */

/* Rows [r0, r0+n) of an [n, k] weight as f32. Called twice per row for NVFP4 (amax pass, then encode), so it
 * must give the same values each time. */
typedef struct {
    void (*rows)(const void *ctx, int64_t r0, int64_t n, float *out);
    const void *ctx;
    int64_t n, k;
    const char *name;              /* "<p>.weight" */
    size_t progress_bytes_per_elem; /* what one element counts on the progress bar */
} qrt_row_source;

/* Declare <p>.weight_packed/_scale/_global_scale (nvfp4) or <p>.weight + weight_scale_inv (fp8). */
qrt_status qrt_quant_declare(qrt_st_writer *w, const char *weight_name, int64_t N, int64_t K, int nvfp4);
/* buf holds QRT_BAND_ROWS · k floats. */
qrt_status qrt_quant_write_nvfp4(qrt_st_writer *w, const qrt_row_source *src, float *buf, qrt_progress *pr);
qrt_status qrt_quant_write_fp8(qrt_st_writer *w, const qrt_row_source *src, float *buf, qrt_progress *pr);
/* quantization_config objects (new references). */
json_t *qrt_quant_ct_nvfp4_config(int gdn, int lm_head);
json_t *qrt_quant_fp8_config(json_t *modules_to_not_convert /* stolen */);
#endif
