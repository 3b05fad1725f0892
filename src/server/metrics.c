/* Prometheus counters and histograms (see metrics.h). The label sets are small and fixed, so counters
 * live in plain arrays guarded by one mutex: a scrape and a request never contend for long. */
#include "server/metrics.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const char *const routes[] = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics",
                                     "other"};
#define N_ROUTES (int)(sizeof routes / sizeof routes[0])
#define N_STATUS_SLOTS 8 /* distinct status codes remembered per route */

/* Time to first token in seconds; decode rate in tokens per second. */
static const double ttft_bounds[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double rate_bounds[] = {1, 5, 10, 20, 50, 100, 200, 500, 1000, 5000};
#define N_TTFT (int)(sizeof ttft_bounds / sizeof ttft_bounds[0])
#define N_RATE (int)(sizeof rate_bounds / sizeof rate_bounds[0])

typedef struct {
    uint64_t bucket[16]; /* cumulative counts are computed at render time */
    uint64_t count;
    double sum;
} histogram;

struct qrt_metrics {
    pthread_mutex_t mu;
    int status[N_ROUTES][N_STATUS_SLOTS];
    uint64_t requests[N_ROUTES][N_STATUS_SLOTS];
    uint64_t prompt_tokens, reused_tokens, generated_tokens, generations, cancelled;
    uint64_t spec_attempts, spec_accepts, spec_full_accepts, spec_drafted;
    histogram ttft, rate;
    int queue_depth;
};

qrt_metrics *qrt_metrics_new(void) {
    qrt_metrics *m = calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->mu, NULL);
    return m;
}

void qrt_metrics_free(qrt_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static int route_index(const char *route) {
    for (int i = 0; i < N_ROUTES - 1; i++)
        if (!strcmp(route, routes[i])) return i;
    return N_ROUTES - 1;
}

void qrt_metrics_request(qrt_metrics *m, const char *route, int status) {
    int r = route_index(route);
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < N_STATUS_SLOTS; i++) {
        if (m->status[r][i] == 0) m->status[r][i] = status;
        if (m->status[r][i] == status) {
            m->requests[r][i]++;
            break;
        }
    }
    pthread_mutex_unlock(&m->mu);
}

static void observe(histogram *h, const double *bounds, int n, double v) {
    for (int i = 0; i < n; i++)
        if (v <= bounds[i]) {
            h->bucket[i]++;
            break;
        }
    h->count++;
    h->sum += v;
}

void qrt_metrics_generation(qrt_metrics *m, const qrt_gen_stats *g, double ttft_ms, int32_t reused, int cancelled) {
    pthread_mutex_lock(&m->mu);
    m->generations++;
    m->cancelled += cancelled != 0;
    m->prompt_tokens += (uint64_t)g->n_prompt + (uint64_t)reused;
    m->reused_tokens += (uint64_t)reused;
    m->generated_tokens += (uint64_t)g->n_new;
    m->spec_attempts += (uint64_t)g->attempts;
    m->spec_accepts += (uint64_t)g->accepts;
    m->spec_full_accepts += (uint64_t)g->full_accepts;
    m->spec_drafted += (uint64_t)g->attempts * (uint64_t)g->spec_k;
    if (ttft_ms >= 0) observe(&m->ttft, ttft_bounds, N_TTFT, ttft_ms / 1e3);
    if (g->n_new > 1 && g->decode_ms > 0) observe(&m->rate, rate_bounds, N_RATE, (g->n_new - 1) / g->decode_ms * 1e3);
    pthread_mutex_unlock(&m->mu);
}

void qrt_metrics_queue_depth(qrt_metrics *m, int depth) {
    pthread_mutex_lock(&m->mu);
    m->queue_depth = depth;
    pthread_mutex_unlock(&m->mu);
}

static int render_histogram(qrt_buf *o, const char *name, const char *help, const histogram *h, const double *bounds,
                            int n) {
    int ok = qrt_buf_addf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cumulative = 0;
    for (int i = 0; i < n && ok; i++) {
        cumulative += h->bucket[i];
        ok = qrt_buf_addf(o, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)cumulative);
    }
    return ok && qrt_buf_addf(o, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                              (unsigned long long)h->count, name, h->sum, name, (unsigned long long)h->count);
}

static int render_counter(qrt_buf *o, const char *name, const char *help, uint64_t v) {
    return qrt_buf_addf(o, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

int qrt_metrics_render(qrt_metrics *m, qrt_buf *o) {
    pthread_mutex_lock(&m->mu);
    int ok = qrt_buf_addf(o, "# HELP qwenrt_requests_total HTTP requests answered, by route and status.\n"
                             "# TYPE qwenrt_requests_total counter\n");
    for (int r = 0; r < N_ROUTES && ok; r++)
        for (int i = 0; i < N_STATUS_SLOTS && m->status[r][i] && ok; i++)
            ok = qrt_buf_addf(o, "qwenrt_requests_total{route=\"%s\",status=\"%d\"} %llu\n", routes[r], m->status[r][i],
                              (unsigned long long)m->requests[r][i]);
    ok = ok && render_counter(o, "qwenrt_generations_total", "Generations run.", m->generations);
    ok = ok && render_counter(o, "qwenrt_generations_cancelled_total",
                              "Generations stopped early because the client disconnected.", m->cancelled);
    ok = ok && render_counter(o, "qwenrt_prompt_tokens_total", "Prompt tokens of all generations.", m->prompt_tokens);
    ok = ok && render_counter(o, "qwenrt_prompt_tokens_reused_total",
                              "Prompt tokens not prefilled because the previous request's state was reused.",
                              m->reused_tokens);
    ok = ok && render_counter(o, "qwenrt_generated_tokens_total", "Tokens generated.", m->generated_tokens);
    ok = ok && render_counter(o, "qwenrt_spec_cycles_total", "Speculative (MTP) cycles.", m->spec_attempts);
    ok = ok && render_counter(o, "qwenrt_spec_draft_tokens_total", "Draft tokens proposed by the MTP head.",
                              m->spec_drafted);
    ok = ok && render_counter(o, "qwenrt_spec_accepted_tokens_total", "Draft tokens accepted (bonus not counted).",
                              m->spec_accepts);
    ok = ok && render_counter(o, "qwenrt_spec_full_accepts_total", "Cycles that accepted every draft.",
                              m->spec_full_accepts);
    ok = ok && qrt_buf_addf(o, "# HELP qwenrt_queue_depth Requests waiting for the model.\n"
                               "# TYPE qwenrt_queue_depth gauge\nqwenrt_queue_depth %d\n", m->queue_depth);
    ok = ok && render_histogram(o, "qwenrt_ttft_seconds", "Time from request arrival to the first generated token.",
                                &m->ttft, ttft_bounds, N_TTFT);
    ok = ok && render_histogram(o, "qwenrt_decode_tokens_per_second", "Decode rate of each generation.", &m->rate,
                                rate_bounds, N_RATE);
    pthread_mutex_unlock(&m->mu);
    return ok;
}
