/* config.json of a Qwen3.5/3.6 checkpoint, in every form real checkpoints use:
 * - multimodal `qwen3_5` (Qwen3_5ForConditionalGeneration) with the text part under `text_config`;
 * - flat `qwen3_5_text` (Qwen3_5ForCausalLM);
 * - layer kinds from a `layer_types` list (which wins) or `full_attention_interval`;
 * - RoPE from a `rope_parameters` dict or top-level `rope_theta` / `partial_rotary_factor`. */
#ifndef QRT_CONFIG_H
#define QRT_CONFIG_H
#include "util/common.h"

#define QRT_MAX_LAYERS 1024
#define QRT_MAX_EOS 4

typedef enum { QRT_LAYER_LINEAR = 0, QRT_LAYER_FULL = 1 } qrt_layer_kind;

typedef struct {
    char model_type[32];  /* of the text part: "qwen3_5_text" */
    int multimodal;       /* the text part sat under text_config */
    int vocab;            /* V, e.g. 248320 (padded) */
    int hidden;           /* D, e.g. 5120 */
    int intermediate;     /* F, e.g. 17408 */
    int n_layers;         /* L, e.g. 64 */
    qrt_layer_kind layer_kind[QRT_MAX_LAYERS];
    int n_full;           /* layers of kind FULL */
    /* gated full attention */
    int n_heads;          /* Hq, e.g. 24 */
    int n_kv_heads;       /* Hkv, e.g. 4 */
    int head_dim;         /* Dh, e.g. 256 */
    int rotary_dim;       /* R = Dh * partial_rotary_factor, e.g. 64 */
    double rope_theta;    /* e.g. 1e7 */
    /* Gated DeltaNet */
    int gdn_k_heads;      /* Hk, e.g. 16 */
    int gdn_v_heads;      /* Hv, e.g. 48 */
    int gdn_dk;           /* Dk, e.g. 128 */
    int gdn_dv;           /* Dv, e.g. 128 */
    int conv_kernel;      /* Ck, e.g. 4 */
    float rms_eps;        /* e.g. 1e-6 */
    int tie_embeddings;   /* lm_head shares embed_tokens */
    int mtp_layers;       /* mtp_num_hidden_layers, 0 if absent */
    int max_pos;          /* max_position_embeddings */
    int eos[QRT_MAX_EOS]; /* eos_token_id(s), text part first; n_eos of them */
    int n_eos;
} qrt_config;

/* Parse dir/config.json. Every error names the file and the field. */
qrt_status qrt_config_load(const char *dir, qrt_config *cfg);
/* Parse config text held in memory; path is used in messages only. */
qrt_status qrt_config_parse(const char *json_text, size_t len, const char *path, qrt_config *cfg);
#endif
