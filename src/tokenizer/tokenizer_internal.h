/* What the tokenizer's files share (tokenizer.c, load.c, encode.c): UTF-8, growable buffers, the byte-level
 * alphabet, the hash maps and the tokenizer's own struct. Small helpers, defined here as static inline. */
#ifndef QRT_TOKENIZER_INTERNAL_H
#define QRT_TOKENIZER_INTERNAL_H
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/tokenizer.h"

#include <pcre2.h>
#include <string.h>

#include "util/common.h"

/* ---------------------------------------------------------------------------------------------------
 * UTF-8 (Unicode Table 3-7) */

typedef enum { UTF8_VALID, UTF8_INVALID, UTF8_INCOMPLETE } utf8_kind;

/* Classify the sequence at s[0..n): VALID (*len = its length), INVALID (*len = the maximal subpart
 * that must become one U+FFFD, as Rust's from_utf8_lossy counts it) or INCOMPLETE (s holds a valid
 * prefix that the end of the buffer cuts short; *len = n). */
static inline utf8_kind utf8_classify(const uint8_t *s, size_t n, size_t *len) {
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


static inline size_t utf8_encode(uint32_t cp, uint8_t *out) {
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
static inline uint32_t utf8_decode(const uint8_t *s, size_t *len) {
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

static inline int bytes_reserve(bytes_buf *b, size_t extra) {
    if (b->n + extra + 1 <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra + 1) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) return qrt_fail(QRT_ERR_MEMORY, "out of memory growing a %zu-byte buffer", cap), 0;
    b->p = p, b->cap = cap;
    return 1;
}

static inline int bytes_append(bytes_buf *b, const void *src, size_t n) {
    if (!bytes_reserve(b, n)) return 0;
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
    b->p[b->n] = 0; /* always NUL-terminated for callers that print it */
    return 1;
}

/* Append s[0..n) with each invalid UTF-8 subpart replaced by U+FFFD. Unless final, an incomplete
 * sequence at the very end is left unconsumed (it may be completed by the next token). Returns the
 * bytes consumed, or (size_t)-1 when out of memory. */
static inline size_t append_utf8_lossy(bytes_buf *out, const uint8_t *s, size_t n, int final) {
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

static inline int ids_push(ids_buf *b, int32_t id) {
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

static inline void byte_level_map(uint32_t byte_to_cp[256]) {
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        byte_to_cp[b] = printable ? (uint32_t)b : next++;
    }
}

/* ---------------------------------------------------------------------------------------------------
 * Hash maps: strings → id (open addressing over an arena) and (left id, right id) → merge. */

static inline uint64_t hash_bytes(const void *p, size_t n) {
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

static inline int str_map_init(str_map *m, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 16) cap *= 2;
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return qrt_fail(QRT_ERR_MEMORY, "out of memory for a %zu-entry token map", cap), 0;
    for (size_t i = 0; i < cap; i++) m->slots[i].id = -1;
    m->mask = cap - 1;
    return 1;
}

static inline int32_t str_map_get(const str_map *m, const uint8_t *arena, const void *key, size_t len) {
    for (size_t i = hash_bytes(key, len) & m->mask;; i = (i + 1) & m->mask) {
        const str_slot *s = &m->slots[i];
        if (s->id < 0) return -1;
        if (s->len == len && memcmp(arena + s->off, key, len) == 0) return s->id;
    }
}

/* Insert or overwrite (a later duplicate key wins, as in serde's map). */
static inline void str_map_put(str_map *m, const uint8_t *arena, uint32_t off, uint32_t len, int32_t id) {
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

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static inline const merge_slot *merge_get(const merge_map *m, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t i = mix64(key) & m->mask;; i = (i + 1) & m->mask) {
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


/* Spell raw bytes the byte-level way (each byte → its code point → UTF-8). */
static inline int byte_level_spell(const qrt_tokenizer *t, const uint8_t *s, size_t n, bytes_buf *out) {
    out->n = 0;
    if (!bytes_reserve(out, 2 * n)) return 0;
    for (size_t i = 0; i < n; i++) out->n += utf8_encode(t->byte_to_cp[s[i]], out->p + out->n);
    return 1;
}
#endif
