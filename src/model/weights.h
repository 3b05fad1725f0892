/* A linear layer's weight as the checkpoint stores it, and the tensor-name binding of a checkpoint. */
#ifndef QRT_WEIGHTS_H
#define QRT_WEIGHTS_H
#include "io/config.h"
#include "io/quant_config.h"
#include "io/safetensors.h"

typedef enum {
    QRT_WF_F32 = 0,
    QRT_WF_F16,
    QRT_WF_BF16,
    QRT_WF_NVFP4, /* data: u8 [N][K/2], element 2j in the low nibble (E2M1 codes); scales: e4m3 [N][K/16];
                   * W = e2m1 · f32(scale) · scale2 (compressed-tensors: scale2 = 1 / weight_global_scale;
                   * ModelOpt: scale2 = weight_scale_2) */
    QRT_WF_FP8B,  /* data: e4m3 [N][K]; scales: f32 [ceil(N/128)][ceil(K/128)] (weight_scale_inv, widened
                   * at load); W = f32(e4m3) · scale[r/128][c/128] */
    QRT_WF_COUNT
} qrt_wformat;

const char *qrt_wformat_name(qrt_wformat f);

/* y[T][N] = x[T][K] · Wᵀ, W row-major [N][K] as PyTorch stores it. */
typedef struct {
    qrt_wformat fmt;
    int64_t n, k;     /* N output features (rows), K input features */
    const void *data; /* [N][K] elements of fmt, in the checkpoint's mapping (or the backend's copy) */
    const void *scales; /* quantized formats only: see qrt_wformat */
    float scale2;       /* NVFP4 tensor-level multiplier */
    const char *name;   /* checkpoint tensor name, for messages */
} qrt_linear;

/* Bytes a matmul reads from this weight (what one decoded token costs): codes + scales for the quantized
 * formats (FP8 scales counted as the f32 the engine reads). */
uint64_t qrt_linear_bytes(const qrt_linear *w);

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
