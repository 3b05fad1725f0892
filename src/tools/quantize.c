/* `qwenrt quantize IN OUT --format nvfp4|fp8 [--include gdn,lm_head]`: a float checkpoint → a quantized one
 * that qwenrt (and compressed-tensors / transformers' fine-grained FP8) read.
 *   nvfp4: compressed-tensors nvfp4-pack-quantized (weight_packed, weight_scale, weight_global_scale)
 *   fp8:   FP8 e4m3 block-128 (weight F8_E4M3, weight_scale_inv F32)
 * By default the MLP and attention q/k/v/o linears (main layers and the MTP layer) are quantized; the
 * Gated DeltaNet projections (in_proj_qkv, in_proj_z, out_proj) and lm_head only with --include. Embeddings,
 * norms, conv, in_proj_a/b, mtp.fc and vision tensors are copied as they are. Tensors stream through a
 * band of rows at a time, so memory stays small whatever the model size. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "io/quant_config.h"
#include "io/quant_encode.h"
#include "io/safetensors.h"
#include "io/st_writer.h"
#include "tools/out_dir.h"
#include "tools/quant_writer.h"
#include "tools/tools.h"
#include "util/progress.h"

static const char *usage =
    "usage: qwenrt quantize IN OUT --format nvfp4|fp8 [--include gdn,lm_head] [--threads N] [--force]\n"
    "\n"
    "Quantizes the float checkpoint folder IN into OUT (created; config.json gets a quantization_config,\n"
    "tokenizer files are copied). Quantized by default: mlp.{gate,up,down}_proj and self_attn.{q,k,v,o}_proj.\n"
    "OUT is written beside itself and moved into place when complete; a failed run leaves OUT as it was.\n"
    "OUT must not be IN or lie inside it.\n"
    "  --format nvfp4   compressed-tensors nvfp4-pack-quantized (4-bit E2M1, e4m3 scale per 16, global scale)\n"
    "  --format fp8     e4m3 with one scale per 128x128 block (quant_method fp8, weight_scale_inv)\n"
    "  --include LIST   also quantize: gdn (linear_attn in_proj_qkv, in_proj_z, out_proj), lm_head\n"
    "  --force          replace an OUT that exists and is not empty (whole: none of its old files remain)\n";

typedef enum { FMT_NVFP4, FMT_FP8 } out_format;

typedef struct {
    const char *in, *out; /* as given */
    const char *dir;      /* where the files are written: the temporary folder beside OUT */
    out_format fmt;
    int gdn, lm_head, force;
} plan;

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Whether tensor name is a linear weight this run quantizes (shape and dtype are checked separately). */
static int is_target(const plan *p, const char *name) {
    static const char *const mlp_attn[] = {".mlp.gate_proj.weight",   ".mlp.up_proj.weight",     ".mlp.down_proj.weight",
                                           ".self_attn.q_proj.weight", ".self_attn.k_proj.weight", ".self_attn.v_proj.weight",
                                           ".self_attn.o_proj.weight"};
    static const char *const gdn[] = {".linear_attn.in_proj_qkv.weight", ".linear_attn.in_proj_z.weight",
                                      ".linear_attn.out_proj.weight"};
    if (strstr(name, "visual.")) return 0;
    if (strcmp(name, "lm_head.weight") == 0) return p->lm_head;
    for (size_t i = 0; i < sizeof mlp_attn / sizeof mlp_attn[0]; i++)
        if (ends_with(name, mlp_attn[i])) return 1;
    for (size_t i = 0; i < sizeof gdn / sizeof gdn[0]; i++)
        if (ends_with(name, gdn[i])) return p->gdn;
    return 0;
}

static int is_float(qrt_dtype dt) { return dt == QRT_DT_F32 || dt == QRT_DT_BF16 || dt == QRT_DT_F16; }

static int quantizes(const plan *p, const qrt_st_tensor *t) {
    if (!is_target(p, t->name) || !is_float(t->dtype) || t->ndim != 2) return 0;
    if (p->fmt == FMT_NVFP4 && t->shape[1] % 16 != 0) {
        fprintf(stderr, "qwenrt quantize: keeping '%s' unquantized: its %lld input features are not a multiple of "
                "16\n", t->name, (long long)t->shape[1]);
        return 0;
    }
    return 1;
}

/* rows [r0, r0+n) of a float tensor, widened to f32 */
static void widen_rows(const qrt_st_tensor *t, int64_t r0, int64_t n, float *out) {
    const int64_t K = t->shape[1];
    const size_t count = (size_t)(n * K), at = (size_t)(r0 * K);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; i++) {
        uint16_t h;
        switch (t->dtype) {
        case QRT_DT_F32: memcpy(&out[i], t->data + 4 * (at + i), 4); break;
        case QRT_DT_BF16: memcpy(&h, t->data + 2 * (at + i), 2), out[i] = qrt_bf16_to_f32(h); break;
        default: memcpy(&h, t->data + 2 * (at + i), 2), out[i] = qrt_f16_to_f32(h); break;
        }
    }
}

static void tensor_rows(const void *ctx, int64_t r0, int64_t n, float *out) { widen_rows(ctx, r0, n, out); }

static void prefix_of(const char *name, char *p, size_t n) {
    snprintf(p, n, "%.*s", (int)(strlen(name) - strlen(".weight")), name);
}

qrt_status qrt_quant_write_nvfp4(qrt_st_writer *w, const qrt_row_source *src, float *buf, qrt_progress *pr) {
    const int64_t N = src->n, K = src->k;
    char p[512], name[600];
    prefix_of(src->name, p, sizeof p);
    float amax = 0;
    for (int64_t r0 = 0; r0 < N; r0 += QRT_BAND_ROWS) {
        int64_t n = QRT_MIN(QRT_BAND_ROWS, N - r0);
        src->rows(src->ctx, r0, n, buf);
        for (int64_t i = 0; i < n * K; i++) amax = fmaxf(amax, fabsf(buf[i]));
    }
    const float global = qrt_nvfp4_global_scale(amax);
    snprintf(name, sizeof name, "%s.weight_global_scale", p);
    QRT_TRY(qrt_stw_write(w, name, &global, 4));
    uint8_t *codes = malloc((size_t)(QRT_BAND_ROWS * K / 2)), *scales = malloc((size_t)(QRT_BAND_ROWS * K / 16));
    qrt_status st = codes && scales ? QRT_OK : qrt_fail(QRT_ERR_MEMORY, "out of memory");
    for (int64_t r0 = 0; r0 < N && st == QRT_OK; r0 += QRT_BAND_ROWS) {
        int64_t n = QRT_MIN(QRT_BAND_ROWS, N - r0);
        src->rows(src->ctx, r0, n, buf);
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < n; r++)
            qrt_nvfp4_quantize_row(buf + r * K, K, global, codes + r * K / 2, scales + r * K / 16);
        snprintf(name, sizeof name, "%s.weight_packed", p);
        st = qrt_stw_write_at(w, name, (uint64_t)(r0 * K / 2), codes, (uint64_t)(n * K / 2));
        snprintf(name, sizeof name, "%s.weight_scale", p);
        if (st == QRT_OK) st = qrt_stw_write_at(w, name, (uint64_t)(r0 * K / 16), scales, (uint64_t)(n * K / 16));
        qrt_progress_add(pr, (uint64_t)n * (uint64_t)K * src->progress_bytes_per_elem);
    }
    free(codes);
    free(scales);
    return st;
}

qrt_status qrt_quant_write_fp8(qrt_st_writer *w, const qrt_row_source *src, float *buf, qrt_progress *pr) {
    const int64_t N = src->n, K = src->k, KB = QRT_CEIL_DIV(K, 128);
    char p[512], codes_name[600], scales_name[600];
    prefix_of(src->name, p, sizeof p);
    snprintf(codes_name, sizeof codes_name, "%s.weight", p);
    snprintf(scales_name, sizeof scales_name, "%s.weight_scale_inv", p);
    uint8_t *codes = malloc((size_t)(QRT_BAND_ROWS * K));
    float *scales = malloc(sizeof(float) * (size_t)(QRT_BAND_ROWS / 128 * KB));
    qrt_status st = codes && scales ? QRT_OK : qrt_fail(QRT_ERR_MEMORY, "out of memory");
    for (int64_t r0 = 0; r0 < N && st == QRT_OK; r0 += QRT_BAND_ROWS) {
        int64_t n = QRT_MIN(QRT_BAND_ROWS, N - r0), bands = QRT_CEIL_DIV(n, 128);
        src->rows(src->ctx, r0, n, buf);
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < bands; b++)
            qrt_fp8_quantize_band(buf + b * 128 * K, (int)QRT_MIN(128, n - b * 128), K, codes + b * 128 * K,
                                  scales + b * KB);
        st = qrt_stw_write_at(w, codes_name, (uint64_t)(r0 * K), codes, (uint64_t)(n * K));
        if (st == QRT_OK)
            st = qrt_stw_write_at(w, scales_name, (uint64_t)(r0 / 128 * KB) * 4, scales, (uint64_t)(bands * KB) * 4);
        qrt_progress_add(pr, (uint64_t)n * (uint64_t)K * src->progress_bytes_per_elem);
    }
    free(codes);
    free(scales);
    return st;
}

qrt_status qrt_quant_declare(qrt_st_writer *w, const char *weight_name, int64_t N, int64_t K, int nvfp4) {
    char pre[512], name[600];
    prefix_of(weight_name, pre, sizeof pre);
    if (nvfp4) {
        const int64_t packed[2] = {N, K / 2}, scales[2] = {N, K / 16}, one[1] = {1};
        snprintf(name, sizeof name, "%s.weight_packed", pre);
        QRT_TRY(qrt_stw_declare(w, name, QRT_DT_U8, 2, packed));
        snprintf(name, sizeof name, "%s.weight_scale", pre);
        QRT_TRY(qrt_stw_declare(w, name, QRT_DT_F8_E4M3, 2, scales));
        snprintf(name, sizeof name, "%s.weight_global_scale", pre);
        return qrt_stw_declare(w, name, QRT_DT_F32, 1, one);
    }
    const int64_t shape[2] = {N, K}, scales[2] = {QRT_CEIL_DIV(N, 128), QRT_CEIL_DIV(K, 128)};
    QRT_TRY(qrt_stw_declare(w, weight_name, QRT_DT_F8_E4M3, 2, shape));
    snprintf(name, sizeof name, "%s.weight_scale_inv", pre);
    return qrt_stw_declare(w, name, QRT_DT_F32, 2, scales);
}

static qrt_status declare_outputs(const plan *p, qrt_st_writer *w, const qrt_st_set *st) {
    for (int i = 0; i < st->n_tensors; i++) {
        const qrt_st_tensor *t = &st->tensors[i];
        if (!quantizes(p, t)) {
            QRT_TRY(qrt_stw_declare(w, t->name, t->dtype, t->ndim, t->shape));
            continue;
        }
        QRT_TRY(qrt_quant_declare(w, t->name, t->shape[0], t->shape[1], p->fmt == FMT_NVFP4));
    }
    return QRT_OK;
}

/* The quantization_config block, in the form compressed-tensors / transformers' fp8 loader write it. */
json_t *qrt_quant_ct_nvfp4_config(int gdn, int lm_head) {
    json_t *qc = json_object();
    json_t *targets = json_array();
    json_array_append_new(targets, json_string("re:.*mlp\\.(gate|up|down)_proj$"));
    json_array_append_new(targets, json_string("re:.*self_attn\\.(q|k|v|o)_proj$"));
    if (gdn) json_array_append_new(targets, json_string("re:.*linear_attn\\.(in_proj_qkv|in_proj_z|out_proj)$"));
    if (lm_head) json_array_append_new(targets, json_string("re:^lm_head$"));
    json_t *weights = json_pack("{s:i, s:s, s:b, s:i, s:s, s:b, s:s}", "num_bits", 4, "type", "float", "symmetric",
                                1, "group_size", 16, "strategy", "tensor_group", "dynamic", 0, "scale_dtype",
                                "torch.float8_e4m3fn");
    json_t *group = json_pack("{s:o, s:o, s:n, s:n, s:s}", "targets", targets, "weights", weights,
                              "input_activations", "output_activations", "format", "nvfp4-pack-quantized");
    json_object_set_new(qc, "config_groups", json_pack("{s:o}", "group_0", group));
    json_object_set_new(qc, "quant_method", json_string("compressed-tensors"));
    json_object_set_new(qc, "kv_cache_scheme", json_null());
    json_object_set_new(qc, "format", json_string("nvfp4-pack-quantized"));
    json_object_set_new(qc, "quantization_status", json_string("compressed"));
    json_object_set_new(qc, "global_compression_ratio", json_null());
    json_object_set_new(qc, "ignore", json_array());
    return qc;
}

json_t *qrt_quant_fp8_config(json_t *modules_to_not_convert) {
    json_t *qc = json_object();
    json_object_set_new(qc, "quant_method", json_string("fp8"));
    json_object_set_new(qc, "fmt", json_string("e4m3"));
    json_object_set_new(qc, "activation_scheme", json_string("dynamic"));
    json_object_set_new(qc, "weight_block_size", json_pack("[i, i]", 128, 128));
    json_object_set_new(qc, "modules_to_not_convert", modules_to_not_convert);
    return qc;
}

static json_t *quantization_config(const plan *p, const qrt_st_set *st) {
    if (p->fmt == FMT_NVFP4) return qrt_quant_ct_nvfp4_config(p->gdn, p->lm_head);
    json_t *skip = json_array();
    for (int i = 0; i < st->n_tensors; i++) {
        const qrt_st_tensor *t = &st->tensors[i];
        if (t->ndim == 2 && ends_with(t->name, ".weight") && !quantizes(p, t) && !strstr(t->name, "embed_tokens") &&
            !strstr(t->name, "visual.")) {
            char pre[512];
            prefix_of(t->name, pre, sizeof pre);
            json_array_append_new(skip, json_string(pre));
        }
    }
    return qrt_quant_fp8_config(skip);
}

static qrt_status write_config(const plan *p, const qrt_st_set *st) {
    char in[4096], out[4096];
    snprintf(in, sizeof in, "%s/config.json", p->in);
    snprintf(out, sizeof out, "%s/config.json", p->dir);
    json_error_t jerr;
    json_t *root = json_load_file(in, JSON_PRESERVE_ORDER, &jerr);
    if (!root) return qrt_fail(QRT_ERR_CONFIG, "%s: not valid JSON: %s (line %d)", in, jerr.text, jerr.line);
    json_object_set_new(root, "quantization_config", quantization_config(p, st));
    int rc = json_dump_file(root, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    return rc == 0 ? QRT_OK : qrt_fail(QRT_ERR_IO, "%s: cannot write", out);
}

/* Files a checkpoint folder carries besides weights and config; copied when present. */
static qrt_status copy_side_files(const char *in, const char *out) {
    static const char *const names[] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json",
                                        "special_tokens_map.json", "chat_template.jinja", "vocab.json", "merges.txt",
                                        "preprocessor_config.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char src[4096], dst[4096];
        snprintf(src, sizeof src, "%s/%s", in, names[i]);
        snprintf(dst, sizeof dst, "%s/%s", out, names[i]);
        FILE *f = fopen(src, "rb");
        if (!f) continue;
        FILE *g = fopen(dst, "wb");
        if (!g) {
            fclose(f);
            return qrt_fail(QRT_ERR_IO, "%s: cannot create: %s", dst, strerror(errno));
        }
        char buf[65536];
        size_t n;
        int ok = 1;
        while (ok && (n = fread(buf, 1, sizeof buf, f)) > 0) ok = fwrite(buf, 1, n, g) == n;
        /* a short copy would be moved into place as if complete, so read and write errors both fail */
        ok = ok && !ferror(f);
        fclose(f);
        if (fclose(g) != 0 || !ok)
            return qrt_fail(QRT_ERR_IO, "%s: copying %s failed: %s", dst, src, strerror(errno));
    }
    return QRT_OK;
}

typedef struct {
    int n_quant, n_tensors;
    uint64_t in_bytes, out_bytes;
} summary;

/* Every file of the quantized checkpoint, into p->dir. */
static qrt_status write_checkpoint(const plan *p, summary *sum) {
    qrt_st_set st;
    QRT_TRY(qrt_st_open_dir(&st, p->in));
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", p->dir);
    qrt_st_writer w;
    qrt_status s = qrt_stw_open(&w, path);
    if (s != QRT_OK) return qrt_st_close(&st), s;
    s = declare_outputs(p, &w, &st);
    if (s == QRT_OK) s = qrt_stw_write_header(&w);
    uint64_t in_bytes = 0, max_k = 0;
    int n_quant = 0;
    for (int i = 0; i < st.n_tensors; i++) {
        in_bytes += st.tensors[i].nbytes;
        if (st.tensors[i].ndim == 2) max_k = QRT_MAX(max_k, (uint64_t)st.tensors[i].shape[1]);
    }
    float *buf = malloc(sizeof(float) * QRT_BAND_ROWS * (max_k ? max_k : 1));
    if (!buf && s == QRT_OK) s = qrt_fail(QRT_ERR_MEMORY, "out of memory");
    qrt_progress pr;
    qrt_progress_begin(&pr, "quantize", in_bytes, 1);
    for (int i = 0; i < st.n_tensors && s == QRT_OK; i++) {
        const qrt_st_tensor *t = &st.tensors[i];
        if (!quantizes(p, t)) {
            s = qrt_stw_write(&w, t->name, t->data, t->nbytes);
            qrt_progress_add(&pr, t->nbytes);
            continue;
        }
        n_quant++;
        qrt_row_source src = {tensor_rows, t, t->shape[0], t->shape[1], t->name, qrt_dtype_size(t->dtype)};
        s = p->fmt == FMT_NVFP4 ? qrt_quant_write_nvfp4(&w, &src, buf, &pr) : qrt_quant_write_fp8(&w, &src, buf, &pr);
    }
    qrt_progress_end(&pr);
    free(buf);
    uint64_t out_bytes = 0;
    if (s == QRT_OK) s = qrt_stw_close(&w, &out_bytes);
    else qrt_stw_abort(&w);
    if (s == QRT_OK) s = write_config(p, &st);
    if (s == QRT_OK) s = copy_side_files(p->in, p->dir);
    *sum = (summary){n_quant, st.n_tensors, in_bytes, out_bytes};
    qrt_st_close(&st);
    return s;
}

static qrt_status run(plan *p) {
    qrt_dtype_init();
    qrt_quant_decl decl;
    QRT_TRY(qrt_quant_config_load(p->in, QRT_QUANT_NONE, &decl));
    if (decl.scheme != QRT_QUANT_NONE)
        return qrt_fail(QRT_ERR_ARG, "%s declares %s; quantize reads only float (BF16/F16/F32) checkpoints",
                        decl.source, qrt_quant_scheme_name(decl.scheme));
    qrt_out_dir od;
    QRT_TRY(qrt_out_dir_begin(&od, p->out, p->in, p->force));
    p->dir = od.tmp;
    summary sum;
    qrt_status s = write_checkpoint(p, &sum);
    if (s != QRT_OK) return qrt_out_dir_abort(&od), s;
    QRT_TRY(qrt_out_dir_commit(&od));
    printf("quantized %d of %d tensors to %s; read %llu bytes, wrote %llu bytes (%s/model.safetensors)\n",
           sum.n_quant, sum.n_tensors, p->fmt == FMT_NVFP4 ? "nvfp4" : "fp8", (unsigned long long)sum.in_bytes,
           (unsigned long long)sum.out_bytes, p->out);
    return QRT_OK;
}

/* "gdn,lm_head" */
static int parse_include(const char *list, plan *p) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (strcmp(tok, "gdn") == 0) p->gdn = 1;
        else if (strcmp(tok, "lm_head") == 0) p->lm_head = 1;
        else {
            fprintf(stderr, "qwenrt quantize: --include: unknown part '%s'; expected gdn and/or lm_head\n", tok);
            return 0;
        }
    }
    return 1;
}

int qrt_tool_quantize(int argc, char **argv) {
    plan p = {0};
    const char *fmt = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return fputs(usage, stdout), 0;
        if (!strcmp(a, "--format") && v) fmt = v, i++;
        else if (!strcmp(a, "--include") && v) {
            if (!parse_include(v, &p)) return 2;
            i++;
        } else if (!strcmp(a, "--threads") && v) qrt_cpu_set_threads(atoi(v)), i++;
        else if (!strcmp(a, "--force")) p.force = 1;
        else if (a[0] == '-') return fprintf(stderr, "qwenrt quantize: unknown or incomplete option '%s'\n%s", a, usage), 2;
        else if (!p.in) p.in = a;
        else if (!p.out) p.out = a;
        else return fprintf(stderr, "qwenrt quantize: unexpected argument '%s'\n%s", a, usage), 2;
    }
    if (!p.in || !p.out || !fmt) return fprintf(stderr, "qwenrt quantize: need IN, OUT and --format\n%s", usage), 2;
    if (!strcmp(fmt, "nvfp4")) p.fmt = FMT_NVFP4;
    else if (!strcmp(fmt, "fp8")) p.fmt = FMT_FP8;
    else return fprintf(stderr, "qwenrt quantize: --format is '%s'; expected nvfp4 or fp8\n", fmt), 2;
    if (run(&p) != QRT_OK) {
        fprintf(stderr, "qwenrt quantize: %s\n", qrt_last_error());
        return 1;
    }
    return 0;
}
