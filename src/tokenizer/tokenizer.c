/* Byte-level BPE tokenizer (see tokenizer.h for the pipeline). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <pcre2.h>
#include <string.h>
#include <utf8proc.h>

#include "util/common.h"
#include "util/mix64.h"

/* ---------------------------------------------------------------------------------------------------
 * UTF-8 (Unicode Table 3-7) */

typedef enum { UTF8_VALID, UTF8_INVALID, UTF8_INCOMPLETE } utf8_kind;

/* Classify the sequence at s[0..n): VALID (*len = its length), INVALID (*len = the maximal subpart
 * that must become one U+FFFD, as Rust's from_utf8_lossy counts it) or INCOMPLETE (s holds a valid
 * prefix that the end of the buffer cuts short; *len = n). */
static utf8_kind utf8_classify(const uint8_t *s, size_t n, size_t *len) {
    uint8_t b = s[0];
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* range of the second byte */
    if (b < 0x80) return *len = 1, UTF8_VALID;
    if (b >= 0xC2 && b <= 0xDF) need = 2;
    else if (b >= 0xE0 && b <= 0xEF) {
        need = 3;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F; /* no surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F; /* nothing past U+10FFFF */
    } else
        return *len = 1, UTF8_INVALID;
    for (size_t i = 1; i < need; i++) {
        if (i >= n) return *len = n, UTF8_INCOMPLETE;
        uint8_t c = s[i];
        int ok = i == 1 ? c >= lo && c <= hi : c >= 0x80 && c <= 0xBF;
        if (!ok) return *len = i, UTF8_INVALID;
    }
    return *len = need, UTF8_VALID;
}

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

static size_t utf8_encode(uint32_t cp, uint8_t *out) {
    if (cp < 0x80) return out[0] = (uint8_t)cp, 1;
    if (cp < 0x800) return out[0] = (uint8_t)(0xC0 | cp >> 6), out[1] = (uint8_t)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12), out[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18), out[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)), out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decode one code point of valid UTF-8. */
static uint32_t utf8_decode(const uint8_t *s, size_t *len) {
    uint8_t b = s[0];
    if (b < 0x80) return *len = 1, b;
    if (b < 0xE0) return *len = 2, (uint32_t)(b & 0x1F) << 6 | (s[1] & 0x3F);
    if (b < 0xF0) return *len = 3, (uint32_t)(b & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    *len = 4;
    return (uint32_t)(b & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
}

/* ---------------------------------------------------------------------------------------------------
 * Growable byte and id buffers */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} bytes_buf;

static int bytes_reserve(bytes_buf *b, size_t extra) {
    if (b->n + extra + 1 <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra + 1) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) return qrt_fail(QRT_ERR_MEMORY, "out of memory growing a %zu-byte buffer", cap), 0;
    b->p = p, b->cap = cap;
    return 1;
}

static int bytes_append(bytes_buf *b, const void *src, size_t n) {
    if (!bytes_reserve(b, n)) return 0;
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
    b->p[b->n] = 0; /* always NUL-terminated for callers that print it */
    return 1;
}

/* Append s[0..n) with each invalid UTF-8 subpart replaced by U+FFFD. Unless final, an incomplete
 * sequence at the very end is left unconsumed (it may be completed by the next token). Returns the
 * bytes consumed, or (size_t)-1 when out of memory. */
static size_t append_utf8_lossy(bytes_buf *out, const uint8_t *s, size_t n, int final) {
    static const uint8_t replacement[3] = {0xEF, 0xBF, 0xBD};
    size_t i = 0, run = 0; /* run: start of the current stretch of valid bytes */
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t len;
        utf8_kind k = utf8_classify(s + i, n - i, &len);
        if (k == UTF8_VALID) {
            i += len;
            continue;
        }
        if (!bytes_append(out, s + run, i - run)) return (size_t)-1;
        if (k == UTF8_INCOMPLETE && !final) return i;
        if (!bytes_append(out, replacement, 3)) return (size_t)-1;
        i += len;
        run = i;
    }
    if (!bytes_append(out, s + run, i - run)) return (size_t)-1;
    return i;
}

typedef struct {
    int32_t *p;
    size_t n, cap;
} ids_buf;

static int ids_push(ids_buf *b, int32_t id) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        int32_t *p = realloc(b->p, cap * sizeof *p);
        if (!p) return qrt_fail(QRT_ERR_MEMORY, "out of memory growing the token list to %zu ids", cap), 0;
        b->p = p, b->cap = cap;
    }
    b->p[b->n++] = id;
    return 1;
}

/* ---------------------------------------------------------------------------------------------------
 * GPT-2 byte↔unicode map: printable Latin-1 bytes stand for themselves, the other 68 bytes (controls,
 * space, 0x7F-0xA0, 0xAD) are moved to U+0100.. so that every token is a printable string. */

static void byte_level_map(uint32_t byte_to_cp[256]) {
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        byte_to_cp[b] = printable ? (uint32_t)b : next++;
    }
}

/* ---------------------------------------------------------------------------------------------------
 * Hash maps: strings → id (open addressing over an arena) and (left id, right id) → merge. */

static uint64_t hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

typedef struct {
    uint32_t off, len; /* key in the arena */
    int32_t id;        /* -1: empty slot */
} str_slot;

typedef struct {
    str_slot *slots;
    size_t mask;
    const uint8_t *arena; /* set once the arena stops moving */
} str_map;

static int str_map_init(str_map *m, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 16) cap *= 2;
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return qrt_fail(QRT_ERR_MEMORY, "out of memory for a %zu-entry token map", cap), 0;
    for (size_t i = 0; i < cap; i++) m->slots[i].id = -1;
    m->mask = cap - 1;
    return 1;
}

static int32_t str_map_get(const str_map *m, const uint8_t *arena, const void *key, size_t len) {
    for (size_t i = hash_bytes(key, len) & m->mask;; i = (i + 1) & m->mask) {
        const str_slot *s = &m->slots[i];
        if (s->id < 0) return -1;
        if (s->len == len && memcmp(arena + s->off, key, len) == 0) return s->id;
    }
}

/* Insert or overwrite (a later duplicate key wins, as in serde's map). */
static void str_map_put(str_map *m, const uint8_t *arena, uint32_t off, uint32_t len, int32_t id) {
    for (size_t i = hash_bytes(arena + off, len) & m->mask;; i = (i + 1) & m->mask) {
        str_slot *s = &m->slots[i];
        if (s->id < 0 || (s->len == len && memcmp(arena + s->off, arena + off, len) == 0)) {
            s->off = off, s->len = len, s->id = id;
            return;
        }
    }
}

typedef struct {
    uint64_t key; /* left << 32 | right; UINT64_MAX: empty */
    uint32_t rank;
    int32_t merged;
} merge_slot;

typedef struct {
    merge_slot *slots;
    size_t mask;
} merge_map;

static const merge_slot *merge_get(const merge_map *m, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t i = qrt_mix64(key) & m->mask;; i = (i + 1) & m->mask) {
        const merge_slot *s = &m->slots[i];
        if (s->key == key) return s;
        if (s->key == UINT64_MAX) return NULL;
    }
}

/* ---------------------------------------------------------------------------------------------------
 * The tokenizer */

typedef enum { SPLIT_ISOLATED, SPLIT_REMOVED } split_behavior;

typedef struct {
    pcre2_code *re;
    split_behavior behavior;
} split_step;

typedef struct {
    uint8_t *content; /* UTF-8 */
    size_t len;
    int32_t id;
    int normalized, lstrip, rstrip, single_word;
} added_token;

#define QRT_MAX_SPLITS 8

struct qrt_tokenizer {
    char *name;
    int32_t n_ids;             /* ids 0..n_ids-1 (model vocab and added tokens; holes allowed) */
    uint32_t *tok_off;         /* [n_ids+1] bytes of token i = tok_bytes[tok_off[i] .. tok_off[i+1]) */
    uint8_t *tok_bytes;
    uint8_t *tok_present;      /* [n_ids] 1 when some token has this id */
    uint8_t *tok_added;        /* [n_ids] 1 for added tokens */
    uint8_t *arena;            /* vocab keys, in their byte-level (JSON) spelling */
    str_map vocab;             /* byte-level spelling → id, model.vocab only */
    merge_map merges;
    int32_t byte_token[256];   /* id of the token for one byte, -1 when the vocab lacks it */
    uint32_t byte_to_cp[256];
    int16_t cp_to_byte[324];   /* inverse of byte_to_cp; -1 for code points outside the alphabet */
    int ignore_merges;
    int nfc;
    split_step splits[QRT_MAX_SPLITS];
    int n_splits;
    added_token *added;
    int n_added;
    uint8_t added_first[256]; /* 1 when some added token starts with this byte */
};

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

/* Spell raw bytes the byte-level way (each byte → its code point → UTF-8). */
static int byte_level_spell(const qrt_tokenizer *t, const uint8_t *s, size_t n, bytes_buf *out) {
    out->n = 0;
    if (!bytes_reserve(out, 2 * n)) return 0;
    for (size_t i = 0; i < n; i++) out->n += utf8_encode(t->byte_to_cp[s[i]], out->p + out->n);
    return 1;
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
        for (size_t s = qrt_mix64(key) & t->merges.mask;; s = (s + 1) & t->merges.mask) {
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

/* ---------------------------------------------------------------------------------------------------
 * Encoding */

typedef struct {
    int32_t id, prev, next; /* id -1: merged into its left neighbour */
} bpe_symbol;

typedef struct {
    uint32_t rank, pos;
    int32_t merged;
} bpe_candidate;

/* Per-call scratch, so a tokenizer can encode on many threads at once. */
typedef struct {
    const qrt_tokenizer *t;
    ids_buf out;
    bpe_symbol *sym;
    bpe_candidate *heap;
    size_t sym_cap, heap_cap, heap_n;
    bytes_buf spelled;
    pcre2_match_data *md[QRT_MAX_SPLITS];
    qrt_status st; /* why encoding stopped, when it is not out of memory */
} encoder;

static int cand_less(const bpe_candidate *a, const bpe_candidate *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(encoder *e, bpe_candidate c) {
    size_t i = e->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_less(&c, &e->heap[parent])) break;
        e->heap[i] = e->heap[parent];
        i = parent;
    }
    e->heap[i] = c;
}

static bpe_candidate heap_pop(encoder *e) {
    bpe_candidate top = e->heap[0], last = e->heap[--e->heap_n];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= e->heap_n) break;
        if (child + 1 < e->heap_n && cand_less(&e->heap[child + 1], &e->heap[child])) child++;
        if (!cand_less(&e->heap[child], &last)) break;
        e->heap[i] = e->heap[child];
        i = child;
    }
    if (e->heap_n) e->heap[i] = last;
    return top;
}

static void push_pair(encoder *e, int32_t left) {
    int32_t right = e->sym[left].next;
    if (right < 0) return;
    const merge_slot *m = merge_get(&e->t->merges, e->sym[left].id, e->sym[right].id);
    if (m) heap_push(e, (bpe_candidate){m->rank, (uint32_t)left, m->merged});
}

static int grow_scratch(encoder *e, size_t n) {
    if (n <= e->sym_cap) return 1;
    size_t cap = e->sym_cap ? e->sym_cap : 64;
    while (cap < n) cap *= 2;
    bpe_symbol *s = realloc(e->sym, cap * sizeof *s);
    if (s) e->sym = s;
    /* each merge pushes at most two candidates on top of the n-1 initial ones */
    bpe_candidate *h = realloc(e->heap, 3 * cap * sizeof *h);
    if (h) e->heap = h;
    if (!s || !h) return qrt_fail(QRT_ERR_MEMORY, "out of memory for a %zu-byte word", n), 0;
    e->sym_cap = cap;
    return 1;
}

/* BPE of one pre-token: bytes → byte tokens → apply the lowest-ranked merge (leftmost on ties)
 * until none applies, exactly HF's Word::merge_all order. */
static int bpe_piece(encoder *e, const uint8_t *s, size_t n) {
    const qrt_tokenizer *t = e->t;
    if (n == 0) return 1;
    if (n == 1) return t->byte_token[s[0]] < 0 || ids_push(&e->out, t->byte_token[s[0]]);
    if (t->ignore_merges) {
        if (!byte_level_spell(t, s, n, &e->spelled)) return 0;
        int32_t whole = str_map_get(&t->vocab, t->arena, e->spelled.p, e->spelled.n);
        if (whole >= 0) return ids_push(&e->out, whole);
    }
    if (!grow_scratch(e, n)) return 0;
    int32_t count = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_token[s[i]];
        if (id < 0) continue; /* HF drops characters missing from the vocab when there is no unk_token */
        e->sym[count] = (bpe_symbol){id, count - 1, -1};
        if (count) e->sym[count - 1].next = count;
        count++;
    }
    e->heap_n = 0;
    for (int32_t i = 0; i + 1 < count; i++) push_pair(e, i);
    while (e->heap_n) {
        bpe_candidate c = heap_pop(e);
        bpe_symbol *left = &e->sym[c.pos];
        if (left->id < 0 || left->next < 0) continue;
        bpe_symbol *right = &e->sym[left->next];
        const merge_slot *m = merge_get(&t->merges, left->id, right->id);
        if (!m || m->merged != c.merged) continue; /* stale: a neighbour changed since it was queued */
        left->id = c.merged;
        right->id = -1;
        left->next = right->next;
        if (left->next >= 0) e->sym[left->next].prev = (int32_t)c.pos;
        if (left->prev >= 0) push_pair(e, left->prev);
        push_pair(e, (int32_t)c.pos);
    }
    for (int32_t i = count ? 0 : -1; i >= 0; i = e->sym[i].next)
        if (!ids_push(&e->out, e->sym[i].id)) return 0;
    return 1;
}

/* Apply split step k (and the ones after it) to s[0..n), then BPE each final piece. */
static int split_and_encode(encoder *e, int k, const uint8_t *s, size_t n) {
    const qrt_tokenizer *t = e->t;
    if (n == 0) return 1;
    if (k == t->n_splits) return bpe_piece(e, s, n);
    const split_step *step = &t->splits[k];
    pcre2_match_data *md = e->md[k];
    size_t at = 0, gap = 0; /* gap: start of text not yet emitted */
    while (at < n) {
        int rc = pcre2_match(step->re, s, n, at, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            char msg[128];
            pcre2_get_error_message(rc, (PCRE2_UCHAR *)msg, sizeof msg);
            e->st = qrt_fail(QRT_ERR_UNSUPPORTED, "%s: the pre-tokenizer regex failed: %s", t->name, msg);
            return 0;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* an empty match splits nothing: step over one character */
            size_t len = 1;
            while (ms + len < n && (s[ms + len] & 0xC0) == 0x80) len++;
            at = ms + len;
            continue;
        }
        if (!split_and_encode(e, k + 1, s + gap, ms - gap)) return 0;
        if (step->behavior == SPLIT_ISOLATED && !split_and_encode(e, k + 1, s + ms, me - ms)) return 0;
        at = gap = me;
    }
    return split_and_encode(e, k + 1, s + gap, n - gap);
}

/* Normalize (NFC) then pre-tokenize and BPE one stretch of text between added tokens. */
static int encode_plain(encoder *e, const uint8_t *s, size_t n);

static int is_unicode_space(const uint8_t *s, size_t n, size_t *len) {
    uint32_t cp = utf8_decode(s, len);
    (void)n;
    return (cp >= 9 && cp <= 13) || cp == 32 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

static int is_word_char_before(const uint8_t *s, size_t at) {
    if (at == 0) return 0;
    size_t i = at - 1;
    while (i > 0 && (s[i] & 0xC0) == 0x80) i--;
    size_t len;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)utf8_decode(s + i, &len));
    return c <= UTF8PROC_CATEGORY_LO || (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO) || s[i] == '_';
}

static int is_word_char_at(const uint8_t *s, size_t n, size_t at) {
    if (at >= n) return 0;
    size_t len;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)utf8_decode(s + at, &len));
    return c <= UTF8PROC_CATEGORY_LO || (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO) || s[at] == '_';
}

/* Find the leftmost-longest added token of the given kind (normalized or not) in s[from..n). */
static const added_token *find_added(const qrt_tokenizer *t, int normalized, const uint8_t *s, size_t n, size_t from,
                                     size_t *pos) {
    for (size_t i = from; i < n; i++) {
        if (!t->added_first[s[i]]) continue;
        const added_token *best = NULL;
        for (int k = 0; k < t->n_added; k++) {
            const added_token *a = &t->added[k];
            if (a->normalized != normalized || a->len > n - i || (best && a->len <= best->len)) continue;
            if (memcmp(s + i, a->content, a->len) == 0) best = a;
        }
        if (best) return *pos = i, best;
    }
    return NULL;
}

/* Cut s at added tokens of one kind; the stretches between go to `rest` (NFC + BPE, or BPE only). */
static int encode_with_added(encoder *e, int normalized, const uint8_t *s, size_t n,
                             int (*rest)(encoder *, const uint8_t *, size_t)) {
    const qrt_tokenizer *t = e->t;
    size_t gap = 0, from = 0, pos;
    const added_token *a;
    while ((a = find_added(t, normalized, s, n, from, &pos))) {
        size_t start = pos, end = pos + a->len;
        from = end;
        if (a->single_word && (is_word_char_before(s, start) || is_word_char_at(s, n, end))) continue;
        size_t len;
        if (a->lstrip) /* the token swallows the whitespace on its left */
            while (start > gap) {
                size_t i = start - 1;
                while (i > gap && (s[i] & 0xC0) == 0x80) i--;
                if (!is_unicode_space(s + i, n - i, &len)) break;
                start = i;
            }
        if (a->rstrip)
            while (end < n && is_unicode_space(s + end, n - end, &len)) end += len;
        if (!rest(e, s + gap, start - gap) || !ids_push(&e->out, a->id)) return 0;
        gap = from = end;
    }
    return rest(e, s + gap, n - gap);
}

static int encode_normalized(encoder *e, const uint8_t *s, size_t n) {
    return split_and_encode(e, 0, s, n);
}

static int encode_plain(encoder *e, const uint8_t *s, size_t n) {
    if (n == 0) return 1;
    int ascii = 1;
    for (size_t i = 0; i < n && ascii; i++) ascii = s[i] < 0x80;
    if (!e->t->nfc || ascii) return encode_with_added(e, 1, s, n, encode_normalized);
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t m = utf8proc_map(s, (utf8proc_ssize_t)n, &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (m < 0) {
        e->st = qrt_fail(QRT_ERR_ARG, "NFC normalization failed: %s", utf8proc_errmsg(m));
        return 0;
    }
    int ok = encode_with_added(e, 1, nfc, (size_t)m, encode_normalized);
    free(nfc);
    return ok;
}

qrt_status qrt_tokenize(const qrt_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n_ids) {
    *ids = NULL, *n_ids = 0;
    if (!t || (!text && len)) return qrt_fail(QRT_ERR_ARG, "qrt_tokenize: NULL tokenizer or text");
    size_t bad;
    if (!qrt_utf8_valid((const uint8_t *)text, len, &bad))
        return qrt_fail(QRT_ERR_ARG, "the text is not valid UTF-8: byte 0x%02X at offset %zu", (uint8_t)text[bad], bad);
    encoder e = {.t = t};
    int ok = 1;
    for (int k = 0; k < t->n_splits && ok; k++) {
        e.md[k] = pcre2_match_data_create_from_pattern(t->splits[k].re, NULL);
        if (!e.md[k]) ok = (qrt_fail(QRT_ERR_MEMORY, "out of memory for regex match data"), 0);
    }
    if (ok) ok = encode_with_added(&e, 0, (const uint8_t *)(text ? text : ""), len, encode_plain);
    for (int k = 0; k < t->n_splits; k++) pcre2_match_data_free(e.md[k]);
    free(e.sym), free(e.heap), free(e.spelled.p);
    if (!ok) {
        free(e.out.p);
        return e.st != QRT_OK ? e.st : QRT_ERR_MEMORY;
    }
    *ids = e.out.p ? e.out.p : calloc(1, sizeof(int32_t)); /* never NULL on success, even for "" */
    *n_ids = e.out.n;
    return *ids ? QRT_OK : qrt_fail(QRT_ERR_MEMORY, "out of memory");
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
