/* Stop strings, reasoning and tool-call splitting of generated text (see output.h). Two stages: the stop
 * stage trims at the first stop string; what it lets through goes to the tag stage, which routes text to
 * reasoning, content or tools at </think> and <tool_call>. */
#include "server/output.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int qrt_buf_add(qrt_buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return 0;
        b->p = p, b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 1;
}

int qrt_buf_addf(qrt_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return 0;
    if ((size_t)n < sizeof small) return qrt_buf_add(b, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) return 0;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int ok = qrt_buf_add(b, big, (size_t)n);
    free(big);
    return ok;
}

void qrt_buf_free(qrt_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

static void buf_drop_front(qrt_buf *b, size_t n) {
    if (!n) return;
    memmove(b->p, b->p + n, b->n - n);
    b->n -= n;
    if (b->p) b->p[b->n] = 0;
}

static long find(const char *hay, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; k && i + k <= n; i++)
        if (!memcmp(hay + i, needle, k)) return (long)i;
    return -1;
}

/* The length of the longest tail of s[0..n) that is a proper prefix of word (a possible start of it). */
static size_t partial_tail(const char *s, size_t n, const char *word) {
    size_t k = strlen(word);
    for (size_t len = k > 0 ? k - 1 : 0; len > 0; len--)
        if (len <= n && !memcmp(s + n - len, word, len)) return len;
    return 0;
}

int qrt_stop_init(qrt_stop_filter *f, const char *const *stops, int n_stops) {
    memset(f, 0, sizeof *f);
    for (int i = 0; i < n_stops && f->n_stops < QRT_MAX_STOPS; i++) {
        if (!stops[i] || !*stops[i]) continue;
        if (!(f->stops[f->n_stops] = strdup(stops[i]))) return 0;
        f->n_stops++;
    }
    return 1;
}

void qrt_stop_free(qrt_stop_filter *f) {
    for (int i = 0; i < f->n_stops; i++) free(f->stops[i]);
    qrt_buf_free(&f->hold);
    memset(f, 0, sizeof *f);
}

int qrt_stop_push(qrt_stop_filter *f, const char *text, size_t n, qrt_text_sink sink, void *user) {
    if (f->stopped) return 1;
    qrt_buf *h = &f->hold;
    if (!qrt_buf_add(h, text, n)) return 0;
    long first = -1;
    for (int i = 0; i < f->n_stops; i++) {
        long at = find(h->p, h->n, f->stops[i]);
        if (at >= 0 && (first < 0 || at < first)) first = at;
    }
    if (first >= 0) {
        f->stopped = 1;
        int ok = sink(user, h->p, (size_t)first);
        h->n = 0;
        return ok;
    }
    size_t keep = 0;
    for (int i = 0; i < f->n_stops; i++) {
        size_t k = partial_tail(h->p, h->n, f->stops[i]);
        if (k > keep) keep = k;
    }
    if (!sink(user, h->p, h->n - keep)) return 0;
    buf_drop_front(h, h->n - keep);
    return 1;
}

int qrt_stop_finish(qrt_stop_filter *f, qrt_text_sink sink, void *user) {
    int ok = f->hold.n ? sink(user, f->hold.p, f->hold.n) : 1;
    f->hold.n = 0;
    return ok;
}

int qrt_output_init(qrt_output *o, int in_reasoning, int parse_tools, const char *const *stops, int n_stops) {
    memset(o, 0, sizeof *o);
    o->mode = in_reasoning ? QRT_OUT_REASONING : QRT_OUT_CONTENT;
    o->parse_tools = parse_tools;
    o->at_start = 1;
    return qrt_stop_init(&o->stop, stops, n_stops);
}

void qrt_output_free(qrt_output *o) {
    qrt_stop_free(&o->stop);
    qrt_buf_free(&o->reasoning), qrt_buf_free(&o->content), qrt_buf_free(&o->tools);
    qrt_buf_free(&o->tag_hold);
}

/* Append final text to the current mode. Chat output drops the newlines the template puts after <think>
 * and </think>, as the template itself does when it renders a past turn. */
static int emit(qrt_output *o, const char *s, size_t n) {
    if (o->mode == QRT_OUT_TOOLS) return qrt_buf_add(&o->tools, s, n);
    if (o->at_start)
        while (n && (*s == '\n' || *s == '\r')) s++, n--;
    if (!n) return 1;
    o->at_start = 0;
    return qrt_buf_add(o->mode == QRT_OUT_REASONING ? &o->reasoning : &o->content, s, n);
}

static size_t trailing_newlines(const char *s, size_t n) {
    size_t k = 0;
    while (k < n && s[n - 1 - k] == '\n') k++;
    return k;
}

static const char *mode_end_tag(const qrt_output *o) {
    if (o->mode == QRT_OUT_REASONING) return "</think>";
    if (o->mode == QRT_OUT_CONTENT && o->parse_tools) return "<tool_call>";
    return NULL;
}

/* Route the tag stage's held text; with final set, nothing is held back any more. */
static int route(qrt_output *o, int final) {
    qrt_buf *h = &o->tag_hold;
    for (;;) {
        if (o->mode == QRT_OUT_TOOLS) {
            int ok = qrt_buf_add(&o->tools, h->p, h->n);
            h->n = 0;
            return ok;
        }
        /* a model may open its reasoning with <think> although the prompt already did */
        if (o->mode == QRT_OUT_REASONING && o->at_start) {
            size_t lead = 0;
            while (lead < h->n && h->p[lead] == '\n') lead++;
            if (h->n - lead >= 7 && !memcmp(h->p + lead, "<think>", 7)) buf_drop_front(h, lead + 7);
            else if (!final && h->n - lead < 7 && !memcmp(h->p + lead, "<think>", h->n - lead)) return 1;
        }
        const char *tag = mode_end_tag(o);
        long at = tag ? find(h->p, h->n, tag) : -1;
        if (at >= 0) {
            size_t body = (size_t)at - trailing_newlines(h->p, (size_t)at);
            if (!emit(o, h->p, body)) return 0;
            size_t skip = (size_t)at + (o->mode == QRT_OUT_REASONING ? strlen(tag) : 0);
            buf_drop_front(h, skip); /* <tool_call> itself stays: it belongs to the tool text */
            o->mode = o->mode == QRT_OUT_REASONING ? QRT_OUT_CONTENT : QRT_OUT_TOOLS;
            o->at_start = 1;
            continue;
        }
        size_t keep = 0;
        if (!final && tag) {
            keep = partial_tail(h->p, h->n, tag);
            keep += trailing_newlines(h->p, h->n - keep); /* newlines right before a tag are dropped */
        }
        if (final && o->mode == QRT_OUT_REASONING) {
            size_t body = h->n - trailing_newlines(h->p, h->n);
            int ok = emit(o, h->p, body);
            h->n = 0;
            return ok;
        }
        if (!emit(o, h->p, h->n - keep)) return 0;
        buf_drop_front(h, h->n - keep);
        return 1;
    }
}

static int forward(qrt_output *o, const char *s, size_t n, int final) {
    return qrt_buf_add(&o->tag_hold, s, n) && route(o, final);
}

/* The stop stage's sink: what it lets through goes on to the tag stage. */
static int forward_more(void *o, const char *s, size_t n) { return forward(o, s, n, 0); }

int qrt_output_push(qrt_output *o, const char *text, size_t n) {
    int ok = qrt_stop_push(&o->stop, text, n, forward_more, o);
    o->stopped = o->stop.stopped;
    return ok;
}

int qrt_output_finish(qrt_output *o) {
    int ok = forward(o, o->stop.hold.p, o->stop.hold.n, 1);
    o->stop.hold.n = 0;
    return ok;
}
