/* The HTTP side of `qwenrt serve`, on libmicrohttpd with one thread per connection: a handler may block
 * while its job waits in the queue or streams, without holding up other connections. Every failure is a
 * JSON error {"error": {"message", "type", "code"}} with a 4xx/5xx status. */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server.h"

typedef struct {
    qrt_engine *engine;
    qrt_metrics *metrics;
    size_t max_body;
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

static enum MHD_Result send_error(server *sv, struct MHD_Connection *c, const char *route_name, int status,
                                  const char *code, const char *message) {
    const char *type = status == 503 ? "server_error" : status >= 500 ? "server_error" : "invalid_request_error";
    char *body = qrt_oa_error_json(message, type, code);
    enum MHD_Result ok = send_body(sv, c, route_name, status, "application/json", body ? body : "{}", body ? strlen(body) : 2);
    free(body);
    return ok;
}

static enum MHD_Result send_json(server *sv, struct MHD_Connection *c, const char *route_name, const char *body) {
    return send_body(sv, c, route_name, 200, "application/json", body, strlen(body));
}

/* ------------------------------------------------------------------------------------------------
 * Streaming */

static ssize_t read_stream(void *cls, uint64_t pos, char *buf, size_t max) {
    size_t n = qrt_job_read(cls, buf, max);
    return n ? (ssize_t)n : MHD_CONTENT_READER_END_OF_STREAM;
}

/* Called when the response ends, including when the client went away mid-stream: the job is cancelled. */
static void end_stream(void *cls) { qrt_job_release(cls); }

static enum MHD_Result send_stream(server *sv, struct MHD_Connection *c, const char *route_name, qrt_job *job) {
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, read_stream, job, end_stream);
    if (!r) {
        qrt_job_release(job);
        return MHD_NO;
    }
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
    if (!qrt_oa_parse(kind, rq->body.p ? rq->body.p : "", rq->body.n, qrt_engine_dialect(sv->engine),
                      qrt_engine_vocab(sv->engine), &req, err, sizeof err))
        return send_error(sv, c, rq->route, 400, "invalid_request", err);
    int status;
    qrt_job *job = qrt_engine_submit(sv->engine, &req, &status, err, sizeof err);
    qrt_oa_request_free(&req); /* what submit did not take */
    if (!job)
        return send_error(sv, c, rq->route, status, status == 503 ? "server_busy" : "invalid_request", err);
    if (qrt_job_streamed(job)) return send_stream(sv, c, rq->route, job);
    size_t len;
    const char *body = qrt_job_wait(job, &status, &len);
    enum MHD_Result ok = send_body(sv, c, rq->route, status, "application/json", body, len);
    qrt_job_release(job);
    return ok;
}

static enum MHD_Result models(server *sv, struct MHD_Connection *c) {
    json_t *name_json = json_string(qrt_engine_model_name(sv->engine));
    char *name = name_json ? json_dumps(name_json, JSON_ENCODE_ANY) : NULL;
    json_decref(name_json);
    qrt_buf b = {0};
    qrt_buf_addf(&b, "{\"object\":\"list\",\"data\":[{\"id\":%s,\"object\":\"model\",\"created\":%lld,\"owned_by\":\"qwenrt\"}]}",
                 name ? name : "\"model\"", (long long)time(NULL));
    free(name);
    enum MHD_Result ok = send_json(sv, c, "/v1/models", b.p ? b.p : "{}");
    qrt_buf_free(&b);
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

    server sv = {.metrics = qrt_metrics_new(), .max_body = o->max_body};
    if (!sv.metrics || !(sv.engine = qrt_engine_new(&o->engine, sv.metrics))) {
        qrt_metrics_free(sv.metrics);
        return 1;
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | family_flags,
        (uint16_t)o->port, NULL,
        NULL, handle, &sv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, request_done,
        &sv, MHD_OPTION_CONNECTION_LIMIT, (unsigned)(o->engine.queue_max + 64), MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)600, MHD_OPTION_END);
    if (!d) {
        char endpoint[INET6_ADDRSTRLEN + 16];
        format_endpoint(&addr, (unsigned)o->port, endpoint, sizeof endpoint);
        fprintf(stderr, "qwenrt serve: cannot listen on %s (in use, or not an address of this machine); pick "
                "another --port or --host\n", endpoint);
        qrt_engine_free(sv.engine);
        qrt_metrics_free(sv.metrics);
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    char endpoint[INET6_ADDRSTRLEN + 16];
    format_endpoint(&addr, info ? (unsigned)info->port : (unsigned)o->port, endpoint, sizeof endpoint);
    fprintf(stderr, "qwenrt serve: model %s, listening on http://%s\n", qrt_engine_model_name(sv.engine), endpoint);
    fflush(stderr);
    int sig = 0;
    sigwait(&stop_signals, &sig);
    fprintf(stderr, "qwenrt serve: %s, stopping\n", sig == SIGINT ? "interrupted" : "terminated");
    qrt_engine_stop(sv.engine); /* wakes every connection thread, so the daemon can join them */
    MHD_stop_daemon(d);
    qrt_engine_free(sv.engine);
    qrt_metrics_free(sv.metrics);
    return 0;
}
