/* The tensor-name binding of a checkpoint: which stored tensors make each linear (backend/linear.h) and vector. */
#ifndef QRT_WEIGHTS_H
#define QRT_WEIGHTS_H
#include "backend/linear.h"
#include "io/config.h"
#include "io/quant_config.h"
#include "io/safetensors.h"

/* Where a model's tensors come from: the checkpoint's files and the key prefix of its text model. */
typedef struct {
    const char *dir;
    qrt_st_set st;
    const char *prefix;        /* "model.language_model." or "model." */
    qrt_quant_decl quant;      /* what dir's config.json / hf_quant_config.json declare */
    qrt_quant_decl mtp_quant;  /* the same for the MTP sidecar folder (ANY when it has no config.json) */
    int first_mtp_file;        /* index into st.files of the sidecar's mtp.safetensors; -1 when none */
    void **owned;              /* buffers made at load (FP8 scales widened to f32), freed on close */
    int n_owned;
} qrt_checkpoint;

qrt_status qrt_checkpoint_open(qrt_checkpoint *ck, const char *dir);
/* Add mtp_dir/mtp.safetensors (an MTP sidecar, docs/model.md §4) to the checkpoint's tensors. Its tensors'
 * formats are cross-checked against mtp_dir's own config.json when it has one. */
qrt_status qrt_checkpoint_add_mtp(qrt_checkpoint *ck, const char *mtp_dir);
void qrt_checkpoint_close(qrt_checkpoint *ck);
/* Hand buf (malloc'ed) to the checkpoint, which frees it on close; on failure it is freed now. */
qrt_status qrt_checkpoint_keep(qrt_checkpoint *ck, void *buf);
/* Whether the linear full_name ("lm_head.weight") exists in any stored form (float, NVFP4, FP8). */
int qrt_checkpoint_has_linear(const qrt_checkpoint *ck, const char *full_name);

/* Find full_name (a full checkpoint key ending in ".weight") and bind it as a [n, k] linear in whichever
 * form the checkpoint stores it, detected from the tensors present for the prefix <p> = name without ".weight":
 *   <p>.weight_packed                       → NVFP4, compressed-tensors (weight_scale, weight_global_scale)
 *   <p>.weight U8 + <p>.weight_scale_2      → NVFP4, ModelOpt (weight_scale)
 *   <p>.weight F8_E4M3 + <p>.weight_scale_inv → FP8 block-128
 *   <p>.weight BF16/F16/F32                 → float
 * Every shape, dtype and scale is validated, and the format is checked against the declared
 * quantization; errors name the file, the tensor, what was expected and what was found. */
qrt_status qrt_bind_linear_abs(qrt_checkpoint *ck, const char *full_name, int64_t n, int64_t k, qrt_linear *w);
/* Find full_name holding exactly count elements (any shape with that many, e.g. [48] or [640, 1, 4]);
 * write them as f32 to out, adding `add` to each (1 for the zero-centred RMSNorm weights). */
qrt_status qrt_bind_vector_abs(qrt_checkpoint *ck, const char *full_name, int64_t count, float add, float *out);
#endif
