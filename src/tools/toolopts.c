/* Option values of the benchmark tools (bench, membw, doctor, tilebench), parsed strictly: every bad value is
 * an error naming the tool, the flag, what was expected and what was given, never a silent 0. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/tools.h"

int qrt_tool_int_list(const char *tool, const char *flag, const char *s, int lo, int hi, int cap, int *out, int *n) {
    *n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < lo || v > hi || (*end && *end != ',') || *n == cap || (*end == ',' && !end[1])) {
            fprintf(stderr, "qwenrt %s: %s expects %s%d comma-separated integers in [%d, %d], got '%s'\n", tool, flag,
                    cap > 1 ? "up to " : "", cap, lo, hi, s);
            return 0;
        }
        out[(*n)++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (!*n) fprintf(stderr, "qwenrt %s: %s is empty; expected integers in [%d, %d]\n", tool, flag, lo, hi);
    return *n > 0;
}

int qrt_tool_int(const char *tool, const char *flag, const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "qwenrt %s: %s expects an integer in [%d, %d], got '%s'\n", tool, flag, lo, hi, s);
        return 0;
    }
    *out = (int)v;
    return 1;
}

/* A limit as the user would type it: whole numbers in full (16777216, not %g's 1.67772e+07). */
static const char *limit_text(double v, char *buf, size_t size) {
    if (v >= -1e15 && v <= 1e15 && (double)(long long)v == v) snprintf(buf, size, "%lld", (long long)v);
    else snprintf(buf, size, "%g", v);
    return buf;
}

int qrt_tool_number(const char *tool, const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !(v >= lo && v <= hi)) {
        char lo_text[32], hi_text[32];
        fprintf(stderr, "qwenrt %s: %s expects a number in [%s, %s], got '%s'\n", tool, flag,
                limit_text(lo, lo_text, sizeof lo_text), limit_text(hi, hi_text, sizeof hi_text), s);
        return 0;
    }
    *out = v;
    return 1;
}

int qrt_tool_word(const char *tool, const char *flag, const char *s, const char *const *words, int n_words) {
    for (int i = 0; i < n_words; i++)
        if (!strcmp(s, words[i])) return i;
    char list[256] = "";
    for (int i = 0, len = 0; i < n_words && len < (int)sizeof list; i++)
        len += snprintf(list + len, sizeof list - (size_t)len, "%s%s", i ? (i + 1 == n_words ? " or " : ", ") : "",
                        words[i]);
    fprintf(stderr, "qwenrt %s: %s expects %s, got '%s'\n", tool, flag, list, s);
    return -1;
}

int qrt_tool_whole(const char *tool, const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || !((double)v >= lo && (double)v <= hi)) {
        char lo_text[32], hi_text[32];
        fprintf(stderr, "qwenrt %s: %s expects an integer in [%s, %s], got '%s'\n", tool, flag,
                limit_text(lo, lo_text, sizeof lo_text), limit_text(hi, hi_text, sizeof hi_text), s);
        return 0;
    }
    *out = (double)v;
    return 1;
}
