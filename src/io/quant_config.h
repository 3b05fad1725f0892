/* Which weight quantization a checkpoint declares: config.json's `quantization_config` and/or
 * hf_quant_config.json (docs/model.md §4). The tensors themselves say how each linear is stored; this is
 * the cross-check, so a quantized tensor in a checkpoint that declares none (or another scheme) is an error
 * instead of a silent misread. */
#ifndef QRT_QUANT_CONFIG_H
#define QRT_QUANT_CONFIG_H
#include "util/common.h"

typedef enum {
    QRT_QUANT_NONE = 0,      /* no quantization declared: every linear must be a float tensor */
    QRT_QUANT_CT_NVFP4,      /* compressed-tensors, format nvfp4-pack-quantized */
    QRT_QUANT_MODELOPT_NVFP4,/* ModelOpt, quant_algo NVFP4 */
    QRT_QUANT_FP8_BLOCK,     /* quant_method fp8, e4m3, weight_block_size [128, 128] */
    QRT_QUANT_ANY,           /* no config to check against (an MTP sidecar folder without config.json) */
} qrt_quant_scheme;

typedef struct {
    qrt_quant_scheme scheme;
    char source[4096]; /* the file that declared it ("" for NONE), for messages */
} qrt_quant_decl;

const char *qrt_quant_scheme_name(qrt_quant_scheme s);

/* Read dir/config.json (quantization_config at the top level or under text_config) and
 * dir/hf_quant_config.json. A missing config.json gives missing_config_scheme (NONE for a checkpoint,
 * ANY for a sidecar). Unsupported quant methods and disagreeing files are errors naming the file. */
qrt_status qrt_quant_config_load(const char *dir, qrt_quant_scheme missing_config_scheme, qrt_quant_decl *out);
#endif
