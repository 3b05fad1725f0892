/* `qwenrt synth --preset tiny|qwen3.6-27b --format bf16|nvfp4|fp8 [--mtp] OUT`: a random-weight checkpoint of a
 * preset shape (docs/model.md §1), for load and speed tests without downloading weights.
 * Tensors are drawn a band of rows at a time from a per-tensor, per-row seed and streamed to
 * OUT/model.safetensors, so the model is never held in memory. Quantized formats cover the same linears as
 * `qwenrt quantize` by default (MLP and attention q/k/v/o, MTP layer included). */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "io/quant_encode.h"
#include "tools/out_dir.h"
#include "tools/quant_writer.h"
#include "tokenizer/tokenizer.h"
#include "tools/tools.h"
#include "util/mix64.h"

static const char *usage =
    "usage: qwenrt synth --preset tiny|qwen3.6-27b --format bf16|nvfp4|fp8 [--mtp] [--threads N] [--force] OUT\n"
    "\n"
    "Writes a random-weight checkpoint (config.json + model.safetensors) of the preset's shape. OUT is written\n"
    "beside itself and moved into place when complete; a failed run leaves OUT as it was.\n"
    "  tiny          hidden 256, 8 layers (LLLF LLLF), vocab 2048\n"
    "  qwen3.6-27b   hidden 5120, 64 layers, vocab 248320 (~55.6 GB bf16, ~19 GB nvfp4)\n"
    "  --mtp         add the MTP head (mtp.*)\n"
    "  --force       replace an OUT that exists and is not empty (whole: none of its old files remain)\n";

typedef struct {
    int vocab, hidden, inter, layers, heads, kv_heads, head_dim, gk, gv, dk, dv, conv;
    int mrope[3];
    double theta;
    int eos;
} preset;

static const preset preset_tiny = {2048, 256, 512, 8, 6, 2, 64, 2, 6, 64, 64, 4, {3, 3, 2}, 1e7, 2047};
static const preset preset_27b = {248320, 5120, 17408, 64, 24, 4, 256, 16, 48, 128, 128, 4, {11, 11, 10}, 1e7, 248044};

typedef enum { OUT_BF16, OUT_NVFP4, OUT_FP8 } out_format;

/* How a tensor's values are drawn. */
typedef enum { DRAW_NORMAL, DRAW_ONE_PLUS_NORMAL, DRAW_LOG_UNIFORM_1_16 } draw_kind;

typedef struct {
    char name[160];
    int ndim;
    int64_t shape[3];
    draw_kind kind;
    float std;
    int quantize; /* a linear this format quantizes */
    int f32;      /* stored as F32 (A_log, dt_bias) rather than BF16 */
} spec;

static uint64_t name_seed(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Row r of tensor sp: Irwin–Hall (sum of 4 uniforms) approximates N(0, 1) cheaply; values depend only on
 * (name, row, column), so the amax and encode passes of NVFP4 see the same numbers. */
static void draw_row(const spec *sp, int64_t r, int64_t k, float *out) {
    uint64_t s = name_seed(sp->name) ^ ((uint64_t)r * 0xD1B54A32D192ED03ull);
    for (int64_t c = 0; c < k; c++) {
        uint64_t z = qrt_splitmix64(&s);
        float u = 0;
        for (int j = 0; j < 4; j++) u += (float)((z >> (16 * j)) & 0xffff) / 65536.0f;
        float n = (u - 2.0f) * 1.7320508f; /* mean 0, variance 1 */
        switch (sp->kind) {
        case DRAW_NORMAL: out[c] = n * sp->std; break;
        case DRAW_ONE_PLUS_NORMAL: out[c] = 1.0f + n * sp->std; break;
        case DRAW_LOG_UNIFORM_1_16: out[c] = logf(1.0f + 15.0f * (float)(z >> 40) / 16777216.0f); break;
        }
    }
}

static void draw_rows(const void *ctx, int64_t r0, int64_t n, float *out) {
    const spec *sp = ctx;
    const int64_t k = sp->ndim == 1 ? sp->shape[0] : sp->shape[1] * (sp->ndim == 3 ? sp->shape[2] : 1);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; r++) draw_row(sp, r0 + r, k, out + r * k);
}

typedef struct {
    spec *s;
    int n, cap;
} spec_list;

static void add(spec_list *l, const char *name, int ndim, int64_t a, int64_t b, int64_t c, draw_kind kind, float std,
                int quantize) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->s = realloc(l->s, sizeof *l->s * (size_t)l->cap);
        QRT_ASSERT(l->s);
    }
    spec *s = &l->s[l->n++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->ndim = ndim;
    s->shape[0] = a, s->shape[1] = b, s->shape[2] = c;
    s->kind = kind;
    s->std = std;
    s->quantize = quantize;
}

static void add_linear(spec_list *l, const char *name, int64_t n, int64_t k, int quantize) {
    add(l, name, 2, n, k, 0, DRAW_NORMAL, 1.0f / sqrtf((float)k), quantize);
}

/* One decoder layer's tensors under prefix pre ("model.language_model.layers.3." or "mtp.layers.0."). */
static void add_layer(spec_list *l, const preset *p, const char *pre, int full, int q) {
    char n[160];
    const int D = p->hidden;
#define NAME(suffix) (snprintf(n, sizeof n, "%s%s", pre, suffix), n)
    add(l, NAME("input_layernorm.weight"), 1, D, 0, 0, DRAW_NORMAL, 0.1f, 0);
    add(l, NAME("post_attention_layernorm.weight"), 1, D, 0, 0, DRAW_NORMAL, 0.1f, 0);
    add_linear(l, NAME("mlp.gate_proj.weight"), p->inter, D, q);
    add_linear(l, NAME("mlp.up_proj.weight"), p->inter, D, q);
    add_linear(l, NAME("mlp.down_proj.weight"), D, p->inter, q);
    if (full) {
        add_linear(l, NAME("self_attn.q_proj.weight"), (int64_t)p->heads * 2 * p->head_dim, D, q);
        add_linear(l, NAME("self_attn.k_proj.weight"), (int64_t)p->kv_heads * p->head_dim, D, q);
        add_linear(l, NAME("self_attn.v_proj.weight"), (int64_t)p->kv_heads * p->head_dim, D, q);
        add_linear(l, NAME("self_attn.o_proj.weight"), D, (int64_t)p->heads * p->head_dim, q);
        add(l, NAME("self_attn.q_norm.weight"), 1, p->head_dim, 0, 0, DRAW_NORMAL, 0.1f, 0);
        add(l, NAME("self_attn.k_norm.weight"), 1, p->head_dim, 0, 0, DRAW_NORMAL, 0.1f, 0);
    } else {
        const int64_t conv = 2 * (int64_t)p->gk * p->dk + (int64_t)p->gv * p->dv, vdim = (int64_t)p->gv * p->dv;
        add_linear(l, NAME("linear_attn.in_proj_qkv.weight"), conv, D, 0);
        add_linear(l, NAME("linear_attn.in_proj_z.weight"), vdim, D, 0);
        add_linear(l, NAME("linear_attn.in_proj_a.weight"), p->gv, D, 0);
        add_linear(l, NAME("linear_attn.in_proj_b.weight"), p->gv, D, 0);
        add_linear(l, NAME("linear_attn.out_proj.weight"), D, vdim, 0);
        add(l, NAME("linear_attn.conv1d.weight"), 3, conv, 1, p->conv, DRAW_NORMAL, 0.3f, 0);
        add(l, NAME("linear_attn.A_log"), 1, p->gv, 0, 0, DRAW_LOG_UNIFORM_1_16, 0, 0);
        l->s[l->n - 1].f32 = 1;
        add(l, NAME("linear_attn.dt_bias"), 1, p->gv, 0, 0, DRAW_NORMAL, 1.0f, 0);
        l->s[l->n - 1].f32 = 1;
        add(l, NAME("linear_attn.norm.weight"), 1, p->dv, 0, 0, DRAW_ONE_PLUS_NORMAL, 0.1f, 0);
    }
#undef NAME
}

static int is_full(const preset *p, int i) { return (i + 1) % 4 == 0; }

static void build_specs(const preset *p, int quantized, int mtp, spec_list *l) {
    const char *pre = "model.language_model.";
    char n[160];
    snprintf(n, sizeof n, "%sembed_tokens.weight", pre);
    add(l, n, 2, p->vocab, p->hidden, 0, DRAW_NORMAL, 1.0f, 0);
    snprintf(n, sizeof n, "%snorm.weight", pre);
    add(l, n, 1, p->hidden, 0, 0, DRAW_NORMAL, 0.1f, 0);
    add(l, "lm_head.weight", 2, p->vocab, p->hidden, 0, DRAW_NORMAL, 0.1f, 0);
    for (int i = 0; i < p->layers; i++) {
        snprintf(n, sizeof n, "%slayers.%d.", pre, i);
        add_layer(l, p, n, is_full(p, i), quantized);
    }
    if (!mtp) return;
    add_linear(l, "mtp.fc.weight", p->hidden, 2 * (int64_t)p->hidden, 0);
    add(l, "mtp.pre_fc_norm_embedding.weight", 1, p->hidden, 0, 0, DRAW_NORMAL, 0.1f, 0);
    add(l, "mtp.pre_fc_norm_hidden.weight", 1, p->hidden, 0, 0, DRAW_NORMAL, 0.1f, 0);
    add(l, "mtp.norm.weight", 1, p->hidden, 0, 0, DRAW_NORMAL, 0.1f, 0);
    add_layer(l, p, "mtp.layers.0.", 1, quantized);
}

static json_t *config_json(const preset *p, out_format fmt, int mtp) {
    json_t *types = json_array();
    for (int i = 0; i < p->layers; i++)
        json_array_append_new(types, json_string(is_full(p, i) ? "full_attention" : "linear_attention"));
    json_t *rope = json_pack("{s:s, s:f, s:f, s:[i,i,i], s:b}", "rope_type", "default", "rope_theta", p->theta,
                             "partial_rotary_factor", 0.25, "mrope_section", p->mrope[0], p->mrope[1], p->mrope[2],
                             "mrope_interleaved", 1);
    json_t *text = json_object();
    json_object_set_new(text, "model_type", json_string("qwen3_5_text"));
    json_object_set_new(text, "vocab_size", json_integer(p->vocab));
    json_object_set_new(text, "hidden_size", json_integer(p->hidden));
    json_object_set_new(text, "intermediate_size", json_integer(p->inter));
    json_object_set_new(text, "num_hidden_layers", json_integer(p->layers));
    json_object_set_new(text, "layer_types", types);
    json_object_set_new(text, "full_attention_interval", json_integer(4));
    json_object_set_new(text, "num_attention_heads", json_integer(p->heads));
    json_object_set_new(text, "num_key_value_heads", json_integer(p->kv_heads));
    json_object_set_new(text, "head_dim", json_integer(p->head_dim));
    json_object_set_new(text, "attn_output_gate", json_true());
    json_object_set_new(text, "linear_num_key_heads", json_integer(p->gk));
    json_object_set_new(text, "linear_num_value_heads", json_integer(p->gv));
    json_object_set_new(text, "linear_key_head_dim", json_integer(p->dk));
    json_object_set_new(text, "linear_value_head_dim", json_integer(p->dv));
    json_object_set_new(text, "linear_conv_kernel_dim", json_integer(p->conv));
    json_object_set_new(text, "hidden_act", json_string("silu"));
    json_object_set_new(text, "rms_norm_eps", json_real(1e-6));
    json_object_set_new(text, "attention_bias", json_false());
    json_object_set_new(text, "rope_parameters", rope);
    json_object_set_new(text, "max_position_embeddings", json_integer(262144));
    json_object_set_new(text, "tie_word_embeddings", json_false());
    json_object_set_new(text, "mtp_num_hidden_layers", json_integer(mtp ? 1 : 0));
    json_object_set_new(text, "mtp_use_dedicated_embeddings", json_false());
    json_object_set_new(text, "mamba_ssm_dtype", json_string("float32"));
    json_object_set_new(text, "eos_token_id", json_integer(p->eos));
    json_object_set_new(text, "dtype", json_string("bfloat16"));
    json_t *root = json_pack("{s:[s], s:s, s:b, s:o}", "architectures", "Qwen3_5ForConditionalGeneration",
                             "model_type", "qwen3_5", "tie_word_embeddings", 0, "text_config", text);
    if (fmt == OUT_NVFP4) json_object_set_new(root, "quantization_config", qrt_quant_ct_nvfp4_config(0, 0));
    if (fmt == OUT_FP8) {
        json_t *skip = json_array();
        json_array_append_new(skip, json_string("lm_head"));
        json_array_append_new(skip, json_string("re:.*linear_attn.*"));
        json_array_append_new(skip, json_string("mtp.fc"));
        json_object_set_new(root, "quantization_config", qrt_quant_fp8_config(skip));
    }
    return root;
}

static int64_t spec_rows(const spec *s) { return s->ndim == 1 ? 1 : s->shape[0]; }
static int64_t spec_cols(const spec *s) {
    return s->ndim == 1 ? s->shape[0] : s->shape[1] * (s->ndim == 3 ? s->shape[2] : 1);
}

/* A float tensor, band by band: BF16 (or F32 for the GDN scalars). */
static qrt_status write_float(qrt_st_writer *w, const spec *s, float *buf, qrt_progress *pr) {
    const int64_t N = spec_rows(s), K = spec_cols(s);
    const size_t esize = s->f32 ? 4 : 2;
    uint8_t *bytes = malloc((size_t)(QRT_BAND_ROWS * K) * esize);
    if (!bytes) return qrt_fail(QRT_ERR_MEMORY, "out of memory");
    qrt_status st = QRT_OK;
    for (int64_t r0 = 0; r0 < N && st == QRT_OK; r0 += QRT_BAND_ROWS) {
        int64_t n = QRT_MIN(QRT_BAND_ROWS, N - r0);
        draw_rows(s, r0, n, buf);
        for (int64_t i = 0; i < n * K; i++) {
            if (s->f32) memcpy(bytes + 4 * i, &buf[i], 4);
            else {
                uint16_t h = qrt_f32_to_bf16(buf[i]);
                memcpy(bytes + 2 * i, &h, 2);
            }
        }
        st = qrt_stw_write_at(w, s->name, (uint64_t)(r0 * K) * esize, bytes, (uint64_t)(n * K) * esize);
        qrt_progress_add(pr, (uint64_t)(n * K) * 2);
    }
    free(bytes);
    return st;
}

typedef struct {
    int n_tensors;
    int32_t special_base;
    uint64_t params, bytes;
} summary;

/* Every file of the checkpoint, into dir (the temporary folder beside OUT). */
static qrt_status write_checkpoint(const preset *p, out_format fmt, int mtp, const char *dir, summary *sum) {
    spec_list l = {0};
    build_specs(p, fmt != OUT_BF16, mtp, &l);
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    qrt_st_writer w;
    qrt_status st = qrt_stw_open(&w, path);
    if (st != QRT_OK) return free(l.s), st;
    uint64_t params = 0, max_k = 1;
    for (int i = 0; i < l.n && st == QRT_OK; i++) {
        const spec *s = &l.s[i];
        params += (uint64_t)(spec_rows(s) * spec_cols(s));
        max_k = QRT_MAX(max_k, (uint64_t)spec_cols(s));
        if (s->quantize) st = qrt_quant_declare(&w, s->name, s->shape[0], s->shape[1], fmt == OUT_NVFP4);
        else st = qrt_stw_declare(&w, s->name, s->f32 ? QRT_DT_F32 : QRT_DT_BF16, s->ndim, s->shape);
    }
    if (st == QRT_OK) st = qrt_stw_write_header(&w);
    float *buf = malloc(sizeof(float) * QRT_BAND_ROWS * max_k);
    if (!buf && st == QRT_OK) st = qrt_fail(QRT_ERR_MEMORY, "out of memory");
    qrt_progress pr;
    qrt_progress_begin(&pr, "synth", params * 2, 1);
    for (int i = 0; i < l.n && st == QRT_OK; i++) {
        const spec *s = &l.s[i];
        if (!s->quantize) {
            st = write_float(&w, s, buf, &pr);
            continue;
        }
        qrt_row_source src = {draw_rows, s, s->shape[0], s->shape[1], s->name, 2};
        st = fmt == OUT_NVFP4 ? qrt_quant_write_nvfp4(&w, &src, buf, &pr) : qrt_quant_write_fp8(&w, &src, buf, &pr);
    }
    qrt_progress_end(&pr);
    free(buf);
    uint64_t bytes = 0;
    if (st == QRT_OK) st = qrt_stw_close(&w, &bytes);
    else qrt_stw_abort(&w);
    if (st == QRT_OK) {
        json_t *cfg = config_json(p, fmt, mtp);
        snprintf(path, sizeof path, "%s/config.json", dir);
        if (json_dump_file(cfg, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0)
            st = qrt_fail(QRT_ERR_IO, "%s: cannot write", path);
        json_decref(cfg);
    }
    /* a byte-level stand-in tokenizer, so text prompts and the chat template work on synthetic models; the
     * 27B preset puts the special tokens at their real ids */
    int32_t special_base = p->vocab >= 248077 ? 248044 : p->vocab - 33;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (st == QRT_OK) st = qrt_tokenizer_write_bytes_only(path, special_base);
    *sum = (summary){l.n, special_base, params, bytes};
    free(l.s);
    return st;
}

static qrt_status run(const preset *p, out_format fmt, int mtp, const char *out, int force) {
    qrt_dtype_init();
    qrt_out_dir od;
    QRT_TRY(qrt_out_dir_begin(&od, out, NULL, force));
    summary sum;
    qrt_status st = write_checkpoint(p, fmt, mtp, od.tmp, &sum);
    if (st != QRT_OK) return qrt_out_dir_abort(&od), st;
    QRT_TRY(qrt_out_dir_commit(&od));
    printf("wrote %d tensors, %llu parameters, %llu bytes to %s/model.safetensors, and a byte-level "
           "tokenizer.json (special tokens from id %d)\n", sum.n_tensors, (unsigned long long)sum.params,
           (unsigned long long)sum.bytes, out, sum.special_base);
    return QRT_OK;
}

int qrt_tool_synth(int argc, char **argv) {
    const char *preset_name = NULL, *fmt = "bf16", *out = NULL;
    int mtp = 0, force = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return fputs(usage, stdout), 0;
        if (!strcmp(a, "--preset") && v) preset_name = v, i++;
        else if (!strcmp(a, "--format") && v) fmt = v, i++;
        else if (!strcmp(a, "--threads") && v) qrt_cpu_set_threads(atoi(v)), i++;
        else if (!strcmp(a, "--mtp")) mtp = 1;
        else if (!strcmp(a, "--force")) force = 1;
        else if (a[0] == '-') return fprintf(stderr, "qwenrt synth: unknown or incomplete option '%s'\n%s", a, usage), 2;
        else if (!out) out = a;
        else return fprintf(stderr, "qwenrt synth: unexpected argument '%s'\n%s", a, usage), 2;
    }
    if (!preset_name || !out) return fprintf(stderr, "qwenrt synth: need --preset and OUT\n%s", usage), 2;
    const preset *p = !strcmp(preset_name, "tiny") ? &preset_tiny : !strcmp(preset_name, "qwen3.6-27b") ? &preset_27b : NULL;
    if (!p) return fprintf(stderr, "qwenrt synth: --preset is '%s'; expected tiny or qwen3.6-27b\n", preset_name), 2;
    out_format f;
    if (!strcmp(fmt, "bf16")) f = OUT_BF16;
    else if (!strcmp(fmt, "nvfp4")) f = OUT_NVFP4;
    else if (!strcmp(fmt, "fp8")) f = OUT_FP8;
    else return fprintf(stderr, "qwenrt synth: --format is '%s'; expected bf16, nvfp4 or fp8\n", fmt), 2;
    if (run(p, f, mtp, out, force) != QRT_OK) {
        fprintf(stderr, "qwenrt synth: %s\n", qrt_last_error());
        return 1;
    }
    return 0;
}
