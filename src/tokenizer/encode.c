#include "tokenizer/tokenizer_internal.h"

#include <utf8proc.h>

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
