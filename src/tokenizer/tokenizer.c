/* Byte-level BPE tokenizer (see tokenizer.h for the pipeline): the tokenizer's accessors, decoding, and the
 * byte-only tokenizer.json of synthetic checkpoints. Loading is load.c, encoding encode.c. */
#include "tokenizer/tokenizer_internal.h"

#include <jansson.h>

/* ---------------------------------------------------------------------------------------------------
 * UTF-8 validity (the classification is tokenizer_internal.h's) */

int qrt_utf8_valid(const uint8_t *s, size_t n, size_t *bad_at) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t len;
        if (utf8_classify(s + i, n - i, &len) != UTF8_VALID) {
            if (bad_at) *bad_at = i;
            return 0;
        }
        i += len;
    }
    return 1;
}

/* ---------------------------------------------------------------------------------------------------
 * The tokenizer */

void qrt_tokenizer_free(qrt_tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_splits; i++) pcre2_code_free(t->splits[i].re);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    free(t->vocab.slots);
    free(t->merges.slots);
    free(t->arena);
    free(t->tok_off);
    free(t->tok_bytes);
    free(t->tok_present);
    free(t->tok_added);
    free(t->name);
    free(t);
}

int32_t qrt_tokenizer_vocab(const qrt_tokenizer *t) { return t->n_ids; }

qrt_status qrt_tokenizer_check_model(const qrt_tokenizer *t, const qrt_model *m, const char *model_dir) {
    const int32_t vocab_size = qrt_model_vocab(m);
    if (t->n_ids <= vocab_size) return QRT_OK;
    return qrt_fail(QRT_ERR_CONFIG, "%s: token id %d (the largest in model.vocab and added_tokens) is not below "
                    "vocab_size %d of %s/config.json: the model has no logits row for it; the tokenizer belongs to "
                    "another model", t->name, t->n_ids - 1, vocab_size, model_dir);
}

const uint8_t *qrt_tokenizer_token_bytes(const qrt_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_ids || !t->tok_present[id]) return NULL;
    *len = t->tok_off[id + 1] - t->tok_off[id];
    return t->tok_bytes + t->tok_off[id];
}

int qrt_tokenizer_is_added(const qrt_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_ids && t->tok_added[id];
}


int32_t qrt_tokenizer_token_id(const qrt_tokenizer *t, const char *token) {
    size_t n = strlen(token);
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && memcmp(t->added[i].content, token, n) == 0) return t->added[i].id;
    bytes_buf spelled = {0};
    int32_t id = -1;
    if (byte_level_spell(t, (const uint8_t *)token, n, &spelled))
        id = str_map_get(&t->vocab, t->arena, spelled.p, spelled.n);
    free(spelled.p);
    return id;
}

/* ---------------------------------------------------------------------------------------------------
 * Decoding */

static qrt_status append_token(const qrt_tokenizer *t, int32_t id, bytes_buf *raw) {
    size_t n;
    const uint8_t *b = qrt_tokenizer_token_bytes(t, id, &n);
    if (!b) return qrt_fail(QRT_ERR_ARG, "token id %d is not in the vocabulary of %s (ids 0..%d)", id, t->name,
                            t->n_ids - 1);
    return bytes_append(raw, b, n) ? QRT_OK : QRT_ERR_MEMORY;
}

qrt_status qrt_detokenize(const qrt_tokenizer *t, const int32_t *ids, size_t n_ids, char **text, size_t *len) {
    *text = NULL;
    if (len) *len = 0;
    bytes_buf raw = {0}, out = {0};
    qrt_status st = QRT_OK;
    for (size_t i = 0; i < n_ids && st == QRT_OK; i++) st = append_token(t, ids[i], &raw);
    if (st == QRT_OK && append_utf8_lossy(&out, raw.p, raw.n, 1) == (size_t)-1) st = QRT_ERR_MEMORY;
    if (st == QRT_OK && !out.p && !bytes_reserve(&out, 0)) st = QRT_ERR_MEMORY;
    free(raw.p);
    if (st != QRT_OK) {
        free(out.p);
        return st;
    }
    out.p[out.n] = 0;
    *text = (char *)out.p;
    if (len) *len = out.n;
    return QRT_OK;
}

/* Streaming: bytes of a character split across tokens wait in `pending` until it is complete. */
struct qrt_detok_stream {
    const qrt_tokenizer *t;
    uint8_t pending[8];
    size_t n_pending;
    bytes_buf raw, out;
};

qrt_status qrt_detok_stream_new(const qrt_tokenizer *t, qrt_detok_stream **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return qrt_fail(QRT_ERR_MEMORY, "out of memory");
    (*out)->t = t;
    return QRT_OK;
}

void qrt_detok_stream_free(qrt_detok_stream *s) {
    if (!s) return;
    free(s->raw.p), free(s->out.p);
    free(s);
}

qrt_status qrt_detok_stream_push(qrt_detok_stream *s, int32_t id, const char **text, size_t *len) {
    *text = "", *len = 0;
    s->raw.n = 0, s->out.n = 0;
    if (!bytes_append(&s->raw, s->pending, s->n_pending)) return QRT_ERR_MEMORY;
    QRT_TRY(append_token(s->t, id, &s->raw));
    size_t used = append_utf8_lossy(&s->out, s->raw.p, s->raw.n, 0);
    if (used == (size_t)-1) return QRT_ERR_MEMORY;
    s->n_pending = s->raw.n - used; /* at most 3: a valid prefix of one character */
    memcpy(s->pending, s->raw.p + used, s->n_pending);
    if (s->out.p) *text = (const char *)s->out.p, *len = s->out.n;
    return QRT_OK;
}

const char *qrt_detok_stream_flush(qrt_detok_stream *s, size_t *len) {
    s->out.n = 0;
    size_t n = s->n_pending;
    s->n_pending = 0;
    if (append_utf8_lossy(&s->out, s->pending, n, 1) == (size_t)-1 || !s->out.p) {
        *len = 0;
        return "";
    }
    *len = s->out.n;
    return (const char *)s->out.p;
}

/* ---------------------------------------------------------------------------------------------------
 * A byte-only tokenizer.json for synthetic checkpoints: the 256 byte tokens, placeholders up to special_base,
 * no merges, the Qwen3.5 pre-tokenizer, and the 33 special tokens of the family at special_base.. (248044 in
 * the real models). */

static const char *const qwen_specials[33] = {
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
    "<think>", "</think>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
    "<tts_text_bos_single>", "<|audio_pad|>"};

qrt_status qrt_tokenizer_write_bytes_only(const char *path, int32_t special_base) {
    if (special_base < 256)
        return qrt_fail(QRT_ERR_ARG, "%s: special tokens must come after the 256 byte tokens (base %d)", path,
                        special_base);
    uint32_t byte_to_cp[256];
    byte_level_map(byte_to_cp);
    json_t *vocab = json_object(), *added = json_array();
    for (int b = 0; b < 256; b++) {
        uint8_t spelled[8];
        size_t n = utf8_encode(byte_to_cp[b], spelled);
        spelled[n] = 0;
        json_object_set_new(vocab, (const char *)spelled, json_integer(b));
    }
    /* ids 256..special_base-1 hold unreachable placeholders (no merge makes them): HF renumbers added
     * tokens that do not follow the vocabulary directly, so the specials must sit right after it */
    for (int32_t id = 256; id < special_base; id++) {
        char name[32];
        snprintf(name, sizeof name, "<|unused_%d|>", id);
        json_object_set_new(vocab, name, json_integer(id));
    }
    for (int i = 0; i < 33; i++) {
        /* tool, fim, think tokens are not "special" in the Qwen3.5 files: they stay in decoded text */
        int special = i < 14 || i > 25;
        json_array_append_new(added, json_pack("{s:i,s:s,s:b,s:b,s:b,s:b,s:b}", "id", special_base + i, "content",
                                               qwen_specials[i], "single_word", 0, "lstrip", 0, "rstrip", 0,
                                               "normalized", 0, "special", special));
    }
    const char *split = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}"
                        "\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    json_t *root = json_pack(
        "{s:s,s:o,s:{s:s},s:{s:s,s:[{s:s,s:{s:s},s:s,s:b},{s:s,s:b,s:b,s:b}]},s:{s:s,s:b,s:b,s:b},"
        "s:{s:s,s:b,s:b,s:o,s:[]}}",
        "version", "1.0", "added_tokens", added, "normalizer", "type", "NFC", "pre_tokenizer", "type", "Sequence",
        "pretokenizers", "type", "Split", "pattern", "Regex", split, "behavior", "Isolated", "invert", 0, "type",
        "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0, "decoder", "type", "ByteLevel",
        "add_prefix_space", 1, "trim_offsets", 1, "use_regex", 1, "model", "type", "BPE", "byte_fallback", 0,
        "ignore_merges", 0, "vocab", vocab, "merges");
    if (!root) return qrt_fail(QRT_ERR_MEMORY, "%s: cannot build the tokenizer JSON", path);
    int rc = json_dump_file(root, path, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    return rc ? qrt_fail(QRT_ERR_IO, "%s: cannot write", path) : QRT_OK;
}
