#include "tokenizer/tokenizer_internal.h"

#include <jansson.h>

/* ---------------------------------------------------------------------------------------------------
 * Loading */

typedef struct {
    const char *name;
    qrt_tokenizer *t;
} loader;

/* What HF's ByteLevel decoder makes of a token string: if every character is in the byte-level
 * alphabet, the bytes they stand for; otherwise the string's own UTF-8 bytes. */
static int token_string_to_bytes(const qrt_tokenizer *t, const uint8_t *s, size_t n, bytes_buf *out) {
    const int16_t *cp_to_byte = t->cp_to_byte;
    size_t start = out->n;
    if (!bytes_reserve(out, n)) return 0;
    for (size_t i = 0; i < n;) {
        size_t len;
        uint32_t cp = utf8_decode(s + i, &len);
        if (cp >= 324 || cp_to_byte[cp] < 0) { /* not byte-level: keep the raw string */
            out->n = start;
            return bytes_append(out, s, n);
        }
        out->p[out->n++] = (uint8_t)cp_to_byte[cp];
        i += len;
    }
    return 1;
}

static qrt_status compile_split(loader *L, const char *field, const char *pattern, int literal,
                                split_behavior behavior) {
    qrt_tokenizer *t = L->t;
    if (t->n_splits == QRT_MAX_SPLITS)
        return qrt_fail(QRT_ERR_UNSUPPORTED, "%s: field '%s': more than %d split steps", L->name, field,
                        QRT_MAX_SPLITS);
    int err;
    PCRE2_SIZE at;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &err, &at, NULL);
    if (!re) {
        char msg[256];
        pcre2_get_error_message(err, (PCRE2_UCHAR *)msg, sizeof msg);
        return qrt_fail(QRT_ERR_FORMAT, "%s: field '%s': the regex does not compile at offset %zu: %s", L->name,
                        field, (size_t)at, msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* when JIT is unavailable pcre2_match interprets */
    t->splits[t->n_splits++] = (split_step){re, behavior};
    return QRT_OK;
}

/* GPT-2's split, used by a ByteLevel pre-tokenizer with use_regex=true. */
static const char *gpt2_pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static qrt_status parse_pre_tokenizer(loader *L, json_t *pt, const char *field) {
    if (!pt || json_is_null(pt)) return QRT_OK;
    const char *type = json_string_value(json_object_get(pt, "type"));
    if (!json_is_object(pt) || !type)
        return qrt_fail(QRT_ERR_FORMAT, "%s: field '%s' must be an object with a string 'type'", L->name, field);
    char sub[128];
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(pt, "pretokenizers");
        if (!json_is_array(list)) return qrt_fail(QRT_ERR_FORMAT, "%s: field '%s.pretokenizers' must be a list", L->name, field);
        for (size_t i = 0; i < json_array_size(list); i++) {
            snprintf(sub, sizeof sub, "%s.pretokenizers[%zu]", field, i);
            QRT_TRY(parse_pre_tokenizer(L, json_array_get(list, i), sub));
        }
        return QRT_OK;
    }
    if (!strcmp(type, "ByteLevel")) {
        /* The bytes→unicode mapping itself is built into the BPE step; only the options matter here. */
        if (json_is_true(json_object_get(pt, "add_prefix_space")))
            return qrt_fail(QRT_ERR_UNSUPPORTED, "%s: field '%s.add_prefix_space' is true; only false is supported",
                            L->name, field);
        json_t *use_regex = json_object_get(pt, "use_regex");
        if (!use_regex || json_is_true(use_regex)) return compile_split(L, field, gpt2_pattern, 0, SPLIT_ISOLATED);
        return QRT_OK;
    }
    if (!strcmp(type, "Split")) {
        json_t *pattern = json_object_get(pt, "pattern");
        const char *regex = json_string_value(json_object_get(pattern, "Regex"));
        const char *literal = json_string_value(json_object_get(pattern, "String"));
        if (!regex && !literal)
            return qrt_fail(QRT_ERR_FORMAT, "%s: field '%s.pattern' must be {\"Regex\": \"...\"} or {\"String\": \"...\"}",
                            L->name, field);
        const char *behavior = json_string_value(json_object_get(pt, "behavior"));
        split_behavior b;
        if (behavior && !strcmp(behavior, "Isolated")) b = SPLIT_ISOLATED;
        else if (behavior && !strcmp(behavior, "Removed")) b = SPLIT_REMOVED;
        else
            return qrt_fail(QRT_ERR_UNSUPPORTED, "%s: field '%s.behavior' is '%s'; supported: Isolated, Removed",
                            L->name, field, behavior ? behavior : "(not a string)");
        if (json_is_true(json_object_get(pt, "invert")))
            return qrt_fail(QRT_ERR_UNSUPPORTED, "%s: field '%s.invert' is true; only false is supported", L->name,
                            field);
        snprintf(sub, sizeof sub, "%s.pattern", field);
        return compile_split(L, sub, regex ? regex : literal, !regex, b);
    }
    return qrt_fail(QRT_ERR_UNSUPPORTED, "%s: field '%s.type' is '%s'; supported: Sequence, Split, ByteLevel", L->name,
                    field, type);
}

static qrt_status parse_normalizer(loader *L, json_t *n, const char *field) {
    if (!n || json_is_null(n)) return QRT_OK;
    const char *type = json_string_value(json_object_get(n, "type"));
    if (!type) return qrt_fail(QRT_ERR_FORMAT, "%s: field '%s' must be an object with a string 'type'", L->name, field);
    if (!strcmp(type, "NFC")) return L->t->nfc = 1, QRT_OK;
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list)) return qrt_fail(QRT_ERR_FORMAT, "%s: field '%s.normalizers' must be a list", L->name, field);
        char sub[128];
        for (size_t i = 0; i < json_array_size(list); i++) {
            snprintf(sub, sizeof sub, "%s.normalizers[%zu]", field, i);
            QRT_TRY(parse_normalizer(L, json_array_get(list, i), sub));
        }
        return QRT_OK;
    }
    return qrt_fail(QRT_ERR_UNSUPPORTED, "%s: field '%s.type' is '%s'; supported: NFC, Sequence", L->name, field,
                    type);
}

static qrt_status check_model_options(loader *L, json_t *model) {
    const char *type = json_string_value(json_object_get(model, "type"));
    if (type && strcmp(type, "BPE"))
        return qrt_fail(QRT_ERR_UNSUPPORTED, "%s: field 'model.type' is '%s'; only \"BPE\" is supported", L->name,
                        type);
    static const char *must_be_null[] = {"dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < sizeof must_be_null / sizeof *must_be_null; i++) {
        json_t *v = json_object_get(model, must_be_null[i]);
        if (v && !json_is_null(v))
            return qrt_fail(QRT_ERR_UNSUPPORTED, "%s: field 'model.%s' is set; this byte-level BPE supports only null",
                            L->name, must_be_null[i]);
    }
    if (json_is_true(json_object_get(model, "byte_fallback")))
        return qrt_fail(QRT_ERR_UNSUPPORTED, "%s: field 'model.byte_fallback' is true; only false is supported",
                        L->name);
    L->t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    return QRT_OK;
}

/* Largest id in model.vocab and added_tokens (validating both), so the tables can be sized. */
static qrt_status scan_ids(loader *L, json_t *vocab, json_t *added, int32_t *max_id) {
    const char *key;
    json_t *v;
    *max_id = -1;
    /* added tokens alone are no vocabulary: every text byte would encode to nothing */
    if (json_object_size(vocab) == 0)
        return qrt_fail(QRT_ERR_FORMAT, "%s: field 'model.vocab' is empty; a byte-level BPE tokenizer needs its "
                        "tokens: is this the model's own tokenizer.json?", L->name);
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (1 << 24))
            return qrt_fail(QRT_ERR_FORMAT, "%s: field 'model.vocab[\"%.40s\"]' must be an integer id in [0, %d)",
                            L->name, key, 1 << 24);
        if (!*key) return qrt_fail(QRT_ERR_FORMAT, "%s: field 'model.vocab' has an empty token", L->name);
        *max_id = QRT_MAX(*max_id, (int32_t)json_integer_value(v));
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        json_t *id = json_object_get(a, "id");
        const char *content = json_string_value(json_object_get(a, "content"));
        if (!json_is_object(a) || !json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= (1 << 24) || !content || !*content)
            return qrt_fail(QRT_ERR_FORMAT, "%s: field 'added_tokens[%zu]' must be an object with an integer 'id' "
                            "in [0, %d) and a non-empty string 'content'", L->name, i, 1 << 24);
        *max_id = QRT_MAX(*max_id, (int32_t)json_integer_value(id));
    }
    return QRT_OK;
}

/* Two strings for one id would make decoding depend on which the file lists last; name both. */
static qrt_status duplicate_id(loader *L, json_t *vocab, const char *second, int32_t id) {
    const char *key, *first = "?";
    json_t *v;
    json_object_foreach(vocab, key, v) {
        if (json_integer_value(v) == id && strcmp(key, second) != 0) {
            first = key;
            break;
        }
    }
    return qrt_fail(QRT_ERR_FORMAT, "%s: field 'model.vocab': tokens \"%.40s\" and \"%.40s\" both have id %d; each id "
                    "must belong to one token (the file is corrupt or was edited by hand)", L->name, first, second, id);
}

/* Fill the per-id byte table and the vocab map. */
static qrt_status build_vocab(loader *L, json_t *vocab, json_t *added) {
    qrt_tokenizer *t = L->t;
    size_t n_vocab = json_object_size(vocab), arena_len = 0;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) arena_len += strlen(key);
    if (arena_len >= UINT32_MAX / 2) return qrt_fail(QRT_ERR_FORMAT, "%s: field 'model.vocab' is too large", L->name);
    t->arena = malloc(arena_len + 1);
    t->tok_present = calloc((size_t)t->n_ids, 1);
    t->tok_added = calloc((size_t)t->n_ids, 1);
    uint32_t *start = calloc((size_t)t->n_ids, sizeof *start), *len = calloc((size_t)t->n_ids, sizeof *len);
    bytes_buf all = {0};
    qrt_status st = QRT_OK;
    if (!t->arena || !t->tok_present || !t->tok_added || !start || !len || !str_map_init(&t->vocab, n_vocab)) {
        st = qrt_fail(QRT_ERR_MEMORY, "%s: out of memory for a vocabulary of %zu tokens", L->name, n_vocab);
        goto done;
    }
    /* token bytes are appended in file order; `start`/`len` index them by id */
    uint32_t off = 0;
    json_object_foreach(vocab, key, v) {
        int32_t id = (int32_t)json_integer_value(v);
        size_t n = strlen(key);
        if (t->tok_present[id]) {
            st = duplicate_id(L, vocab, key, id);
            goto done;
        }
        memcpy(t->arena + off, key, n);
        str_map_put(&t->vocab, t->arena, off, (uint32_t)n, id);
        off += (uint32_t)n;
        start[id] = (uint32_t)all.n;
        if (!token_string_to_bytes(t, (const uint8_t *)key, n, &all)) goto oom;
        len[id] = (uint32_t)(all.n - start[id]);
        t->tok_present[id] = 1;
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        int32_t id = (int32_t)json_integer_value(json_object_get(a, "id"));
        const char *content = json_string_value(json_object_get(a, "content"));
        start[id] = (uint32_t)all.n;
        if (!token_string_to_bytes(t, (const uint8_t *)content, strlen(content), &all)) goto oom;
        len[id] = (uint32_t)(all.n - start[id]);
        t->tok_present[id] = 1, t->tok_added[id] = 1;
    }
    /* lay the bytes out in id order so a token is tok_bytes[tok_off[id] .. tok_off[id+1]) */
    t->tok_off = malloc(((size_t)t->n_ids + 1) * sizeof *t->tok_off);
    t->tok_bytes = malloc(all.n + 1);
    if (!t->tok_off || !t->tok_bytes) goto oom;
    uint32_t pos = 0;
    for (int32_t id = 0; id < t->n_ids; id++) {
        t->tok_off[id] = pos;
        memcpy(t->tok_bytes + pos, all.p + start[id], len[id]);
        pos += len[id];
    }
    t->tok_off[t->n_ids] = pos;
    goto done;
oom:
    st = qrt_fail(QRT_ERR_MEMORY, "%s: out of memory loading the vocabulary", L->name);
done:
    free(start), free(len), free(all.p);
    return st;
}

/* One merge rule, "a b" or ["a", "b"], as two spellings pointing into the JSON document. */
static qrt_status merge_parts(loader *L, json_t *m, size_t i, const char **a, size_t *na, const char **b,
                              size_t *nb) {
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        const char *space = strchr(s, ' ');
        if (!space || space == s || !space[1] || strchr(space + 1, ' '))
            return qrt_fail(QRT_ERR_FORMAT, "%s: field 'model.merges[%zu]' is \"%.60s\"; expected two tokens "
                            "separated by one space", L->name, i, s);
        *a = s, *na = (size_t)(space - s), *b = space + 1, *nb = strlen(space + 1);
        return QRT_OK;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0)), *na = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1)), *nb = json_string_length(json_array_get(m, 1));
        return QRT_OK;
    }
    return qrt_fail(QRT_ERR_FORMAT, "%s: field 'model.merges[%zu]' must be a string \"a b\" or a pair [\"a\", \"b\"]",
                    L->name, i);
}

static qrt_status build_merges(loader *L, json_t *merges) {
    qrt_tokenizer *t = L->t;
    size_t n = json_array_size(merges), cap = 16;
    while (cap < 2 * n + 16) cap *= 2;
    t->merges.slots = malloc(cap * sizeof *t->merges.slots);
    if (!t->merges.slots) return qrt_fail(QRT_ERR_MEMORY, "%s: out of memory for %zu merges", L->name, n);
    for (size_t i = 0; i < cap; i++) t->merges.slots[i].key = UINT64_MAX;
    t->merges.mask = cap - 1;
    bytes_buf joined = {0};
    qrt_status st = QRT_OK;
    for (size_t i = 0; i < n && st == QRT_OK; i++) {
        const char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        if ((st = merge_parts(L, json_array_get(merges, i), i, &a, &na, &b, &nb)) != QRT_OK) break;
        int32_t ia = str_map_get(&t->vocab, t->arena, a, na), ib = str_map_get(&t->vocab, t->arena, b, nb);
        joined.n = 0;
        if (!bytes_append(&joined, a, na) || !bytes_append(&joined, b, nb)) {
            st = QRT_ERR_MEMORY;
            break;
        }
        int32_t ij = str_map_get(&t->vocab, t->arena, joined.p, joined.n);
        if (ia < 0 || ib < 0 || ij < 0) {
            st = qrt_fail(QRT_ERR_FORMAT, "%s: field 'model.merges[%zu]' (\"%.*s\" + \"%.*s\") names a token that is "
                          "not in model.vocab: \"%.*s\"", L->name, i, (int)QRT_MIN(na, 40), a, (int)QRT_MIN(nb, 40), b,
                          ia < 0 ? (int)QRT_MIN(na, 40) : ib < 0 ? (int)QRT_MIN(nb, 40) : (int)QRT_MIN(joined.n, 80),
                          ia < 0 ? a : ib < 0 ? b : (const char *)joined.p);
            break;
        }
        uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
        for (size_t s = mix64(key) & t->merges.mask;; s = (s + 1) & t->merges.mask) {
            merge_slot *slot = &t->merges.slots[s];
            if (slot->key == key) break; /* a repeated rule keeps its first (lowest) rank */
            if (slot->key == UINT64_MAX) {
                *slot = (merge_slot){key, (uint32_t)i, ij};
                break;
            }
        }
    }
    free(joined.p);
    return st;
}

static qrt_status build_added(loader *L, json_t *added) {
    qrt_tokenizer *t = L->t;
    size_t n = json_array_size(added);
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added) return qrt_fail(QRT_ERR_MEMORY, "%s: out of memory for %zu added tokens", L->name, n);
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(added, i);
        const char *content = json_string_value(json_object_get(a, "content"));
        added_token *at = &t->added[t->n_added++];
        at->len = strlen(content);
        at->content = malloc(at->len + 1);
        if (!at->content) return qrt_fail(QRT_ERR_MEMORY, "%s: out of memory for added tokens", L->name);
        memcpy(at->content, content, at->len + 1);
        at->id = (int32_t)json_integer_value(json_object_get(a, "id"));
        at->normalized = json_is_true(json_object_get(a, "normalized"));
        at->lstrip = json_is_true(json_object_get(a, "lstrip"));
        at->rstrip = json_is_true(json_object_get(a, "rstrip"));
        at->single_word = json_is_true(json_object_get(a, "single_word"));
        t->added_first[at->content[0]] = 1;
    }
    return QRT_OK;
}

static qrt_status check_decoder(loader *L, json_t *dec) {
    if (!dec || json_is_null(dec)) return QRT_OK; /* byte-level decoding is the only kind we do */
    const char *type = json_string_value(json_object_get(dec, "type"));
    if (type && !strcmp(type, "ByteLevel")) return QRT_OK;
    return qrt_fail(QRT_ERR_UNSUPPORTED, "%s: field 'decoder.type' is '%s'; only \"ByteLevel\" is supported", L->name,
                    type ? type : "(not a string)");
}

static qrt_status load_json(loader *L, json_t *root) {
    qrt_tokenizer *t = L->t;
    if (!json_is_object(root)) return qrt_fail(QRT_ERR_FORMAT, "%s: the top level must be a JSON object", L->name);
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model))
        return qrt_fail(QRT_ERR_FORMAT, "%s: field 'model' is missing or not an object (expected {\"type\": \"BPE\", "
                        "\"vocab\": {...}, \"merges\": [...]})", L->name);
    QRT_TRY(check_model_options(L, model));
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    json_t *added = json_object_get(root, "added_tokens");
    if (!json_is_object(vocab))
        return qrt_fail(QRT_ERR_FORMAT, "%s: field 'model.vocab' is missing or not an object of token → id", L->name);
    if (!json_is_array(merges))
        return qrt_fail(QRT_ERR_FORMAT, "%s: field 'model.merges' is missing or not a list", L->name);
    if (added && !json_is_null(added) && !json_is_array(added))
        return qrt_fail(QRT_ERR_FORMAT, "%s: field 'added_tokens' must be a list", L->name);
    int32_t max_id;
    QRT_TRY(scan_ids(L, vocab, added, &max_id));
    t->n_ids = max_id + 1;
    byte_level_map(t->byte_to_cp);
    for (int i = 0; i < 324; i++) t->cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) t->cp_to_byte[t->byte_to_cp[b]] = (int16_t)b;
    QRT_TRY(build_vocab(L, vocab, added));
    QRT_TRY(build_merges(L, merges));
    QRT_TRY(build_added(L, added));
    for (int b = 0; b < 256; b++) {
        uint8_t spelled[4];
        size_t n = utf8_encode(t->byte_to_cp[b], spelled);
        t->byte_token[b] = str_map_get(&t->vocab, t->arena, spelled, n);
    }
    QRT_TRY(parse_normalizer(L, json_object_get(root, "normalizer"), "normalizer"));
    QRT_TRY(parse_pre_tokenizer(L, json_object_get(root, "pre_tokenizer"), "pre_tokenizer"));
    return check_decoder(L, json_object_get(root, "decoder"));
}

qrt_status qrt_tokenizer_load_buffer(const char *json, size_t len, const char *name, qrt_tokenizer **out) {
    *out = NULL;
    json_error_t jerr;
    /* A token string listed twice in model.vocab (or any repeated key) is refused: which id it gets would depend
     * on the parser, and jansson would keep the last one silently. */
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root && json_error_code(&jerr) == json_error_duplicate_key)
        return qrt_fail(QRT_ERR_FORMAT, "%s: a key appears twice in one object (a token string listed twice in "
                        "model.vocab?): %s (line %d, column %d); each token must appear once", name, jerr.text,
                        jerr.line, jerr.column);
    if (!root)
        return qrt_fail(QRT_ERR_FORMAT, "%s: not valid JSON: %s (line %d, column %d)", name, jerr.text, jerr.line,
                        jerr.column);
    qrt_tokenizer *t = calloc(1, sizeof *t);
    loader L = {name, t};
    qrt_status st = QRT_ERR_MEMORY;
    if (t && (t->name = strdup(name))) st = load_json(&L, root);
    else qrt_fail(st, "%s: out of memory", name);
    json_decref(root);
    if (st != QRT_OK) {
        qrt_tokenizer_free(t);
        return st;
    }
    *out = t;
    return QRT_OK;
}

qrt_status qrt_tokenizer_load(const char *path, qrt_tokenizer **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return qrt_fail(QRT_ERR_IO, "%s: cannot open the tokenizer file", path);
    bytes_buf buf = {0};
    char chunk[1 << 16];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (!bytes_append(&buf, chunk, n)) {
            fclose(f), free(buf.p);
            return QRT_ERR_MEMORY;
        }
    int read_error = ferror(f);
    fclose(f);
    if (read_error) {
        free(buf.p);
        return qrt_fail(QRT_ERR_IO, "%s: read error", path);
    }
    qrt_status st = qrt_tokenizer_load_buffer(buf.p ? (const char *)buf.p : "", buf.n, path, out);
    free(buf.p);
    return st;
}
