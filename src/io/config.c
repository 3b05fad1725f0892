#include "io/config.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

typedef struct {
    const char *path;   /* file, for messages */
    const char *prefix; /* "text_config." or "" */
    json_t *text;       /* the object holding the text fields */
    json_t *root;
} ctx;

static qrt_status int_field(const ctx *c, const char *key, int required, int def, int lo, int hi, int *out) {
    json_t *v = json_object_get(c->text, key);
    if (!v || json_is_null(v)) {
        if (required)
            return qrt_fail(QRT_ERR_CONFIG, "%s: missing field '%s%s' (an integer in [%d, %d])", c->path, c->prefix,
                            key, lo, hi);
        *out = def;
        return QRT_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return qrt_fail(QRT_ERR_CONFIG, "%s: field '%s%s' must be an integer in [%d, %d]", c->path, c->prefix, key,
                        lo, hi);
    *out = (int)json_integer_value(v);
    return QRT_OK;
}

static qrt_status bool_field(const ctx *c, json_t *obj, const char *key, int def, int *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return QRT_OK;
    }
    if (!json_is_boolean(v)) return qrt_fail(QRT_ERR_CONFIG, "%s: field '%s' must be true or false", c->path, key);
    *out = json_is_true(v);
    return QRT_OK;
}

static qrt_status number(const ctx *c, json_t *v, const char *name, double lo, double hi, double *out) {
    if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < lo ||
        json_number_value(v) > hi)
        return qrt_fail(QRT_ERR_CONFIG, "%s: field '%s' must be a number in [%g, %g]", c->path, name, lo, hi);
    *out = json_number_value(v);
    return QRT_OK;
}

static qrt_status parse_layer_types(const ctx *c, qrt_config *cfg) {
    json_t *lt = json_object_get(c->text, "layer_types");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt) || (int)json_array_size(lt) != cfg->n_layers)
            return qrt_fail(QRT_ERR_CONFIG, "%s: field '%slayer_types' must be a list of %d strings "
                            "(num_hidden_layers)", c->path, c->prefix, cfg->n_layers);
        for (int i = 0; i < cfg->n_layers; i++) {
            const char *s = json_string_value(json_array_get(lt, (size_t)i));
            if (s && strcmp(s, "linear_attention") == 0) cfg->layer_kind[i] = QRT_LAYER_LINEAR;
            else if (s && strcmp(s, "full_attention") == 0) cfg->layer_kind[i] = QRT_LAYER_FULL;
            else
                return qrt_fail(QRT_ERR_CONFIG, "%s: field '%slayer_types[%d]' is '%s'; expected \"linear_attention\" "
                                "or \"full_attention\"", c->path, c->prefix, i, s ? s : "(not a string)");
        }
        return QRT_OK;
    }
    /* transformers' rule when no list is given: layer i is full attention iff (i+1) % interval == 0. */
    int interval = 4;
    QRT_TRY(int_field(c, "full_attention_interval", 0, 4, 1, QRT_MAX_LAYERS, &interval));
    for (int i = 0; i < cfg->n_layers; i++)
        cfg->layer_kind[i] = (i + 1) % interval == 0 ? QRT_LAYER_FULL : QRT_LAYER_LINEAR;
    return QRT_OK;
}

static qrt_status parse_rope(const ctx *c, qrt_config *cfg) {
    json_t *rp = json_object_get(c->text, "rope_parameters");
    json_t *theta = json_object_get(c->text, "rope_theta");
    json_t *factor = json_object_get(c->text, "partial_rotary_factor");
    if (rp && !json_is_null(rp)) {
        if (!json_is_object(rp))
            return qrt_fail(QRT_ERR_CONFIG, "%s: field '%srope_parameters' must be an object", c->path, c->prefix);
        json_t *type = json_object_get(rp, "rope_type");
        if (type && (!json_is_string(type) || strcmp(json_string_value(type), "default") != 0))
            return qrt_fail(QRT_ERR_UNSUPPORTED, "%s: field '%srope_parameters.rope_type' is '%s'; only \"default\" "
                            "RoPE is supported", c->path, c->prefix, json_is_string(type) ? json_string_value(type) : "?");
        if (json_object_get(rp, "rope_theta")) theta = json_object_get(rp, "rope_theta");
        if (json_object_get(rp, "partial_rotary_factor")) factor = json_object_get(rp, "partial_rotary_factor");
    }
    json_t *scaling = json_object_get(c->text, "rope_scaling");
    if (scaling && !json_is_null(scaling)) {
        json_t *type = json_object_get(scaling, "rope_type");
        if (!type) type = json_object_get(scaling, "type");
        if (!json_is_string(type) || strcmp(json_string_value(type), "default") != 0)
            return qrt_fail(QRT_ERR_UNSUPPORTED, "%s: field '%srope_scaling' asks for scaled RoPE; only \"default\" "
                            "RoPE is supported", c->path, c->prefix);
    }
    /* transformers' defaults when absent: rope_theta 10000, partial_rotary_factor 0.25 */
    cfg->rope_theta = 10000.0;
    if (theta) QRT_TRY(number(c, theta, "rope_theta", 1.0, 1e12, &cfg->rope_theta));
    double f = 0.25;
    if (factor) QRT_TRY(number(c, factor, "partial_rotary_factor", 0.0, 1.0, &f));
    /* transformers: dim = int(head_dim * partial_rotary_factor) */
    cfg->rotary_dim = (int)(cfg->head_dim * f);
    if (cfg->rotary_dim < 2 || cfg->rotary_dim % 2)
        return qrt_fail(QRT_ERR_CONFIG, "%s: head_dim %d x partial_rotary_factor %g gives %d rotary dims; need an even "
                        "number >= 2", c->path, cfg->head_dim, f, cfg->rotary_dim);
    return QRT_OK;
}

static qrt_status parse_eos(const ctx *c, qrt_config *cfg) {
    json_t *e = json_object_get(c->text, "eos_token_id");
    if (!e || json_is_null(e)) e = json_object_get(c->root, "eos_token_id");
    cfg->n_eos = 0;
    if (!e || json_is_null(e)) return QRT_OK;
    if (json_is_integer(e)) {
        cfg->eos[cfg->n_eos++] = (int)json_integer_value(e);
    } else if (json_is_array(e)) {
        size_t i;
        json_t *v;
        json_array_foreach(e, i, v) {
            if (!json_is_integer(v)) return qrt_fail(QRT_ERR_CONFIG, "%s: 'eos_token_id' must hold integers", c->path);
            if (cfg->n_eos < QRT_MAX_EOS) cfg->eos[cfg->n_eos++] = (int)json_integer_value(v);
        }
    } else {
        return qrt_fail(QRT_ERR_CONFIG, "%s: 'eos_token_id' must be an integer or a list of integers", c->path);
    }
    for (int i = 0; i < cfg->n_eos; i++)
        if (cfg->eos[i] < 0 || cfg->eos[i] >= cfg->vocab)
            return qrt_fail(QRT_ERR_CONFIG, "%s: eos_token_id %d is outside the vocabulary (%d)", c->path, cfg->eos[i],
                            cfg->vocab);
    return QRT_OK;
}

static qrt_status parse_text(const ctx *c, qrt_config *cfg) {
    QRT_TRY(int_field(c, "vocab_size", 1, 0, 1, 1 << 22, &cfg->vocab));
    QRT_TRY(int_field(c, "hidden_size", 1, 0, 1, 1 << 16, &cfg->hidden));
    QRT_TRY(int_field(c, "intermediate_size", 1, 0, 1, 1 << 18, &cfg->intermediate));
    QRT_TRY(int_field(c, "num_hidden_layers", 1, 0, 1, QRT_MAX_LAYERS, &cfg->n_layers));
    QRT_TRY(int_field(c, "num_attention_heads", 1, 0, 1, 1024, &cfg->n_heads));
    QRT_TRY(int_field(c, "num_key_value_heads", 1, 0, 1, 1024, &cfg->n_kv_heads));
    QRT_TRY(int_field(c, "head_dim", 1, 0, 2, 1024, &cfg->head_dim));
    QRT_TRY(int_field(c, "linear_num_key_heads", 1, 0, 1, 1024, &cfg->gdn_k_heads));
    QRT_TRY(int_field(c, "linear_num_value_heads", 1, 0, 1, 1024, &cfg->gdn_v_heads));
    QRT_TRY(int_field(c, "linear_key_head_dim", 1, 0, 1, 1024, &cfg->gdn_dk));
    QRT_TRY(int_field(c, "linear_value_head_dim", 1, 0, 1, 1024, &cfg->gdn_dv));
    QRT_TRY(int_field(c, "linear_conv_kernel_dim", 1, 0, 1, 16, &cfg->conv_kernel));
    QRT_TRY(int_field(c, "mtp_num_hidden_layers", 0, 0, 0, 1, &cfg->mtp_layers));
    QRT_TRY(int_field(c, "max_position_embeddings", 0, 262144, 1, 1 << 24, &cfg->max_pos));
    if (cfg->n_heads % cfg->n_kv_heads)
        return qrt_fail(QRT_ERR_CONFIG, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                        c->path, cfg->n_heads, cfg->n_kv_heads);
    if (cfg->gdn_v_heads % cfg->gdn_k_heads)
        return qrt_fail(QRT_ERR_CONFIG, "%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d",
                        c->path, cfg->gdn_v_heads, cfg->gdn_k_heads);
    json_t *eps = json_object_get(c->text, "rms_norm_eps");
    double e = 1e-6;
    if (eps) QRT_TRY(number(c, eps, "rms_norm_eps", 0.0, 1.0, &e));
    cfg->rms_eps = (float)e;
    json_t *act = json_object_get(c->text, "hidden_act");
    if (act && (!json_is_string(act) || strcmp(json_string_value(act), "silu") != 0))
        return qrt_fail(QRT_ERR_UNSUPPORTED, "%s: field '%shidden_act' must be \"silu\"", c->path, c->prefix);
    int gate = 1, bias = 0;
    QRT_TRY(bool_field(c, c->text, "attn_output_gate", 1, &gate));
    QRT_TRY(bool_field(c, c->text, "attention_bias", 0, &bias));
    if (!gate || bias)
        return qrt_fail(QRT_ERR_UNSUPPORTED, "%s: attn_output_gate=false or attention_bias=true is not a Qwen3.5 "
                        "layout", c->path);
    /* tie_word_embeddings: the text part's value, else the top level's (both exist in multimodal files). */
    QRT_TRY(bool_field(c, c->root, "tie_word_embeddings", 0, &cfg->tie_embeddings));
    QRT_TRY(bool_field(c, c->text, "tie_word_embeddings", cfg->tie_embeddings, &cfg->tie_embeddings));
    QRT_TRY(parse_layer_types(c, cfg));
    cfg->n_full = 0;
    for (int i = 0; i < cfg->n_layers; i++) cfg->n_full += cfg->layer_kind[i] == QRT_LAYER_FULL;
    QRT_TRY(parse_rope(c, cfg));
    return parse_eos(c, cfg);
}

qrt_status qrt_config_parse(const char *text, size_t len, const char *path, qrt_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return qrt_fail(QRT_ERR_CONFIG, "%s: not valid JSON: %s (line %d, column %d)", path, jerr.text, jerr.line,
                        jerr.column);
    ctx c = {path, "", root, root};
    qrt_status st = QRT_OK;
    const char *mt = json_string_value(json_object_get(root, "model_type"));
    if (!json_is_object(root)) {
        st = qrt_fail(QRT_ERR_CONFIG, "%s: top level is not a JSON object", path);
    } else if (mt && strcmp(mt, "qwen3_5") == 0) {
        c.text = json_object_get(root, "text_config");
        c.prefix = "text_config.";
        cfg->multimodal = 1;
        if (!json_is_object(c.text))
            st = qrt_fail(QRT_ERR_CONFIG, "%s: model_type \"qwen3_5\" needs an object field 'text_config'", path);
        const char *tmt = json_string_value(json_object_get(c.text, "model_type"));
        if (st == QRT_OK && tmt && strcmp(tmt, "qwen3_5_text") != 0)
            st = qrt_fail(QRT_ERR_CONFIG, "%s: 'text_config.model_type' is \"%s\"; expected \"qwen3_5_text\"", path, tmt);
    } else if (!mt || strcmp(mt, "qwen3_5_text") != 0) {
        st = qrt_fail(QRT_ERR_CONFIG, "%s: model_type is %s%s%s; qwenrt runs \"qwen3_5\" (Qwen3.5/3.6, with "
                      "text_config) and \"qwen3_5_text\" checkpoints", path, mt ? "\"" : "", mt ? mt : "missing",
                      mt ? "\"" : "");
    }
    if (st == QRT_OK) {
        snprintf(cfg->model_type, sizeof cfg->model_type, "qwen3_5_text");
        st = parse_text(&c, cfg);
    }
    json_decref(root);
    return st;
}

qrt_status qrt_config_load(const char *dir, qrt_config *cfg) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return qrt_fail(QRT_ERR_IO, "%s: cannot open (is '%s' a Hugging Face checkpoint folder?)", path, dir);
    char *buf = NULL;
    size_t len = 0, cap = 0, got;
    char chunk[65536];
    qrt_status st = QRT_OK;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + got > (16u << 20)) {
            st = qrt_fail(QRT_ERR_CONFIG, "%s: larger than 16 MB; not a config file", path);
            break;
        }
        if (len + got > cap) {
            cap = (len + got) * 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                st = qrt_fail(QRT_ERR_MEMORY, "out of memory reading %s", path);
                break;
            }
            buf = nb;
        }
        memcpy(buf + len, chunk, got);
        len += got;
    }
    fclose(f);
    if (st == QRT_OK) st = qrt_config_parse(buf ? buf : "", len, path, cfg);
    free(buf);
    return st;
}
