/* `qwenrt inspect DIR`: the config as qwenrt understood it, every tensor (dtype, shape, bytes), and the
 * bytes read per decoded token. Lists the tensors even when the model itself fails to load, so it is the
 * first thing to run on a checkpoint that will not load. `qwenrt inspect --check DIR` scans every value of
 * every float tensor for NaN and Inf instead (what to run when generation reports non-finite logits). */
#include <string.h>

#include "model/model.h"
#include "tools/tools.h"

static void print_config(const qrt_config *c, FILE *out) {
    fprintf(out, "config: %s%s\n", c->model_type, c->multimodal ? " (text_config of a multimodal qwen3_5)" : "");
    fprintf(out, "  vocab %d  hidden %d  intermediate %d  layers %d (%d full attention, %d Gated DeltaNet)\n", c->vocab,
            c->hidden, c->intermediate, c->n_layers, c->n_full, c->n_layers - c->n_full);
    fprintf(out, "  layer kinds: ");
    for (int i = 0; i < c->n_layers; i++) fputc(c->layer_kind[i] == QRT_LAYER_FULL ? 'F' : 'L', out);
    fprintf(out, "\n  attention: %d heads, %d kv heads, head_dim %d, rotary dims %d, rope_theta %g\n", c->n_heads,
            c->n_kv_heads, c->head_dim, c->rotary_dim, c->rope_theta);
    fprintf(out, "  gated deltanet: %d key heads x %d, %d value heads x %d, conv kernel %d\n", c->gdn_k_heads,
            c->gdn_dk, c->gdn_v_heads, c->gdn_dv, c->conv_kernel);
    fprintf(out, "  rms_eps %g  tie_embeddings %d  mtp layers %d  eos", c->rms_eps, c->tie_embeddings, c->mtp_layers);
    for (int i = 0; i < c->n_eos; i++) fprintf(out, " %d", c->eos[i]);
    fprintf(out, "\n");
}

/* Every linear's stored format, one line per layer, then count and bytes per format. */
static void print_linear_formats(const qrt_model *m, FILE *out) {
    uint64_t bytes[QRT_WF_COUNT] = {0};
    int count[QRT_WF_COUNT] = {0};
    fprintf(out, "\nlinear formats (quantization declared: %s%s%s):\n", qrt_quant_scheme_name(m->ck.quant.scheme),
            m->ck.quant.source[0] ? " by " : "", m->ck.quant.source);
    for (int i = 0; i < m->cfg.n_layers; i++) {
        const qrt_layer *l = &m->layers[i];
        const struct {
            const char *name;
            const qrt_linear *w;
        } lin[] = {{"in_qkv", &l->in_qkv}, {"in_z", &l->in_z}, {"in_a", &l->in_a}, {"in_b", &l->in_b},
                   {"out", &l->out},       {"q", &l->q},       {"k", &l->k},       {"v", &l->v},
                   {"o", &l->o},           {"gate", &l->gate}, {"up", &l->up},     {"down", &l->down}};
        fprintf(out, "  layer %3d %c:", i, m->cfg.layer_kind[i] == QRT_LAYER_FULL ? 'F' : 'L');
        for (size_t j = 0; j < sizeof lin / sizeof lin[0]; j++) {
            if (!lin[j].w->data) continue;
            fprintf(out, " %s %s", lin[j].name, qrt_wformat_name(lin[j].w->fmt));
            bytes[lin[j].w->fmt] += qrt_linear_bytes(lin[j].w);
            count[lin[j].w->fmt]++;
        }
        fprintf(out, "\n");
    }
    fprintf(out, "  embed_tokens %s, lm_head %s%s\n", qrt_wformat_name(m->embed.fmt), qrt_wformat_name(m->lm_head.fmt),
            m->lm_head.data == m->embed.data ? " (tied)" : "");
    for (int f = 0; f < QRT_WF_COUNT; f++)
        if (count[f]) fprintf(out, "  %-13s %4d layer linears, %14llu bytes\n", qrt_wformat_name((qrt_wformat)f), count[f],
                              (unsigned long long)bytes[f]);
}

/* Elements of t that are NaN or ±Inf (exponent all ones; e4m3fn has no infinities and 0x7f/0xff are its NaNs). Integer
 * dtypes and U8 (NVFP4's e2m1 codes, which have no NaN) hold none; NVFP4 block scales are F8_E4M3 and are scanned.
 * *first gets the first bad element's index. */
static uint64_t count_nonfinite(const qrt_st_tensor *t, uint64_t *first) {
    const uint64_t n = t->nbytes / qrt_dtype_size(t->dtype);
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; i++) {
        int nf = 0;
        switch (t->dtype) {
        case QRT_DT_F64: {
            uint64_t u;
            memcpy(&u, t->data + 8 * i, 8);
            nf = (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
            break;
        }
        case QRT_DT_F32: {
            uint32_t u;
            memcpy(&u, t->data + 4 * i, 4);
            nf = (u & 0x7f800000u) == 0x7f800000u;
            break;
        }
        case QRT_DT_F16:
        case QRT_DT_BF16: {
            uint16_t h;
            memcpy(&h, t->data + 2 * i, 2);
            const uint16_t exp = t->dtype == QRT_DT_F16 ? 0x7c00 : 0x7f80;
            nf = (h & exp) == exp;
            break;
        }
        case QRT_DT_F8_E4M3: nf = (t->data[i] & 0x7f) == 0x7f; break;
        default: return 0;
        }
        if (nf && !bad++) *first = i;
    }
    return bad;
}

int qrt_tool_inspect_check(const char *dir, FILE *out) {
    qrt_st_set st;
    if (qrt_st_open_dir(&st, dir) != QRT_OK) {
        fprintf(stderr, "qwenrt inspect: %s\n", qrt_last_error());
        return 1;
    }
    /* an MTP sidecar in the folder is not part of the checkpoint's own files, but generation reads it too */
    char mtp[4096];
    snprintf(mtp, sizeof mtp, "%s/mtp.safetensors", dir);
    FILE *probe = fopen(mtp, "rb");
    if (probe) fclose(probe);
    if (probe && qrt_st_add_file(&st, mtp) != QRT_OK) {
        fprintf(stderr, "qwenrt inspect: %s\n", qrt_last_error());
        qrt_st_close(&st);
        return 1;
    }
    int n_bad = 0;
    const qrt_st_tensor *first_bad = NULL;
    uint64_t first_count = 0;
    for (int i = 0; i < st.n_tensors; i++) {
        const qrt_st_tensor *t = &st.tensors[i];
        uint64_t first = 0, bad = count_nonfinite(t, &first);
        if (!bad) continue;
        if (!n_bad++) {
            fprintf(out, "non-finite values (NaN or Inf):\n");
            first_bad = t, first_count = bad;
        }
        fprintf(out, "  %s (%s, %s): %llu of %llu values, the first at element %llu\n", t->name,
                qrt_dtype_name(t->dtype), st.files[t->file].path, (unsigned long long)bad,
                (unsigned long long)(t->nbytes / qrt_dtype_size(t->dtype)), (unsigned long long)first);
    }
    if (n_bad) /* the verdict is an error: on stderr, like every failing command's */
        fprintf(stderr, "qwenrt inspect: %d of %d tensors hold NaN or Inf, the first %s (%s, %llu non-finite of %llu "
                "values): the checkpoint is corrupt; re-download it, or re-run the conversion that wrote it\n", n_bad,
                st.n_tensors, first_bad->name, qrt_dtype_name(first_bad->dtype), (unsigned long long)first_count,
                (unsigned long long)(first_bad->nbytes / qrt_dtype_size(first_bad->dtype)));
    else
        fprintf(out, "no NaN or Inf in the %d tensors of %d file%s\n", st.n_tensors, st.n_files,
                st.n_files == 1 ? "" : "s");
    qrt_st_close(&st);
    return n_bad ? 1 : 0;
}

int qrt_tool_inspect(const char *dir, int json, FILE *out) {
    (void)json;
    qrt_config cfg;
    if (qrt_config_load(dir, &cfg) != QRT_OK) {
        fprintf(stderr, "qwenrt inspect: %s\n", qrt_last_error());
        return 1;
    }
    print_config(&cfg, out);
    qrt_st_set st;
    if (qrt_st_open_dir(&st, dir) != QRT_OK) {
        fprintf(stderr, "qwenrt inspect: %s\n", qrt_last_error());
        return 1;
    }
    uint64_t total = 0;
    fprintf(out, "\ntensors (%d in %d file%s):\n", st.n_tensors, st.n_files, st.n_files == 1 ? "" : "s");
    for (int i = 0; i < st.n_tensors; i++) {
        const qrt_st_tensor *t = &st.tensors[i];
        char shape[128];
        qrt_st_shape_str(t, shape, sizeof shape);
        fprintf(out, "  %-64s %-8s %-18s %12llu\n", t->name, qrt_dtype_name(t->dtype), shape,
                (unsigned long long)t->nbytes);
        total += t->nbytes;
    }
    fprintf(out, "  total %.3f GB\n", total / 1e9);
    qrt_st_close(&st);
    qrt_model *m;
    if (qrt_model_load(dir, NULL, &m) != QRT_OK) {
        fprintf(stderr, "qwenrt inspect: the model does not load: %s\n", qrt_last_error());
        return 1;
    }
    print_linear_formats(m, out);
    qrt_token_bytes b;
    qrt_model_bytes(m, &b);
    fprintf(out, "\nbytes read per decoded token:\n");
    fprintf(out, "  weights        %14llu  (%.3f GB)\n", (unsigned long long)b.weights, b.weights / 1e9);
    fprintf(out, "  norms/vectors  %14llu\n", (unsigned long long)b.vectors);
    fprintf(out, "  GDN state r+w  %14llu\n", (unsigned long long)b.state);
    fprintf(out, "  KV cache       %14llu per token of context\n", (unsigned long long)b.kv_per_ctx);
    if (b.mtp_step) fprintf(out, "  MTP draft step %14llu  (%.3f GB)\n", (unsigned long long)b.mtp_step, b.mtp_step / 1e9);
    qrt_model_free(m);
    return 0;
}
