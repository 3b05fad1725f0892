/* Server counters for GET /metrics, in the Prometheus text format. Thread-safe. */
#ifndef QRT_SERVER_METRICS_H
#define QRT_SERVER_METRICS_H

#include <stdint.h>

#include "qwenrt.h"
#include "server/output.h"

typedef struct qrt_metrics qrt_metrics;

qrt_metrics *qrt_metrics_new(void);
void qrt_metrics_free(qrt_metrics *m);
/* One finished HTTP request: route ("/v1/chat/completions", or "other" for unknown paths) and status. */
void qrt_metrics_request(qrt_metrics *m, const char *route, int status);
/* One finished generation: its stats, time to first token (ms, < 0 when no token came), prompt tokens
 * reused from the previous request, and whether the client went away before the end. */
void qrt_metrics_generation(qrt_metrics *m, const qrt_gen_stats *g, double ttft_ms, int32_t reused, int cancelled);
void qrt_metrics_queue_depth(qrt_metrics *m, int depth);
/* Appends the whole exposition text. */
int qrt_metrics_render(qrt_metrics *m, qrt_buf *out);

#endif
