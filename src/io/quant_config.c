#include "io/quant_config.h"

#include <jansson.h>
#include <string.h>
#include <sys/stat.h>

const char *qrt_quant_scheme_name(qrt_quant_scheme s) {
    switch (s) {
    case QRT_QUANT_NONE: return "none";
    case QRT_QUANT_CT_NVFP4: return "compressed-tensors nvfp4-pack-quantized";
    case QRT_QUANT_MODELOPT_NVFP4: return "ModelOpt NVFP4";
    case QRT_QUANT_FP8_BLOCK: return "fp8 e4m3 block-128";
    case QRT_QUANT_ANY: return "any (not declared)";
    }
    return "?";
}

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static const char *str_field(json_t *obj, const char *key) { return json_string_value(json_object_get(obj, key)); }

/* compressed-tensors: the top-level `format`, or the format of every config group, must be nvfp4. */
static qrt_status parse_compressed_tensors(json_t *qc, const char *path, qrt_quant_scheme *out) {
    const char *fmt = str_field(qc, "format");
    if (fmt && strcmp(fmt, "nvfp4-pack-quantized") == 0) {
        *out = QRT_QUANT_CT_NVFP4;
        return QRT_OK;
    }
    json_t *groups = json_object_get(qc, "config_groups");
    const char *key;
    json_t *g;
    int nvfp4 = 0, other = 0;
    const char *other_fmt = fmt;
    json_object_foreach(groups, key, g) {
        const char *gf = str_field(g, "format");
        if (gf && strcmp(gf, "nvfp4-pack-quantized") == 0) nvfp4++;
        else if (gf) other++, other_fmt = gf;
    }
    if (nvfp4 && !other && (!fmt || strcmp(fmt, "mixed") == 0)) {
        *out = QRT_QUANT_CT_NVFP4;
        return QRT_OK;
    }
    return qrt_fail(QRT_ERR_UNSUPPORTED, "%s: quantization_config.format is '%s'; qwenrt reads compressed-tensors "
                    "checkpoints only in format 'nvfp4-pack-quantized'", path, other_fmt ? other_fmt : "(missing)");
}

static qrt_status parse_fp8(json_t *qc, const char *path, qrt_quant_scheme *out) {
    const char *fmt = str_field(qc, "fmt");
    if (fmt && strcmp(fmt, "e4m3") != 0)
        return qrt_fail(QRT_ERR_UNSUPPORTED, "%s: quantization_config.fmt is '%s'; expected 'e4m3'", path, fmt);
    json_t *bs = json_object_get(qc, "weight_block_size");
    if (!json_is_array(bs) || json_array_size(bs) != 2 || json_integer_value(json_array_get(bs, 0)) != 128 ||
        json_integer_value(json_array_get(bs, 1)) != 128)
        return qrt_fail(QRT_ERR_UNSUPPORTED, "%s: quantization_config.weight_block_size must be [128, 128] (fp8 "
                        "block-128 is the only fp8 layout qwenrt reads)", path);
    *out = QRT_QUANT_FP8_BLOCK;
    return QRT_OK;
}

/* ModelOpt puts quant_algo either directly in the object or under "quantization". */
static qrt_status parse_modelopt(json_t *obj, const char *path, qrt_quant_scheme *out) {
    json_t *q = json_object_get(obj, "quantization");
    const char *algo = str_field(json_is_object(q) ? q : obj, "quant_algo");
    if (!algo || strcmp(algo, "NVFP4") != 0)
        return qrt_fail(QRT_ERR_UNSUPPORTED, "%s: ModelOpt quant_algo is '%s'; qwenrt reads only 'NVFP4'", path,
                        algo ? algo : "(missing)");
    *out = QRT_QUANT_MODELOPT_NVFP4;
    return QRT_OK;
}

static qrt_status parse_quantization_config(json_t *qc, const char *path, qrt_quant_scheme *out) {
    if (!json_is_object(qc)) return qrt_fail(QRT_ERR_CONFIG, "%s: field 'quantization_config' must be an object", path);
    const char *method = str_field(qc, "quant_method");
    if (!method) return qrt_fail(QRT_ERR_CONFIG, "%s: quantization_config has no string field 'quant_method'", path);
    if (strcmp(method, "compressed-tensors") == 0) return parse_compressed_tensors(qc, path, out);
    if (strcmp(method, "fp8") == 0) return parse_fp8(qc, path, out);
    if (strcmp(method, "modelopt") == 0) return parse_modelopt(qc, path, out);
    return qrt_fail(QRT_ERR_UNSUPPORTED, "%s: quantization_config.quant_method is '%s'; qwenrt reads "
                    "'compressed-tensors' (nvfp4), 'modelopt' (NVFP4) and 'fp8' (block-128)", path, method);
}

static qrt_status load_json(const char *path, json_t **out) {
    json_error_t jerr;
    *out = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!*out) return qrt_fail(QRT_ERR_CONFIG, "%s: not valid JSON: %s (line %d)", path, jerr.text, jerr.line);
    return QRT_OK;
}

qrt_status qrt_quant_config_load(const char *dir, qrt_quant_scheme missing_config_scheme, qrt_quant_decl *out) {
    memset(out, 0, sizeof *out);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    qrt_quant_scheme from_config = missing_config_scheme;
    if (file_exists(path)) {
        json_t *root;
        QRT_TRY(load_json(path, &root));
        json_t *qc = json_object_get(root, "quantization_config");
        if (!qc) qc = json_object_get(json_object_get(root, "text_config"), "quantization_config");
        qrt_status st = QRT_OK;
        from_config = QRT_QUANT_NONE;
        if (qc && !json_is_null(qc)) st = parse_quantization_config(qc, path, &from_config);
        json_decref(root);
        QRT_TRY(st);
        if (from_config != QRT_QUANT_NONE) memcpy(out->source, path, sizeof out->source);
    }
    out->scheme = from_config;
    snprintf(path, sizeof path, "%s/hf_quant_config.json", dir);
    if (!file_exists(path)) return QRT_OK;
    json_t *root;
    QRT_TRY(load_json(path, &root));
    qrt_quant_scheme from_hf = QRT_QUANT_NONE;
    qrt_status st = parse_modelopt(root, path, &from_hf);
    json_decref(root);
    QRT_TRY(st);
    if (from_config != QRT_QUANT_NONE && from_config != QRT_QUANT_ANY && from_config != from_hf)
        return qrt_fail(QRT_ERR_CONFIG, "%s declares %s but %s/config.json declares %s", path,
                        qrt_quant_scheme_name(from_hf), dir, qrt_quant_scheme_name(from_config));
    out->scheme = from_hf;
    memcpy(out->source, path, sizeof out->source);
    return QRT_OK;
}
