/* Broken checkpoints must give a clear error (the right status, a message naming the file and the field or
 * tensor) and never crash. Each case copies the tiny-tied fixture into a scratch folder, breaks one thing,
 * and loads it. */
#include <jansson.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model.h"
#include "test_util.h"

static char src_dir[1024], work[1024];

static void copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    CHECK(a && b, "copy %s -> %s", from, to);
    char buf[65536];
    size_t n;
    while (a && b && (n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
    if (a) fclose(a);
    if (b) fclose(b);
}

static void fresh_copy(void) {
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s/config.json", src_dir);
    snprintf(b, sizeof b, "%s/config.json", work);
    copy_file(a, b);
    snprintf(a, sizeof a, "%s/model.safetensors", src_dir);
    snprintf(b, sizeof b, "%s/model.safetensors", work);
    copy_file(a, b);
}

static void write_text(const char *name, const char *text) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", work, name);
    FILE *f = fopen(p, "wb");
    fputs(text, f);
    fclose(f);
}

/* Load the scratch folder; expect status want and every needle in the message. */
static void expect(const char *what, qrt_status want, const char *needle1, const char *needle2) {
    qrt_model *m = NULL;
    qrt_status st = qrt_model_load(work, &test_cpu, &m);
    const char *msg = qrt_last_error();
    CHECK(st == want, "%s: status %s, expected %s (%s)", what, qrt_status_str(st), qrt_status_str(want), msg);
    CHECK(m == NULL, "%s: no model on failure", what);
    CHECK(!needle1 || strstr(msg, needle1), "%s: message lacks '%s': %s", what, needle1, msg);
    CHECK(!needle2 || strstr(msg, needle2), "%s: message lacks '%s': %s", what, needle2, msg);
    printf("  %-28s -> %s\n", what, msg);
    qrt_model_free(m);
}

/* Bytes of space added after the header's padding to 8: 1 makes a header whose length misaligns the data block. */
static size_t header_misalign;

/* Rewrite model.safetensors with its header passed through edit(); the data block is kept. */
static void edit_header(void (*edit)(json_t *hdr)) {
    char p[1200];
    snprintf(p, sizeof p, "%s/model.safetensors", src_dir);
    FILE *f = fopen(p, "rb");
    uint64_t hlen = 0;
    uint8_t len8[8];
    CHECK(f && fread(len8, 1, 8, f) == 8, "read header length");
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | len8[i];
    char *hdr = calloc(1, hlen + 1);
    CHECK(fread(hdr, 1, hlen, f) == hlen, "read header");
    json_t *j = json_loads(hdr, 0, NULL);
    edit(j);
    char *text = json_dumps(j, JSON_COMPACT);
    size_t n = strlen(text), padded = (n + 7) / 8 * 8 + header_misalign;
    snprintf(p, sizeof p, "%s/model.safetensors", work);
    FILE *o = fopen(p, "wb");
    uint64_t L = padded;
    for (int i = 0; i < 8; i++) fputc((int)((L >> (8 * i)) & 0xff), o);
    fputs(text, o);
    for (size_t i = n; i < padded; i++) fputc(' ', o);
    char buf[65536];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, got, o);
    fclose(o);
    fclose(f);
    free(text);
    free(hdr);
    json_decref(j);
}

static json_t *entry(json_t *h, const char *name) { return json_object_get(h, name); }
static void offsets_past_end(json_t *h) {
    json_array_set_new(json_object_get(entry(h, "model.norm.weight"), "data_offsets"), 1, json_integer(1ll << 40));
}
static void wrong_dtype(json_t *h) { json_object_set_new(entry(h, "model.norm.weight"), "dtype", json_string("I32")); }
static void wrong_shape(json_t *h) {
    json_t *shape = json_object_get(entry(h, "model.layers.1.mlp.gate_proj.weight"), "shape");
    json_t *a = json_integer(json_integer_value(json_array_get(shape, 1)));
    json_t *b = json_integer(json_integer_value(json_array_get(shape, 0)));
    json_array_set_new(shape, 0, a);
    json_array_set_new(shape, 1, b);
}
/* renamed, not deleted: deleting it would leave its bytes uncovered, which the parser rejects first */
static void drop_tensor(json_t *h) {
    const char *name = "model.layers.2.self_attn.k_norm.weight";
    json_object_set(h, "unused.k_norm.weight", json_object_get(h, name));
    json_object_del(h, name);
}
static void unknown_dtype(json_t *h) { json_object_set_new(entry(h, "model.norm.weight"), "dtype", json_string("Q4")); }
static void size_mismatch(json_t *h) {
    json_array_set_new(json_object_get(entry(h, "model.norm.weight"), "shape"), 0, json_integer(7));
}

/* 4 bytes into the embedding before it: two tensors claim the same bytes */
static void overlapping(json_t *h) {
    json_t *off = json_object_get(entry(h, "model.layers.0.input_layernorm.weight"), "data_offsets");
    json_array_set_new(off, 0, json_integer(json_integer_value(json_array_get(off, 0)) - 4));
    json_array_set_new(off, 1, json_integer(json_integer_value(json_array_get(off, 1)) - 4));
}
static void metadata_not_string(json_t *h) {
    json_object_set_new(h, "__metadata__", json_pack("{sssi}", "format", "pt", "total_size", 123));
}
static void unchanged(json_t *h) { (void)h; }

static void append_bytes(size_t n) {
    char p[1200];
    snprintf(p, sizeof p, "%s/model.safetensors", work);
    FILE *f = fopen(p, "ab");
    for (size_t i = 0; i < n; i++) fputc(0, f);
    fclose(f);
}

static void set_len(uint64_t hlen) {
    char p[1200];
    snprintf(p, sizeof p, "%s/model.safetensors", work);
    FILE *f = fopen(p, "r+b");
    for (int i = 0; i < 8; i++) fputc((int)((hlen >> (8 * i)) & 0xff), f);
    fclose(f);
}

static void truncate_to(double frac) {
    char p[1200];
    snprintf(p, sizeof p, "%s/model.safetensors", work);
    struct stat sb;
    stat(p, &sb);
    CHECK(truncate(p, (off_t)(sb.st_size * frac)) == 0, "truncate");
}

static void config_case(const char *what, const char *from, const char *to, qrt_status want, const char *needle) {
    fresh_copy();
    char p[1200];
    snprintf(p, sizeof p, "%s/config.json", src_dir);
    json_t *j = json_load_file(p, 0, NULL);
    char *text = json_dumps(j, JSON_INDENT(1));
    char *at = strstr(text, from);
    CHECK(at != NULL, "%s: '%s' not in config", what, from);
    if (!at) return;
    size_t out_len = strlen(text) - strlen(from) + strlen(to) + 1;
    char *edited = malloc(out_len);
    snprintf(edited, out_len, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    write_text("config.json", edited);
    expect(what, want, "config.json", needle);
    free(edited);
    free(text);
    json_decref(j);
}

int main(int argc, char **argv) {
    const char *data = argc > 1 ? argv[1] : "tests/data";
    snprintf(src_dir, sizeof src_dir, "%s/tiny-tied", data);
    snprintf(work, sizeof work, "%s", "/tmp/qrt_bad_XXXXXX");
    CHECK(mkdtemp(work) != NULL, "mkdtemp");

    fresh_copy();
    qrt_model *m = NULL;
    CHECK_OK(qrt_model_load(work, &test_cpu, &m)); /* the unbroken copy loads */
    qrt_model_free(m);

    char p[1200];
    snprintf(p, sizeof p, "%s/config.json", work);
    unlink(p);
    expect("missing config.json", QRT_ERR_IO, "config.json", "cannot open");
    write_text("config.json", "{\"model_type\": \"qwen3_5_text\", \"hidden_size\": 12");
    expect("garbled config.json", QRT_ERR_CONFIG, "config.json", "not valid JSON");
    write_text("config.json", "[1, 2]");
    expect("config not an object", QRT_ERR_CONFIG, "config.json", "not a JSON object");
    config_case("unknown model_type", "\"qwen3_5_text\"", "\"llama\"", QRT_ERR_CONFIG, "llama");
    config_case("missing hidden_size", "\"hidden_size\"", "\"hidden_sizes\"", QRT_ERR_CONFIG, "hidden_size");
    config_case("hidden_size wrong type", "\"hidden_size\": 128", "\"hidden_size\": \"128\"", QRT_ERR_CONFIG,
                "hidden_size");
    config_case("negative head count", "\"num_attention_heads\": 2", "\"num_attention_heads\": -2", QRT_ERR_CONFIG,
                "num_attention_heads");
    config_case("layer_types too short", "\"full_attention\",\n  \"linear_attention\"\n ]", "\"full_attention\"]",
                QRT_ERR_CONFIG, "layer_types");
    config_case("unknown layer type", "\"linear_attention\"", "\"mamba\"", QRT_ERR_CONFIG, "layer_types");
    config_case("heads not divisible", "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3", QRT_ERR_CONFIG,
                "num_key_value_heads");
    config_case("config shape disagrees", "\"intermediate_size\": 256", "\"intermediate_size\": 300",
                QRT_ERR_WEIGHTS, NULL);

    fresh_copy();
    truncate_to(0.5);
    expect("truncated safetensors", QRT_ERR_FORMAT, "model.safetensors", "data_offsets");
    fresh_copy();
    truncate_to(0.0);
    expect("empty safetensors", QRT_ERR_FORMAT, "model.safetensors", "too short");
    fresh_copy();
    set_len(1ull << 50);
    expect("header length > file", QRT_ERR_FORMAT, "model.safetensors", "header length");
    fresh_copy();
    set_len(16);
    expect("header not JSON", QRT_ERR_FORMAT, "model.safetensors", "JSON");
    /* header edits: each breaks one field of one tensor's entry */
    static const struct {
        const char *what;
        void (*edit)(json_t *hdr);
        qrt_status want;
        const char *needle1, *needle2;
    } header_cases[] = {
        {"offsets out of range", offsets_past_end, QRT_ERR_FORMAT, "model.norm.weight", "data_offsets"},
        {"offsets disagree with shape", size_mismatch, QRT_ERR_FORMAT, "model.norm.weight", "bytes"},
        {"unknown dtype", unknown_dtype, QRT_ERR_FORMAT, "model.norm.weight", "Q4"},
        {"wrong dtype", wrong_dtype, QRT_ERR_WEIGHTS, "model.norm.weight", "I32"},
        {"wrong shape", wrong_shape, QRT_ERR_WEIGHTS, "model.layers.1.mlp.gate_proj.weight", "expected [256, 128]"},
        {"missing tensor", drop_tensor, QRT_ERR_WEIGHTS, "model.layers.2.self_attn.k_norm.weight", "missing"},
        {"overlapping tensors", overlapping, QRT_ERR_FORMAT, "model.layers.0.input_layernorm.weight",
         "inside tensor 'model.embed_tokens.weight'"},
        {"metadata value not a string", metadata_not_string, QRT_ERR_FORMAT, "__metadata__", "total_size"},
    };
    for (size_t i = 0; i < sizeof header_cases / sizeof header_cases[0]; i++) {
        fresh_copy();
        edit_header(header_cases[i].edit);
        expect(header_cases[i].what, header_cases[i].want, header_cases[i].needle1, header_cases[i].needle2);
    }

    /* bytes after the last tensor's data: the reference library rejects them (MetadataIncompleteBuffer) */
    fresh_copy();
    append_bytes(16);
    expect("trailing bytes", QRT_ERR_FORMAT, "model.safetensors", "16 bytes after the end");
    /* a header whose length is not padded to 8 misaligns every tensor: the header is to blame, not a tensor */
    fresh_copy();
    header_misalign = 1;
    edit_header(unchanged);
    header_misalign = 0;
    expect("unpadded header", QRT_ERR_FORMAT, "model.safetensors", "malformed header");

    /* a shard index that names a tensor its shard lacks */
    fresh_copy();
    write_text("model.safetensors.index.json",
               "{\"weight_map\": {\"model.norm.weight\": \"model.safetensors\", \"model.extra\": \"model.safetensors\"}}");
    expect("index names absent tensor", QRT_ERR_WEIGHTS, "model.extra", "index");
    write_text("model.safetensors.index.json", "{\"weight_map\": {\"model.norm.weight\": \"../etc/passwd\"}}");
    expect("index escapes folder", QRT_ERR_FORMAT, "weight_map", "plain file name");
    write_text("model.safetensors.index.json", "{\"weight_map\": {\"model.norm.weight\": \"gone.safetensors\"}}");
    expect("index names missing shard", QRT_ERR_IO, "gone.safetensors", NULL);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", work);
    unlink(p);

    /* session-level bad input leaves the session unchanged */
    fresh_copy();
    CHECK_OK(qrt_model_load(work, &test_cpu, &m));
    qrt_session *s = NULL;
    if (m) CHECK_OK(qrt_session_new(m, 4, &s));
    if (s) {
        float *logits = malloc(sizeof(float) * qrt_model_vocab(m));
        int32_t ids[5] = {1, 2, 3, 4, 5}, bad[2] = {1, 1 << 30};
        CHECK(qrt_forward(s, bad, 2, NULL, 1, logits) == QRT_ERR_ARG, "out-of-vocab id rejected");
        CHECK(qrt_session_pos(s) == 0, "session unchanged after a rejected call");
        CHECK(qrt_forward(s, ids, 5, NULL, 1, logits) == QRT_ERR_CONTEXT, "context overflow rejected");
        CHECK(qrt_session_pos(s) == 0, "session unchanged after overflow");
        CHECK_OK(qrt_forward(s, ids, 4, NULL, 1, logits));
        free(logits);
    }
    qrt_session_free(s);
    qrt_model_free(m);

    char cmd[1300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
    CHECK(system(cmd) == 0, "cleanup");
    return test_exit("test_bad_inputs");
}
