/* What the model writes, cut into what an OpenAI client expects: the text up to the first stop string
 * (the stop string itself trimmed), split into reasoning (before </think>), content, and tool-call text
 * (from the first <tool_call> on). It works on a stream: every push may make new reasoning or content
 * final, and a caller streaming deltas sends what grew since its last look. Text that could still be the
 * start of a stop string or a tag is held back until the next push decides, so deltas never need to be
 * taken back. */
#ifndef QRT_SERVER_OUTPUT_H
#define QRT_SERVER_OUTPUT_H

#include <stddef.h>

typedef struct {
    char *p;
    size_t n, cap;
} qrt_buf;

int qrt_buf_add(qrt_buf *b, const char *s, size_t n); /* 0 when out of memory */
int qrt_buf_addf(qrt_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void qrt_buf_free(qrt_buf *b);

#define QRT_MAX_STOPS 16

/* The stop stage on its own, for callers that want stop strings without the reasoning/tool split (the CLI's
 * generate --stop): text goes to the sink up to the first stop string; a tail that may begin one is held. */
typedef int (*qrt_text_sink)(void *user, const char *s, size_t n); /* 0 when out of memory */

typedef struct {
    char *stops[QRT_MAX_STOPS];
    int n_stops;
    int stopped;   /* a stop string matched: generation should end */
    qrt_buf hold;  /* tail that may begin a stop string */
} qrt_stop_filter;

/* stops are copied (empty ones skipped); 0 when out of memory. */
int qrt_stop_init(qrt_stop_filter *f, const char *const *stops, int n_stops);
/* Feed text; what is now final goes to sink. After a match, further text is ignored. 0 when out of memory. */
int qrt_stop_push(qrt_stop_filter *f, const char *text, size_t n, qrt_text_sink sink, void *user);
/* End of generation: the held tail goes to sink. */
int qrt_stop_finish(qrt_stop_filter *f, qrt_text_sink sink, void *user);
void qrt_stop_free(qrt_stop_filter *f);

typedef enum { QRT_OUT_REASONING, QRT_OUT_CONTENT, QRT_OUT_TOOLS } qrt_out_mode;

typedef struct {
    /* settings */
    qrt_stop_filter stop;
    int parse_tools; /* a <tool_call> ends the content */
    /* results so far (final: never taken back) */
    qrt_buf reasoning, content, tools;
    int stopped; /* a stop string matched: generation should end (stop.stopped, kept here for callers) */
    /* state */
    qrt_out_mode mode;
    qrt_buf tag_hold;  /* tail that may begin </think> or <tool_call>, or trailing newlines */
    int at_start;      /* no reasoning / content written yet in this mode: leading newlines are dropped */
} qrt_output;

/* in_reasoning: the prompt opened a <think> block (chat with thinking on). stops are copied. */
int qrt_output_init(qrt_output *o, int in_reasoning, int parse_tools, const char *const *stops, int n_stops);
/* Feed generated text; returns 0 when out of memory. After a stop string matched, further text is ignored. */
int qrt_output_push(qrt_output *o, const char *text, size_t n);
/* End of generation: what was held back becomes final. */
int qrt_output_finish(qrt_output *o);
void qrt_output_free(qrt_output *o);

#endif
