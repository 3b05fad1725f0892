/* The HTTP side of `qwenrt serve`, on libmicrohttpd with one thread per connection: a handler may block
 * while its job waits in the queue or streams, without holding up other connections. Every failure is a
 * JSON error {"error": {"message", "type", "code"}} with a 4xx/5xx status. */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "server/server.h"
#include "util/common.h"

typedef struct {
    qrt_worker *worker;
    qrt_metrics *metrics;
    size_t max_body;
    const char *const *aliases;
    int n_aliases;
    pthread_mutex_t mu;
    pthread_cond_t streams_cv;
    int streams; /* streamed responses not yet ended (sent in full, or their client gone) */
} server;

/* Per connection: which route it asked for and the body received so far. */
typedef struct {
    const char *route;
    qrt_buf body;
    int too_large;
} request;

typedef struct {
    const char *path, *method;
} route;

static const route routes[] = {
    {"/v1/chat/completions", "POST"}, {"/v1/completions", "POST"}, {"/v1/models", "GET"},
    {"/health", "GET"},               {"/metrics", "GET"},
};

static const route *find_route(const char *url) {
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(url, routes[i].path)) return &routes[i];
    return NULL;
}

static enum MHD_Result send_body(server *sv, struct MHD_Connection *c, const char *route_name, int status,
                                 const char *content_type, const char *body, size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (status == 405) {
        const route *rt = find_route(route_name);
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, rt ? rt->method : "GET");
    }
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    qrt_metrics_request(sv->metrics, route_name, status);
    return ok;
}

static enum MHD_Result send_error_param(server *sv, struct MHD_Connection *c, const char *route_name, int status,
                                        const char *code, const char *param, const char *message) {
    const char *type = status >= 500 ? "server_error" : "invalid_request_error";
    char *body = qrt_oa_error_json_param(message, type, param, code);
    enum MHD_Result ok = send_body(sv, c, route_name, status, "application/json", body ? body : "{}", body ? strlen(body) : 2);
    free(body);
    return ok;
}

static enum MHD_Result send_error(server *sv, struct MHD_Connection *c, const char *route_name, int status,
                                  const char *code, const char *message) {
    return send_error_param(sv, c, route_name, status, code, NULL, message);
}

/* A request the parser refused: the field it names is the error's param (OpenAI's shape: code null). */
static enum MHD_Result send_bad_request(server *sv, struct MHD_Connection *c, const char *route_name, const char *err) {
    char param[128];
    int named = qrt_oa_error_param(err, param, sizeof param);
    return send_error_param(sv, c, route_name, 400, named ? NULL : "invalid_request", named ? param : NULL, err);
}

/* The "model" a request names must be the served id or one of its --alias names (absent: the served one). */
static int model_known(const server *sv, const char *name) {
    if (!name || !strcmp(name, qrt_worker_model_name(sv->worker))) return 1;
    for (int i = 0; i < sv->n_aliases; i++)
        if (!strcmp(name, sv->aliases[i])) return 1;
    return 0;
}

static enum MHD_Result send_json(server *sv, struct MHD_Connection *c, const char *route_name, const char *body) {
    return send_body(sv, c, route_name, 200, "application/json", body, strlen(body));
}

/* ------------------------------------------------------------------------------------------------
 * Streaming */

/* Whether the client hung up: its socket reads as closed (or fails). libmicrohttpd notices only when it next
 * writes, which a job in a long prefill does not give it the chance to do. */
static int client_gone(void *arg) {
    int fd = *(const int *)arg;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (fd < 0 || poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return 1;
    char b;
    return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static int connection_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

typedef struct {
    qrt_job *job;
    int fd;
    server *sv;
} stream_state;

static ssize_t read_stream(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_state *st = cls;
    size_t n = qrt_job_read(st->job, buf, max, client_gone, &st->fd);
    return n ? (ssize_t)n : MHD_CONTENT_READER_END_OF_STREAM;
}

/* Called when the response ends, including when the client went away mid-stream: the job is cancelled. */
static void end_stream(void *cls) {
    stream_state *st = cls;
    server *sv = st->sv;
    qrt_job_release(st->job);
    free(st);
    pthread_mutex_lock(&sv->mu);
    sv->streams--;
    pthread_cond_broadcast(&sv->streams_cv);
    pthread_mutex_unlock(&sv->mu);
}

/* Waits up to timeout_s for every streamed response to end: a stream cut at shutdown still sends its error event
 * and [DONE], which stopping the daemon first would drop with the connection. */
static void wait_streams_ended(server *sv, double timeout_s) {
    const struct timespec deadline = qrt_deadline_after(timeout_s);
    pthread_mutex_lock(&sv->mu);
    while (sv->streams > 0 && pthread_cond_timedwait(&sv->streams_cv, &sv->mu, &deadline) == 0) {
    }
    pthread_mutex_unlock(&sv->mu);
}

static enum MHD_Result send_stream(server *sv, struct MHD_Connection *c, const char *route_name, qrt_job *job) {
    stream_state *st = malloc(sizeof *st);
    struct MHD_Response *r =
        st ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, read_stream, st, end_stream) : NULL;
    if (!r) {
        free(st);
        qrt_job_release(job);
        return MHD_NO;
    }
    *st = (stream_state){job, connection_fd(c), sv};
    pthread_mutex_lock(&sv->mu);
    sv->streams++; /* end_stream, called when MHD destroys the response, counts it out */
    pthread_mutex_unlock(&sv->mu);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    qrt_metrics_request(sv->metrics, route_name, 200);
    return ok;
}

/* ------------------------------------------------------------------------------------------------
 * Routes */

static enum MHD_Result generate(server *sv, struct MHD_Connection *c, request *rq) {
    qrt_oa_kind kind = !strcmp(rq->route, "/v1/chat/completions") ? QRT_OA_CHAT : QRT_OA_COMPLETION;
    qrt_oa_request req;
    char err[1024];
    if (!qrt_oa_parse(kind, rq->body.p ? rq->body.p : "", rq->body.n, qrt_worker_dialect(sv->worker),
                      qrt_worker_vocab(sv->worker), &req, err, sizeof err))
        return send_bad_request(sv, c, rq->route, err);
    if (!model_known(sv, req.model)) {
        snprintf(err, sizeof err, "the model '%.200s' does not exist; this server serves '%.200s' (GET /v1/models "
                 "lists its names)", req.model, qrt_worker_model_name(sv->worker));
        qrt_oa_request_free(&req);
        return send_error_param(sv, c, rq->route, 404, "model_not_found", "model", err);
    }
    int status;
    qrt_job *job = qrt_worker_submit(sv->worker, &req, &status, err, sizeof err);
    qrt_oa_request_free(&req); /* what submit did not take */
    if (!job)
        return send_error(sv, c, rq->route, status, status == 503 ? "server_busy" : "invalid_request", err);
    if (qrt_job_streamed(job)) return send_stream(sv, c, rq->route, job);
    size_t len;
    int fd = connection_fd(c);
    const char *body = qrt_job_wait(job, &status, &len, client_gone, &fd);
    enum MHD_Result ok = body ? send_body(sv, c, rq->route, status, "application/json", body, len) : MHD_NO;
    qrt_job_release(job);
    return ok;
}

/* The served id first, then each --alias: every name a request's "model" may give. */
static enum MHD_Result models(server *sv, struct MHD_Connection *c) {
    json_t *data = json_array();
    for (int i = -1; i < sv->n_aliases; i++)
        json_array_append_new(data, json_pack("{s:s, s:s, s:I, s:s}", "id",
                                              i < 0 ? qrt_worker_model_name(sv->worker) : sv->aliases[i], "object",
                                              "model", "created", (json_int_t)time(NULL), "owned_by", "qwenrt"));
    json_t *j = json_pack("{s:s, s:o}", "object", "list", "data", data);
    char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    enum MHD_Result ok = send_json(sv, c, "/v1/models", body ? body : "{}");
    free(body);
    return ok;
}

static enum MHD_Result metrics(server *sv, struct MHD_Connection *c) {
    qrt_metrics_request(sv->metrics, "/metrics", 200); /* counted before rendering, so a scrape sees itself */
    qrt_buf b = {0};
    qrt_metrics_render(sv->metrics, &b);
    struct MHD_Response *r = MHD_create_response_from_buffer(b.n, b.p ? b.p : (char *)"", MHD_RESPMEM_MUST_COPY);
    qrt_buf_free(&b);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; version=0.0.4");
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ok;
}

/* The first call for a request sees only its headers: refuse what is wrong before reading a body. */
static enum MHD_Result begin_request(server *sv, struct MHD_Connection *c, const char *url, const char *method,
                                     request *rq) {
    const route *rt = find_route(url);
    if (!rt) {
        char msg[512];
        snprintf(msg, sizeof msg, "no route %.300s; the routes are POST /v1/chat/completions, POST /v1/completions, "
                 "GET /v1/models, GET /health, GET /metrics", url);
        return send_error(sv, c, "other", 404, "not_found", msg);
    }
    rq->route = rt->path;
    int head_of_get = !strcmp(method, "HEAD") && !strcmp(rt->method, "GET");
    if (strcmp(method, rt->method) && !head_of_get) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s does not accept %.20s; use %s", rt->path, method, rt->method);
        return send_error(sv, c, rt->path, 405, "method_not_allowed", msg);
    }
    const char *length = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (length && strtoull(length, NULL, 10) > sv->max_body) {
        char msg[256];
        snprintf(msg, sizeof msg, "the body has %s bytes; this server accepts at most %zu (--max-body)", length,
                 sv->max_body);
        return send_error(sv, c, rt->path, 413, "body_too_large", msg);
    }
    if (!strcmp(rt->method, "POST")) return MHD_YES; /* the body comes in the next calls */
    if (!strcmp(rt->path, "/health")) return send_json(sv, c, rt->path, "{\"status\":\"ok\"}");
    if (!strcmp(rt->path, "/v1/models")) return models(sv, c);
    return metrics(sv, c);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload_data, size_t *upload_size, void **state) {
    server *sv = cls;
    request *rq = *state;
    if (!rq) {
        if (!(rq = calloc(1, sizeof *rq))) return MHD_NO;
        *state = rq;
        return begin_request(sv, c, url, method, rq);
    }
    if (*upload_size) {
        if (rq->body.n + *upload_size > sv->max_body) rq->too_large = 1; /* keep reading, answer at the end */
        else if (!qrt_buf_add(&rq->body, upload_data, *upload_size)) rq->too_large = 1;
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->too_large) {
        char msg[256];
        snprintf(msg, sizeof msg, "the body is larger than %zu bytes (--max-body)", sv->max_body);
        return send_error(sv, c, rq->route, 413, "body_too_large", msg);
    }
    return generate(sv, c, rq);
}

static void request_done(void *cls, struct MHD_Connection *c, void **state, enum MHD_RequestTerminationCode why) {
    request *rq = *state;
    if (!rq) return;
    qrt_buf_free(&rq->body);
    free(rq);
    *state = NULL;
}

int qrt_serve_resolve(const char *host, int port, struct sockaddr_storage *addr, char *err, size_t err_size) {
    char name[256];
    const char *start = host;
    size_t len = strlen(host);
    if (len >= 2 && host[0] == '[' && host[len - 1] == ']') start++, len -= 2; /* [::1], as in a URL */
    if (len == 0 || len >= sizeof name) {
        snprintf(err, err_size, "--host '%.300s' is not an address or host name; pass e.g. 127.0.0.1, ::1 or "
                 "localhost", host);
        return 0;
    }
    memcpy(name, start, len), name[len] = 0;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(name, NULL, &hints, &res);
    if (rc != 0 || !res) {
        snprintf(err, err_size, "--host '%s' does not resolve (%s); pass an IPv4 or IPv6 address (127.0.0.1, ::1, "
                 "0.0.0.0, ::) or a host name of this machine", name, rc ? gai_strerror(rc) : "no address");
        return 0;
    }
    /* the first address, as a client connecting to the name would try first */
    memset(addr, 0, sizeof *addr);
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    if (addr->ss_family == AF_INET6) ((struct sockaddr_in6 *)addr)->sin6_port = htons((uint16_t)port);
    else ((struct sockaddr_in *)addr)->sin_port = htons((uint16_t)port);
    return 1;
}

/* "host:port" for the log line, with an IPv6 address in brackets as a URL writes it. */
static void format_endpoint(const struct sockaddr_storage *addr, unsigned port, char *out, size_t size) {
    char ip[INET6_ADDRSTRLEN] = "?";
    int v6 = addr->ss_family == AF_INET6;
    const void *a = v6 ? (const void *)&((const struct sockaddr_in6 *)addr)->sin6_addr
                       : (const void *)&((const struct sockaddr_in *)addr)->sin_addr;
    inet_ntop(addr->ss_family, a, ip, sizeof ip);
    snprintf(out, size, v6 ? "[%s]:%u" : "%s:%u", ip, port);
}

int qrt_serve(const qrt_serve_opts *o) {
    struct sockaddr_storage addr;
    char err[512];
    if (!qrt_serve_resolve(o->host, o->port, &addr, err, sizeof err)) {
        fprintf(stderr, "qwenrt serve: %s\n", err);
        return 2;
    }
    /* an IPv6 socket needs MHD told so; "::" takes IPv4 clients too (dual stack), as 0.0.0.0 takes every IPv4 one */
    unsigned family_flags = 0;
    if (addr.ss_family == AF_INET6)
        family_flags = IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)&addr)->sin6_addr) ? MHD_USE_DUAL_STACK
                                                                                           : MHD_USE_IPv6;
    /* SIGINT/SIGTERM are taken by sigwait below; every thread started from here inherits the mask */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    server sv = {.metrics = qrt_metrics_new(), .max_body = o->max_body, .aliases = o->aliases,
                 .n_aliases = o->n_aliases, .mu = PTHREAD_MUTEX_INITIALIZER, .streams_cv = PTHREAD_COND_INITIALIZER};
    if (!sv.metrics || !(sv.worker = qrt_worker_new(&o->worker, sv.metrics))) {
        qrt_metrics_free(sv.metrics);
        return 1;
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | family_flags,
        (uint16_t)o->port, NULL,
        NULL, handle, &sv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, request_done,
        &sv, MHD_OPTION_CONNECTION_LIMIT, (unsigned)(o->worker.queue_max + 64), MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)600, MHD_OPTION_END);
    if (!d) {
        char endpoint[INET6_ADDRSTRLEN + 16];
        format_endpoint(&addr, (unsigned)o->port, endpoint, sizeof endpoint);
        fprintf(stderr, "qwenrt serve: cannot listen on %s (in use, or not an address of this machine); pick "
                "another --port or --host\n", endpoint);
        qrt_worker_free(sv.worker);
        qrt_metrics_free(sv.metrics);
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    char endpoint[INET6_ADDRSTRLEN + 16];
    format_endpoint(&addr, info ? (unsigned)info->port : (unsigned)o->port, endpoint, sizeof endpoint);
    fprintf(stderr, "qwenrt serve: model %s, listening on http://%s\n", qrt_worker_model_name(sv.worker), endpoint);
    fflush(stderr);
    int sig = 0;
    sigwait(&stop_signals, &sig);
    fprintf(stderr, "qwenrt serve: %s, stopping (in-flight requests have %g s to finish)\n",
            sig == SIGINT ? "interrupted" : "terminated", o->shutdown_grace);
    fflush(stderr);
    qrt_worker_drain(sv.worker, o->shutdown_grace);
    qrt_worker_stop(sv.worker); /* wakes every connection thread, so the daemon can join them */
    wait_streams_ended(&sv, 2.0);
    MHD_stop_daemon(d);
    qrt_worker_free(sv.worker);
    qrt_metrics_free(sv.metrics);
    return 0;
}
