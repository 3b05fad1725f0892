/* End-to-end test of `qwenrt serve`: starts the real server on a free loopback port with a fixture model and
 * drives it over HTTP (plain sockets, jansson for JSON, pthreads for concurrent clients).
 *
 * usage: test_server QWENRT_BINARY TEST_DATA_DIR SCRATCH_DIR [full|small]
 *
 * The fixture is made here: `qwenrt synth --preset tiny --mtp` (vocab 2048) plus tests/data/tokenizer/tok-small.json
 * with 15 filler special tokens so the tokenizer covers every id the model can emit. Nothing is committed.
 * `small` (the AddressSanitizer build) sends fewer generating requests and a shorter prefix-reuse prompt.
 *
 * Checked: /health and /v1/models; greedy parity of completions and chat (plain and streamed, thinking off and
 * on) with `qwenrt generate`; stop strings; prompt prefix reuse; malformed requests (400/404/405/413 with a JSON
 * error body); a client that disconnects mid-stream; a full queue (503); a load of mixed requests from 8 threads;
 * /metrics; refused fields naming the field (response_format, tools, tool_choice, sampler ranges) and tool_choice
 * forcing a call; logit_bias, min_p and the penalties (against qwenrt generate's flags); logprobs, plain and
 * streamed; unknown model names (404) and --alias; a hang-up during a long prefill cancelling it; SIGTERM draining
 * in-flight requests for --shutdown-grace, then cutting the rest with an error; a clean exit on SIGTERM. The official
 * `openai` Python client is driven against the same server by tests/openai_client.py (.ci/run).
 *
 * Nothing may hang: every socket operation and child process has a deadline, and a watchdog kills the server and
 * fails the test before CTest's own timeout would leave the server running. */
#define _XOPEN_SOURCE 700 /* POSIX 2008 with XSI: nftw and its FTW_DEPTH, FTW_PHYS */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

extern char **environ;

#define WATCHDOG_S 570     /* under CTest's TIMEOUT of 600 s, so we still get to kill the server */
#define START_S 120        /* the server loads the model and prints its port */
#define STOP_S 60          /* SIGTERM to exit */
#define CHILD_S 120        /* qwenrt synth / generate / detokenize */
#define REQUEST_S 300      /* one HTTP exchange */
#define QUEUE 3            /* --queue: requests waiting behind the running one */
#define CHUNK 100000       /* the chunk size of a chunked request body */

static const char *qwenrt, *data_dir, *scratch;
static char fx[1024];
static bool small_mode;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void sleep_ms(int ms) {
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static bool streq(const char *a, const char *b) { return a && b && !strcmp(a, b); }

/* ==== Child processes ==== */

/* The children a failure must not leave behind: the watchdog (a signal handler) and exit() kill them. */
static volatile sig_atomic_t server_pid, child_pid;

static void kill_children(void) {
    if (child_pid > 0) kill((pid_t)child_pid, SIGKILL);
    if (server_pid > 0) kill((pid_t)server_pid, SIGKILL);
}

static void on_watchdog(int sig) {
    (void)sig;
    static const char msg[] = "FAIL the server test ran past its watchdog; the server is killed\n";
    kill_children();
    ssize_t w = write(2, msg, sizeof msg - 1); /* write(2): async-signal-safe, unlike stdio */
    (void)w;
    _exit(1);
}

static void at_exit(void) {
    kill_children();
    if (server_pid > 0) waitpid((pid_t)server_pid, NULL, 0);
}

/* A fatal setup error: nothing after it can be tested. exit() runs at_exit, which kills the server. */
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

/* Starts argv with stdout and stderr on the given descriptors (stdin is /dev/null); -1 if it cannot start. */
static pid_t spawn(char *const argv[], int out_fd, int err_fd) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    return rc ? -1 : pid;
}

/* The exit status of pid, waiting at most timeout_s; on timeout it is killed and the result is -1. A child
 * killed by a signal gives 128 + the signal, as a shell reports it. */
static int wait_for(pid_t pid, double timeout_s) {
    double deadline = now_s() + timeout_s;
    int st = 0;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (now_s() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return -1;
        }
        sleep_ms(10);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Runs argv to completion within CHILD_S; its stdout is returned in *out (malloc'd, NUL-terminated) when out is
 * given, else discarded. stderr stays the test's. Dies on a start failure, a timeout or a non-zero exit: every
 * caller needs the output to go on. */
static void run(char *const argv[], char **out) {
    int p[2];
    if (pipe(p)) die("pipe: %s", strerror(errno));
    pid_t pid = spawn(argv, p[1], 2);
    close(p[1]);
    if (pid < 0) die("cannot start %s", argv[0]);
    child_pid = pid;
    size_t n = 0, cap = 4096;
    char *buf = malloc(cap);
    double deadline = now_s() + CHILD_S;
    for (;;) {
        struct pollfd pf = {p[0], POLLIN, 0};
        int left = (int)((deadline - now_s()) * 1000);
        if (left <= 0 || poll(&pf, 1, left) <= 0) die("%s %s: no end within %d s", argv[0], argv[1], CHILD_S);
        if (n + 1024 > cap) buf = realloc(buf, cap *= 2);
        ssize_t got = read(p[0], buf + n, cap - n - 1);
        if (got <= 0) break;
        n += (size_t)got;
    }
    close(p[0]);
    buf[n] = 0;
    int rc = wait_for(pid, CHILD_S);
    child_pid = 0;
    if (rc) die("%s %s exited %d", argv[0], argv[1], rc);
    if (out) *out = buf;
    else free(buf);
}

/* ==== The fixture ==== */

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb, (void)type, (void)ftw;
    return remove(path);
}

/* The fixture model, made once per scratch folder: tokenizer.json appears last (by a rename), so its presence
 * means the rest is complete. */
static void make_fixture(void) {
    char tok_path[1100], tmp_path[1200], src[1100];
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", fx);
    if (access(tok_path, F_OK) == 0) return;
    nftw(fx, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    mkdir(scratch, 0777);
    char *argv[] = {(char *)qwenrt, "synth", "--preset", "tiny", "--format", "bf16", "--mtp", "--threads", "1",
                    fx, NULL};
    run(argv, NULL); /* synth's summary on stdout is noise here */

    snprintf(src, sizeof src, "%s/tokenizer/tok-small.json", data_dir);
    json_error_t err;
    json_t *tok = json_load_file(src, JSON_ALLOW_NUL, &err);
    if (!tok) die("%s: %s", src, err.text);
    json_t *added = json_object_get(tok, "added_tokens");
    for (int id = 2033; id < 2048; id++) {
        char content[32];
        snprintf(content, sizeof content, "<|filler_%d|>", id);
        json_array_append_new(added, json_pack("{s:i,s:s,s:b,s:b,s:b,s:b,s:b}", "id", id, "content", content,
                                               "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0,
                                               "special", 1));
    }
    snprintf(tmp_path, sizeof tmp_path, "%s.tmp", tok_path);
    if (json_dump_file(tok, tmp_path, 0) || rename(tmp_path, tok_path)) die("cannot write %s", tok_path);
    json_decref(tok);
}

/* ==== The server ==== */

static int port;

/* The port from the "listening on http://HOST:PORT" line of the log, once that line is complete; 0 before. */
static int port_in_log(const char *log) {
    FILE *f = fopen(log, "r");
    if (!f) return 0;
    char line[512];
    int p = 0;
    while (!p && fgets(line, sizeof line, f)) {
        char *at = strstr(line, "listening on http://"), *colon = strrchr(line, ':');
        if (at && colon > at + 20 && strchr(line, '\n')) p = atoi(colon + 1);
    }
    fclose(f);
    return p;
}

static void print_log(const char *log) {
    FILE *f = fopen(log, "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) fputs(line, stderr);
    if (f) fclose(f);
}

/* Starts the server with its stderr in SCRATCH/server.log (a file, not a pipe: nothing has to drain it) and
 * waits for it to say which port it got. */
static void start_server(char *const extra[]) {
    char log[1100];
    snprintf(log, sizeof log, "%s/server.log", scratch);
    char *argv[32] = {(char *)qwenrt, "serve", "-m", fx, "--port", "0", "--threads", "1", "--device", "cpu"};
    int n = 10;
    for (int i = 0; extra[i] && n < 31; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    int log_fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0666), devnull = open("/dev/null", O_WRONLY);
    if (log_fd < 0 || devnull < 0) die("cannot open %s", log);
    pid_t pid = spawn(argv, devnull, log_fd);
    close(log_fd);
    close(devnull);
    if (pid < 0) die("cannot start %s serve", qwenrt);
    server_pid = pid;
    double deadline = now_s() + START_S;
    while (!(port = port_in_log(log))) {
        int st;
        bool exited = waitpid(pid, &st, WNOHANG) == pid;
        if (exited) server_pid = 0;
        if (exited || now_s() > deadline) {
            print_log(log);
            die("the server did not start (%s); its log is above", exited ? "it exited" : "no port in time");
        }
        sleep_ms(20);
    }
}

/* SIGTERM, then the exit status (-1: it hung and was killed). */
static int stop_server(void) {
    kill((pid_t)server_pid, SIGTERM);
    int rc = wait_for((pid_t)server_pid, STOP_S);
    server_pid = 0;
    return rc;
}

/* ==== HTTP client ==== */

typedef struct {
    int status; /* 0: no answer (connection error or timeout) */
    char *body; /* malloc'd, NUL-terminated, chunked encoding undone */
    size_t len;
} http_resp;

/* A connected socket to the server whose every send and recv gives up after timeout_s; -1 on failure. */
static int http_open(int timeout_s) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {timeout_s, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv); /* Linux applies it to connect too */
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = send(fd, p, n, 0);
        if (k <= 0) return false;
        p += k, n -= (size_t)k;
    }
    return true;
}

/* Undoes chunked transfer encoding in place; false if the framing is broken. */
static bool dechunk(char *b, size_t *len) {
    size_t in = 0, out = 0;
    for (;;) {
        char *end;
        unsigned long size = strtoul(b + in, &end, 16);
        char *crlf = strstr(end, "\r\n");
        if (end == b + in || !crlf) return false;
        in = (size_t)(crlf + 2 - b);
        if (size == 0) break;
        if (in + size + 2 > *len) return false;
        memmove(b + out, b + in, size);
        out += size, in += size + 2;
    }
    b[out] = 0;
    *len = out;
    return true;
}

/* Whether the header block has NAME: VALUE (case-insensitive, as HTTP header names are). */
static bool has_header(const char *headers, const char *name, const char *value) {
    size_t nl = strlen(name), vl = strlen(value);
    for (const char *l = headers; l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncasecmp(l, name, nl) && l[nl] == ':' && !strncasecmp(l + nl + 1 + strspn(l + nl + 1, " "), value, vl))
            return true;
    return false;
}

/* Reads the whole answer (the request said Connection: close, so it ends at EOF) and parses the status line and
 * body. Any timeout or broken framing gives status 0. */
static http_resp read_response(int fd, double deadline) {
    http_resp r = {0};
    size_t n = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    for (;;) {
        if (n + 4096 > cap) buf = realloc(buf, cap *= 2);
        ssize_t k = recv(fd, buf + n, cap - n - 1, 0);
        if (k == 0) break;
        if (k < 0 || now_s() > deadline) goto fail; /* SO_RCVTIMEO ran out, or the server trickles forever */
        n += (size_t)k;
    }
    buf[n] = 0;
    char *body = strstr(buf, "\r\n\r\n");
    if (!body || sscanf(buf, "HTTP/%*d.%*d %d", &r.status) != 1) goto fail;
    body[2] = 0; /* the headers, each line ending in \r\n, become a string of their own */
    bool chunked = has_header(strstr(buf, "\r\n") + 2, "transfer-encoding", "chunked");
    r.len = n - (size_t)(body + 4 - buf);
    memmove(buf, body + 4, r.len + 1);
    if (chunked && !dechunk(buf, &r.len)) goto fail;
    r.body = buf;
    return r;
fail:
    free(buf);
    return (http_resp){0};
}

/* One request: method, path and an optional body, with Content-Type: application/json as every client sends.
 * chunked sends the body in two chunks without a Content-Length. */
static http_resp request_ex(const char *method, const char *path, const char *body, size_t len, bool chunked) {
    int fd = http_open(REQUEST_S);
    if (fd < 0) return (http_resp){0};
    double deadline = now_s() + REQUEST_S;
    char head[512];
    int h = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\n", method, path);
    if (body && chunked) h += snprintf(head + h, sizeof head - (size_t)h, "Transfer-Encoding: chunked\r\n\r\n");
    else if (body) h += snprintf(head + h, sizeof head - (size_t)h, "Content-Length: %zu\r\n\r\n", len);
    else h += snprintf(head + h, sizeof head - (size_t)h, "\r\n");
    /* A send may fail when the server answers early (413) and closes; its answer is still there to read. */
    bool sent = send_all(fd, head, (size_t)h);
    if (sent && body && !chunked) sent = send_all(fd, body, len);
    for (size_t off = 0; sent && body && chunked && off < len; off += CHUNK) {
        size_t k = len - off < CHUNK ? len - off : CHUNK;
        char size[32];
        int s = snprintf(size, sizeof size, "%zx\r\n", k);
        sent = send_all(fd, size, (size_t)s) && send_all(fd, body + off, k) && send_all(fd, "\r\n", 2);
    }
    if (sent && body && chunked) send_all(fd, "0\r\n\r\n", 5);
    http_resp r = read_response(fd, deadline);
    close(fd);
    return r;
}

static http_resp request(const char *method, const char *path, const char *body, size_t len) {
    return request_ex(method, path, body, len, false);
}

static http_resp get(const char *path) { return request("GET", path, NULL, 0); }

/* ==== JSON ==== */

/* The value at a '/'-separated path ("choices/0/text": a number indexes an array); NULL where it is absent. */
static json_t *jp(json_t *j, const char *path) {
    while (j && *path) {
        char key[64];
        size_t n = strcspn(path, "/");
        snprintf(key, sizeof key, "%.*s", (int)n, path);
        j = json_is_array(j) ? json_array_get(j, (size_t)atoi(key)) : json_object_get(j, key);
        path += n + (path[n] == '/');
    }
    return j;
}

static const char *js(json_t *j, const char *path) { return json_string_value(jp(j, path)); }

/* An integer at path, -1 where there is none (every count checked here is >= 0). */
static long long ji(json_t *j, const char *path) {
    json_t *v = jp(j, path);
    return json_is_integer(v) ? json_integer_value(v) : -1;
}

/* A short printable form of j for failure messages; four rotating buffers, so a message may show a few. Main
 * thread only. */
static const char *show(json_t *j) {
    static char bufs[4][320];
    static int next;
    char *b = bufs[next++ % 4], *s = j ? json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    snprintf(b, sizeof bufs[0], "%.300s", s ? s : "(no JSON)");
    free(s);
    return b;
}

static json_t *parse(const http_resp *r) {
    return r->body ? json_loadb(r->body, r->len, JSON_DECODE_ANY, NULL) : NULL;
}

/* POSTs body (a JSON value, consumed) and returns the status; *out gets the parsed answer (NULL if not JSON). */
static int post(const char *path, json_t *body, json_t **out) {
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    http_resp r = request("POST", path, s, strlen(s));
    free(s);
    *out = parse(&r);
    free(r.body);
    return r.status;
}

/* POSTs a raw body; returns the status and the parsed answer as post does. */
static int post_raw(const char *path, const char *body, size_t len, json_t **out) {
    http_resp r = request("POST", path, body, len);
    *out = parse(&r);
    free(r.body);
    return r.status;
}

/* The SSE events of a body, each parsed, the final "[DONE]" as that string. An event that is not JSON is a failure
 * (and left out). */
static json_t *sse_events(const char *body) {
    json_t *events = json_array();
    for (const char *b = body; b && *b;) {
        const char *end = strstr(b, "\n\n"), *stop = end ? end : b + strlen(b);
        if (!strncmp(b, "data: ", 6)) {
            size_t n = (size_t)(stop - b - 6);
            json_t *e = n == 6 && !strncmp(b + 6, "[DONE]", 6) ? json_string("[DONE]")
                                                               : json_loadb(b + 6, n, 0, NULL);
            CHECK(e != NULL, "SSE event is not JSON: %.*s", (int)(n < 200 ? n : 200), b + 6);
            if (e) json_array_append_new(events, e);
        }
        b = end ? end + 2 : stop;
    }
    return events;
}

/* POSTs body with "stream": true and returns its status; *events gets the SSE events (sse_events). */
static int stream(const char *path, json_t *body, json_t **events) {
    json_object_set_new(body, "stream", json_true());
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    http_resp r = request("POST", path, s, strlen(s));
    free(s);
    *events = sse_events(r.body);
    free(r.body);
    return r.status;
}

/* The text of a stream: field (a path inside choices/0) of every event whose "choices" is not empty. */
static char *stream_text(json_t *events, const char *field) {
    size_t n = 0;
    char *text = calloc(1, 1), path[64];
    snprintf(path, sizeof path, "choices/0/%s", field);
    for (size_t i = 0; i < json_array_size(events); i++) {
        json_t *e = json_array_get(events, i);
        const char *piece = json_array_size(json_object_get(e, "choices")) ? js(e, path) : NULL;
        if (!piece) continue;
        text = realloc(text, n + strlen(piece) + 1);
        strcpy(text + n, piece);
        n += strlen(piece);
    }
    return text;
}

static bool is_done(json_t *events) {
    return streq(json_string_value(json_array_get(events, json_array_size(events) - 1)), "[DONE]");
}

/* An error answer: the status, and a JSON body {"error": {"message", "type", "code"}}. */
static void error_ok(int status, json_t *body, int want, const char *what) {
    json_t *e = json_object_get(body, "error");
    CHECK(status == want, "%s: status %d, want %d: %s", what, status, want, show(body));
    CHECK(json_is_object(e) && json_object_get(e, "message") && json_object_get(e, "type") &&
              json_object_get(e, "code"), "%s: JSON error body: %s", what, show(body));
}

/* ==== The reference: qwenrt generate and detokenize ==== */

#define STOP_IDS_N 3
static const int stop_ids[STOP_IDS_N] = {2002, 2000, 2047}; /* <|im_end|>, <|endoftext|>, the model's eos */

typedef struct {
    int toks[64], n;
    bool stopped; /* a stop token ended it (not counted in n) */
} reference;

static bool is_stop(int t) {
    for (int i = 0; i < STOP_IDS_N; i++)
        if (t == stop_ids[i]) return true;
    return false;
}

/* Greedy tokens of `qwenrt generate` (plain decoding) for the given arguments (NULL-terminated), cut at the first
 * stop token as the server does. */
static reference reference_tokens(char *arg, ...) {
    char *argv[32] = {(char *)qwenrt, "generate", "-m", fx, "--json", "--spec-k", "0", "--threads", "1", "--device",
                      "cpu", "--no-eos"};
    int n = 12;
    va_list ap;
    va_start(ap, arg);
    for (char *a = arg; a && n < 31; a = va_arg(ap, char *)) argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    char *out;
    run(argv, &out);
    size_t len = strlen(out);
    while (len && out[len - 1] == '\n') out[--len] = 0;
    char *last = strrchr(out, '\n');
    json_t *j = json_loads(last ? last + 1 : out, 0, NULL), *toks = json_object_get(j, "tokens");
    if (!json_is_array(toks)) die("qwenrt generate --json: no tokens in %.300s", out);
    reference r = {.n = 0};
    for (size_t i = 0; i < json_array_size(toks) && r.n < 64 && !r.stopped; i++) {
        int t = (int)json_integer_value(json_array_get(toks, i));
        if (is_stop(t)) r.stopped = true;
        else r.toks[r.n++] = t;
    }
    json_decref(j);
    free(out);
    return r;
}

/* The text of ids by `qwenrt detokenize`, less the newline that command adds. */
static char *detok(const reference *r) {
    if (!r->n) return strdup("");
    char ids[64 * 8] = "", *argv[] = {(char *)qwenrt, "detokenize", "-m", fx, ids, NULL};
    for (int i = 0, k = 0; i < r->n; i++)
        k += snprintf(ids + k, sizeof ids - (size_t)k, "%s%d", i ? "," : "", r->toks[i]);
    char *out;
    run(argv, &out);
    size_t n = strlen(out);
    if (n) out[n - 1] = 0;
    return out;
}

/* s without the leading (and with both, also trailing) \r and \n characters, in place. */
static char *strip_newlines(char *s, bool both) {
    size_t skip = strspn(s, "\r\n"), n = strlen(s + skip);
    memmove(s, s + skip, n + 1);
    while (both && n && (s[n - 1] == '\r' || s[n - 1] == '\n')) s[--n] = 0;
    return s;
}

/* ==== The checks ==== */

static void test_basics(void) {
    http_resp r = get("/health");
    json_t *j = parse(&r);
    CHECK(r.status == 200 && streq(js(j, "status"), "ok"), "/health: %d %s", r.status, show(j));
    json_decref(j);
    free(r.body);
    r = get("/v1/models");
    j = parse(&r);
    CHECK(r.status == 200 && streq(js(j, "data/0/id"), "fx"), "/v1/models: %d %s", r.status, show(j));
    json_decref(j);
    free(r.body);
}

#define PARITY_N 8
static const char quick_fox[] = "The quick brown fox";

/* Greedy completions through the server equal `qwenrt generate` (the server speculates with --spec-k 2 on fresh
 * sessions; greedy speculative output must equal plain decoding), plain and streamed. */
static void test_completion_parity(void) {
    reference ref = reference_tokens("-p", (char *)quick_fox, "-n", "8", NULL);
    char *want = detok(&ref);
    json_t *r, *ev;
    int s = post("/v1/completions", json_pack("{s:s,s:i,s:i}", "prompt", quick_fox, "max_tokens", PARITY_N,
                                              "temperature", 0), &r);
    CHECK(s == 200 && streq(js(r, "choices/0/text"), want), "completion parity: %s vs \"%s\"", show(r), want);
    CHECK(ji(r, "usage/completion_tokens") == ref.n + ref.stopped, "completion_tokens %s", show(jp(r, "usage")));
    CHECK(streq(js(r, "choices/0/finish_reason"), ref.stopped ? "stop" : "length"), "finish_reason %s", show(r));
    json_decref(r);
    s = stream("/v1/completions", json_pack("{s:s,s:i,s:i}", "prompt", quick_fox, "max_tokens", PARITY_N,
                                            "temperature", 0), &ev);
    char *text = stream_text(ev, "text");
    CHECK(s == 200 && streq(text, want) && is_done(ev), "streamed completion parity: \"%s\" vs \"%s\"", text, want);
    free(text);
    json_decref(ev);
    free(want);
}

static json_t *chat_body(bool thinking) {
    return json_pack("{s:[{s:s,s:s}],s:i,s:i,s:{s:b}}", "messages", "role", "user", "content", "Hello there",
                     "max_tokens", PARITY_N, "temperature", 0, "chat_template_kwargs", "enable_thinking", thinking);
}

/* Chat parity with thinking off (plain and streamed, with the role chunk and the usage chunk), then with
 * thinking on: an unfinished reasoning is reasoning_content. */
static void test_chat_parity(void) {
    reference ref = reference_tokens("-p", "Hello there", "--chat", "--no-think", "-n", "8", NULL);
    char *want = strip_newlines(detok(&ref), false);
    json_t *r, *ev;
    int s = post("/v1/chat/completions", chat_body(false), &r);
    json_t *msg = jp(r, "choices/0/message");
    CHECK(s == 200 && streq(js(msg, "content"), want) && !json_object_get(msg, "reasoning_content"),
          "chat parity (thinking off): %s vs \"%s\"", show(r), want);
    json_t *body = chat_body(false);
    json_object_set_new(body, "stream_options", json_pack("{s:b}", "include_usage", 1));
    stream("/v1/chat/completions", body, &ev);
    json_t *chunks = json_array();
    for (size_t i = 0; i < json_array_size(ev); i++)
        if (json_is_object(json_array_get(ev, i))) json_array_append(chunks, json_array_get(ev, i));
    char *text = stream_text(chunks, "delta/content");
    json_t *last = json_array_get(chunks, json_array_size(chunks) - 1);
    CHECK(streq(text, want), "streamed chat parity: \"%s\" vs \"%s\"", text, want);
    CHECK(streq(js(chunks, "0/choices/0/delta/role"), "assistant"), "first chunk carries the role: %s",
          show(json_array_get(chunks, 0)));
    CHECK(json_is_array(json_object_get(last, "choices")) && !json_array_size(json_object_get(last, "choices")) &&
              ji(last, "usage/completion_tokens") == ji(r, "usage/completion_tokens") &&
              ji(r, "usage/completion_tokens") >= 0, "usage chunk: %s", show(last));
    free(text);
    json_decref(chunks);
    json_decref(ev);
    json_decref(r);
    free(want);

    ref = reference_tokens("-p", "Hello there", "--chat", "-n", "8", NULL);
    char *raw = detok(&ref);
    want = strip_newlines(strdup(raw), true);
    post("/v1/chat/completions", chat_body(true), &r);
    msg = jp(r, "choices/0/message");
    if (!strstr(raw, "</think>"))
        CHECK(streq(js(msg, "reasoning_content"), want) && streq(js(msg, "content"), ""),
              "thinking on: the unfinished reasoning is reasoning_content: %s vs \"%s\"", show(msg), want);
    json_decref(r);
    free(raw);
    free(want);
}

static void test_parity(void) {
    test_completion_parity();
    test_chat_parity();
}

/* The byte offset of code point i of the UTF-8 string s (Python slices strings by code points). */
static size_t cp_offset(const char *s, size_t i) {
    size_t b = 0;
    for (; s[b] && i; i--)
        for (b++; (s[b] & 0xC0) == 0x80; b++) continue;
    return b;
}

static size_t cp_len(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += (*s & 0xC0) != 0x80;
    return n;
}

static json_t *stop_body(json_t *stop) {
    json_t *b = json_pack("{s:s,s:i,s:i}", "prompt", "Once upon a time", "max_tokens", 10, "temperature", 0);
    if (stop) json_object_set_new(b, "stop", stop);
    return b;
}

/* A stop string taken from the middle of the greedy text cuts it there, as a string or in a list, plain and
 * streamed. */
static void test_stop(void) {
    json_t *r, *ev;
    post("/v1/completions", stop_body(NULL), &r);
    const char *full = js(r, "choices/0/text");
    size_t len = full ? cp_len(full) : 0;
    CHECK(len >= 6, "too little text to test stop strings: %s", show(r));
    if (len < 6) {
        json_decref(r);
        return;
    }
    size_t a = cp_offset(full, len / 2), b = cp_offset(full, len / 2 + 2);
    char stop[64], want[1024];
    snprintf(stop, sizeof stop, "%.*s", (int)(b - a), full + a);
    snprintf(want, sizeof want, "%.*s", (int)(strstr(full, stop) - full), full);
    json_decref(r);
    json_t *stops[2] = {json_string(stop), json_pack("[s,s]", stop, "zzzz-not-there")};
    for (int i = 0; i < 2; i++) {
        char *shown = json_dumps(stops[i], JSON_ENCODE_ANY);
        post("/v1/completions", stop_body(stops[i]), &r);
        CHECK(streq(js(r, "choices/0/text"), want) && streq(js(r, "choices/0/finish_reason"), "stop"),
              "stop %s: %s vs \"%s\"", shown, show(jp(r, "choices/0")), want);
        free(shown);
        json_decref(r);
    }
    stream("/v1/completions", stop_body(json_string(stop)), &ev);
    char *text = stream_text(ev, "text");
    CHECK(streq(text, want), "streamed stop: \"%s\" vs \"%s\"", text, want);
    free(text);
    json_decref(ev);
}

/* The value of the first /metrics sample line that starts with name; -1 if there is none. */
static double metric(const char *text, const char *name) {
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, name, strlen(name))) continue;
        const char *end = strchr(l, '\n') ? strchr(l, '\n') : l + strlen(l), *v = end;
        while (v > l && v[-1] != ' ') v--;
        return strtod(v, NULL);
    }
    return -1;
}

/* One counter of /metrics now; -1 when it cannot be read. */
static double metric_now(const char *name) {
    http_resp m = get("/metrics");
    double v = m.body ? metric(m.body, name) : -1;
    free(m.body);
    return v;
}

/* {"prompt": [ids], "max_tokens": max_tokens, "temperature": 0} */
static json_t *ids_body(const int *ids, int n, int max_tokens) {
    json_t *p = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(p, json_integer(ids[i]));
    return json_pack("{s:o,s:i,s:i}", "prompt", p, "max_tokens", max_tokens, "temperature", 0);
}

/* A prompt that extends the previous request's tokens continues from its state: cached_tokens says so, the output
 * is a cold prefill's, and it speculates (the session kept the MTP head's state). max_tokens 1 makes the session hold
 * exactly the prompt. */
static void test_prefix_reuse(void) {
    enum { MORE = 8 };
    int n = small_mode ? 120 : 240, ids[240 + MORE], diverge[100 + 1 + MORE];
    for (int i = 0; i < n; i++) ids[i] = (i * 37 + 11) % 1990;
    for (int i = 0; i < MORE; i++) ids[n + i] = diverge[101 + i] = (i * 53 + 7) % 1990;
    memcpy(diverge, ids, 100 * sizeof ids[0]);
    diverge[100] = 1;
    json_t *r, *cold, *warm;
    /* first a different conversation, so the cold request below finds nothing to reuse */
    post("/v1/completions", json_pack("{s:[i,i,i],s:i}", "prompt", 5, 6, 7, "max_tokens", 1), &r);
    json_decref(r);
    int s = post("/v1/completions", ids_body(ids, n + MORE, 6), &cold);
    CHECK(s == 200 && ji(cold, "usage/prompt_tokens_details/cached_tokens") == 0, "cold: %s", show(cold));
    post("/v1/completions", ids_body(ids, n, 1), &r);
    json_decref(r);
    const double cycles = metric_now("qwenrt_spec_cycles_total");
    s = post("/v1/completions", ids_body(ids, n + MORE, 6), &warm);
    CHECK(s == 200 && ji(warm, "usage/prompt_tokens_details/cached_tokens") == n,
          "warm request reuses %d tokens: %s", n, show(jp(warm, "usage")));
    CHECK(cycles >= 0 && metric_now("qwenrt_spec_cycles_total") > cycles, "the continued request speculated");
    CHECK(streq(js(warm, "choices/0/text"), js(cold, "choices/0/text")), "reused state gives the same greedy output");
    double c = json_number_value(jp(cold, "timings/prefill_ms")), w = json_number_value(jp(warm, "timings/prefill_ms"));
    /* the time saved is printed, not checked: a loaded machine may make either prefill slower */
    printf("prefix reuse: prefill of %d tokens %.1f ms cold, %.1f ms reusing %d tokens; saved %.1f ms (%.1fx)\n",
           n + MORE, c, w, n, c - w, c / (w > 1e-3 ? w : 1e-3));
    json_decref(cold);
    json_decref(warm);
    /* a prompt that diverges inside the kept tokens starts over */
    post("/v1/completions", ids_body(diverge, 100 + 1 + MORE, 1), &r);
    CHECK(ji(r, "usage/prompt_tokens_details/cached_tokens") == 0, "a diverging prompt does not reuse: %s",
          show(jp(r, "usage")));
    json_decref(r);
}

static const char chat_path[] = "/v1/chat/completions";

/* Malformed chat bodies: each is a 400 with a JSON error. */
static void test_bad_bodies(void) {
    static const struct {
        const char *body, *what;
    } bad[] = {
        {"{not json", "malformed JSON"},
        {"", "empty body"},
        {"[1,2]", "a list body"},
        {"{\"messages\": \"\xff\"}", "invalid UTF-8"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": \"ten\"}", "max_tokens a string"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"temperature\": -2}", "temperature < 0"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"stop\": 3}", "stop a number"},
        {"{\"messages\": 5}", "messages a number"},
        {"{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", "unknown role"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"stream\": \"yes\"}", "stream a string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *r;
        int s = post_raw(chat_path, bad[i].body, strlen(bad[i].body), &r);
        error_ok(s, r, 400, bad[i].what);
        json_decref(r);
    }
}

static void check_get(const char *method, const char *path, const char *body, int want, const char *what) {
    http_resp r = request(method, path, body, body ? strlen(body) : 0);
    json_t *j = parse(&r);
    error_ok(r.status, j, want, what);
    json_decref(j);
    free(r.body);
}

/* Bodies over --max-body (200000): refused from the Content-Length, and (chunked) after reading. */
static void test_too_big(void) {
    static const char pre[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"", post_[] = "\"}]}";
    size_t n = sizeof pre - 1 + 300000 + sizeof post_ - 1;
    char *big = malloc(n + 1);
    memcpy(big, pre, sizeof pre - 1);
    memset(big + sizeof pre - 1, 'a', 300000);
    memcpy(big + sizeof pre - 1 + 300000, post_, sizeof post_);
    for (int chunked = 0; chunked < 2; chunked++) {
        http_resp r = request_ex("POST", chat_path, big, n, chunked);
        json_t *j = parse(&r);
        error_ok(r.status, j, 413, chunked ? "chunked body over --max-body" : "body over --max-body (Content-Length)");
        json_decref(j);
        free(r.body);
    }
    free(big);
}

static void test_bad_requests(void) {
    test_bad_bodies();
    json_t *r;
    int s = post("/v1/completions", json_pack("{s:[i,i]}", "prompt", 1, 99999), &r);
    error_ok(s, r, 400, "token id past the vocabulary");
    json_decref(r);
    json_t *ones = json_array();
    for (int i = 0; i < 5000; i++) json_array_append_new(ones, json_integer(1));
    s = post("/v1/completions", json_pack("{s:o}", "prompt", ones), &r);
    error_ok(s, r, 400, "prompt longer than the context");
    json_decref(r);
    s = post(chat_path, json_pack("{s:[{s:s,s:s}],s:i,s:{s:i},s:i}", "messages", "role", "user", "content", "hi",
                                  "max_tokens", 2, "unknown_field", "x", 1, "presence_penalty", 1), &r);
    CHECK(s == 200, "unknown fields are ignored: %d %s", s, show(r));
    json_decref(r);
    check_get("GET", "/v1/nothing", NULL, 404, "unknown route");
    check_get("GET", chat_path, NULL, 405, "GET on a POST route");
    check_get("POST", "/health", "{}", 405, "POST on a GET route");
    test_too_big();
}

/* Sends a streamed request on a raw socket and hangs up after three events. */
static bool abandon_stream(void) {
    static const char body[] = "{\"prompt\": \"Tell me a long story\", \"max_tokens\": 400, \"stream\": true, "
                               "\"temperature\": 0}";
    char req[512], got[1 << 16];
    int n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s", sizeof body - 1, body);
    int fd = http_open(120);
    if (fd < 0) return false;
    bool ok = send_all(fd, req, (size_t)n);
    size_t have = 0;
    int events = 0;
    while (ok && events < 3 && have < sizeof got - 1) {
        ssize_t k = recv(fd, got + have, sizeof got - 1 - have, 0);
        ok = k > 0;
        have += ok ? (size_t)k : 0;
        got[have] = 0;
        events = 0;
        for (const char *p = got; (p = strstr(p, "data: ")); p += 6) events++;
    }
    close(fd);
    return ok && events >= 3;
}

/* A client that goes away mid-stream: generation stops, the next request works, /metrics counts it. */
static void test_disconnect(void) {
    CHECK(abandon_stream(), "a streamed request sent its first three events");
    double t0 = now_s();
    json_t *r;
    int s = post("/v1/completions", json_pack("{s:s,s:i,s:i}", "prompt", "hello", "max_tokens", 3, "temperature", 0),
                 &r);
    CHECK(s == 200 && ji(r, "usage/completion_tokens") == 3, "request after a disconnect: %d %s", s, show(r));
    CHECK(now_s() - t0 < 60, "the abandoned generation did not run to its 400 tokens first");
    json_decref(r);
    double cancelled = metric_now("qwenrt_generations_cancelled_total");
    CHECK(cancelled >= 1, "metrics count the cancelled generation: %g", cancelled);
}

typedef struct {
    int i, status;
    json_t *body;
} queued;

static void *queue_one(void *arg) {
    queued *q = arg;
    char prompt[32];
    snprintf(prompt, sizeof prompt, "request %d", q->i);
    q->status = post("/v1/completions", json_pack("{s:s,s:i,s:i}", "prompt", prompt, "max_tokens", 20,
                                                  "temperature", 0), &q->body);
    return NULL;
}

/* More concurrent requests than 1 running + --queue waiting: the rest get 503 with a JSON error. */
static void test_queue_full(void) {
    enum { N = QUEUE + 6 };
    queued q[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        q[i] = (queued){.i = i};
        if (pthread_create(&t[i], NULL, queue_one, &q[i])) die("pthread_create");
    }
    int ok = 0, full = 0;
    char codes[N * 5 + 1] = "";
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        ok += q[i].status == 200, full += q[i].status == 503;
        snprintf(codes + strlen(codes), sizeof codes - strlen(codes), " %d", q[i].status);
    }
    CHECK(full >= 1 && ok >= QUEUE, "queue full -> 503:%s", codes);
    for (int i = 0; i < N; i++) {
        if (q[i].status == 503) error_ok(q[i].status, q[i].body, 503, "queue full");
        json_decref(q[i].body);
    }
}

typedef struct {
    const char *method, *path;
    char *body; /* NULL: none */
    int status; /* the answer's; 0 for a connection error or timeout */
} load_req;

typedef struct {
    load_req *reqs;
    int first, total;
} load_worker;

static void *load_run(void *arg) {
    load_worker *w = arg;
    for (int i = w->first; i < w->total; i += 8) {
        load_req *q = &w->reqs[i];
        http_resp r = request(q->method, q->path, q->body, q->body ? strlen(q->body) : 0);
        q->status = r.status;
        free(r.body);
    }
    return NULL;
}

/* Request i of the load: every (total / generating)-th a short chat (streamed every other time), the rest a
 * rotation of malformed and cheap requests. */
static load_req load_kind(int i, int total, int generating) {
    static const load_req other[7] = {
        {"POST", "/v1/chat/completions", "{\"messages\": [}", 0}, {"GET", "/health", NULL, 0},
        {"GET", "/metrics", NULL, 0}, {"DELETE", "/v1/models", NULL, 0},
        {"POST", "/v1/completions", "{\"prompt\": 12}", 0}, {"GET", "/nope", NULL, 0},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": -1}", 0},
    };
    if (i % (total / generating)) {
        load_req q = other[i % 7];
        q.body = q.body ? strdup(q.body) : NULL;
        return q;
    }
    char content[16];
    snprintf(content, sizeof content, "q%d", i);
    json_t *b = json_pack("{s:[{s:s,s:s}],s:i,s:b}", "messages", "role", "user", "content", content, "max_tokens", 2,
                          "stream", i % 2 == 0);
    load_req q = {"POST", "/v1/chat/completions", json_dumps(b, 0), 0};
    json_decref(b);
    return q;
}

/* A few hundred requests from 8 threads, some malformed, some streamed: every answer is a known status. */
static void test_load(void) {
    int generating = small_mode ? 12 : 60, total = small_mode ? 200 : 300;
    load_req *reqs = calloc((size_t)total, sizeof *reqs);
    for (int i = 0; i < total; i++) reqs[i] = load_kind(i, total, generating);
    load_worker w[8];
    pthread_t t[8];
    double t0 = now_s();
    for (int k = 0; k < 8; k++) {
        w[k] = (load_worker){reqs, k, total};
        if (pthread_create(&t[k], NULL, load_run, &w[k])) die("pthread_create");
    }
    for (int k = 0; k < 8; k++) pthread_join(t[k], NULL);
    static const int known[] = {200, 400, 404, 405, 503};
    int counts[6] = {0}; /* the known statuses, then anything else */
    for (int i = 0; i < total; i++) {
        int k = 0;
        while (k < 5 && reqs[i].status != known[k]) k++;
        counts[k]++;
        if (k == 5) fprintf(stderr, "load request %d (%s %s): status %d\n", i, reqs[i].method, reqs[i].path,
                            reqs[i].status);
        free(reqs[i].body);
    }
    printf("load: %d requests in %.1f s: 200 x%d, 400 x%d, 404 x%d, 405 x%d, 503 x%d, other x%d\n", total,
           now_s() - t0, counts[0], counts[1], counts[2], counts[3], counts[4], counts[5]);
    CHECK(counts[5] == 0, "load statuses: %d answers of an unexpected status or none", counts[5]);
    free(reqs);
}

static void test_metrics(void) {
    static const char *names[] = {
        "qwenrt_requests_total{route=\"/v1/chat/completions\",status=\"200\"}",
        "qwenrt_requests_total{route=\"/v1/chat/completions\",status=\"400\"}",
        "qwenrt_generated_tokens_total", "qwenrt_ttft_seconds_bucket", "qwenrt_decode_tokens_per_second_count",
        "qwenrt_spec_cycles_total", "qwenrt_prompt_tokens_reused_total", "qwenrt_queue_depth",
    };
    http_resp r = get("/metrics");
    const char *text = r.body ? r.body : "";
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        CHECK(strstr(text, names[i]) != NULL, "/metrics has %s", names[i]);
    CHECK(metric(text, "qwenrt_spec_cycles_total") > 0, "speculative cycles are counted");
    free(r.body);
}

/* ==== Issue 33: validation, sampler, logprobs, cancellation, shutdown, model names ==== */

/* An error that names the field at fault: OpenAI's {"error": {"message", "type", "param", "code"}}. */
static void error_param(int status, json_t *body, int want, const char *param, const char *what) {
    error_ok(status, body, want, what);
    CHECK(streq(js(body, "error/param"), param), "%s: the error names '%s': %s", what, param, show(body));
}

static json_t *hi_chat(int max_tokens) {
    return json_pack("{s:[{s:s,s:s}],s:i,s:i,s:{s:b}}", "messages", "role", "user", "content", "hi", "max_tokens",
                     max_tokens, "temperature", 0, "chat_template_kwargs", "enable_thinking", 0);
}

/* body with key set to the JSON text value; posted to path, expected to be refused naming param. */
static void refused(const char *path, json_t *body, const char *key, const char *value, const char *param) {
    json_t *r, *v = json_loads(value, JSON_DECODE_ANY, NULL);
    if (!v) die("bad test JSON %s", value);
    json_object_set_new(body, key, v);
    int s = post(path, body, &r);
    char what[200];
    snprintf(what, sizeof what, "%s: %s", key, value);
    error_param(s, r, 400, param, what);
    json_decref(r);
}

static const char weather_tool[] = "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
                                   "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}]";

static json_t *tool_chat(const char *choice) {
    json_t *b = hi_chat(12);
    json_object_set_new(b, "tools", json_loads(weather_tool, 0, NULL));
    json_object_set_new(b, "tool_choice", json_loads(choice, JSON_DECODE_ANY, NULL));
    return b;
}

/* Fields that were accepted and ignored: refused naming the field, or (tool_choice) honoured. */
static void test_validation(void) {
    refused(chat_path, hi_chat(2), "response_format", "{\"type\": \"json_object\"}", "response_format");
    refused(chat_path, hi_chat(2), "response_format", "{\"type\": \"json_schema\", \"json_schema\": {}}",
            "response_format");
    refused(chat_path, hi_chat(2), "tools", "[5]", "tools[0]");
    refused(chat_path, hi_chat(2), "tools", "[{\"type\": \"function\", \"function\": {\"name\": \"\"}}]",
            "tools[0].function.name");
    refused(chat_path, hi_chat(2), "tools", "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": 3}}]",
            "tools[0].function.parameters");
    refused(chat_path, hi_chat(2), "tool_choice", "\"required\"", "tool_choice"); /* no tools */
    refused(chat_path, tool_chat("\"auto\""), "tool_choice", "\"sometimes\"", "tool_choice");
    refused(chat_path, tool_chat("\"auto\""), "tool_choice", "{\"type\": \"function\", \"function\": {\"name\": \"nope\"}}",
            "tool_choice");
    refused("/v1/completions", json_pack("{s:s,s:i}", "prompt", "hi", "max_tokens", 2), "echo", "true", "echo");
    refused("/v1/completions", json_pack("{s:s,s:i}", "prompt", "hi", "max_tokens", 2), "best_of", "2", "best_of");
    json_t *r, *b = hi_chat(2);
    json_object_set_new(b, "response_format", json_pack("{s:s}", "type", "text"));
    int s = post(chat_path, b, &r);
    CHECK(s == 200, "response_format text is fine: %d %s", s, show(r));
    json_decref(r);
    /* a named function: the answer is a call of it, whatever the (random) model would have said */
    s = post(chat_path, tool_chat("{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}"), &r);
    CHECK(s == 200 && streq(js(r, "choices/0/finish_reason"), "tool_calls") &&
              streq(js(r, "choices/0/message/tool_calls/0/function/name"), "get_weather"),
          "tool_choice naming get_weather calls it: %s", show(r));
    json_decref(r);
    /* required: the answer starts as a tool call (it parses as one when the model goes on to name a function) */
    s = post(chat_path, tool_chat("\"required\""), &r);
    const char *content = js(r, "choices/0/message/content");
    CHECK(s == 200 && (jp(r, "choices/0/message/tool_calls") || (content && !strncmp(content, "<tool_call>", 11))),
          "tool_choice required starts a tool call: %s", show(r));
    json_decref(r);
    s = post(chat_path, tool_chat("\"none\""), &r);
    CHECK(s == 200 && !jp(r, "choices/0/message/tool_calls"), "tool_choice none: %s", show(r));
    json_decref(r);
}

static json_t *fox_body(int max_tokens) {
    return json_pack("{s:s,s:i,s:i}", "prompt", quick_fox, "max_tokens", max_tokens, "temperature", 0);
}

/* The server's penalties and bias equal qwenrt generate's flags of the same names; min_p 1 keeps only the top
 * token, so sampling at temperature 1 becomes greedy; a +100 bias forces a token; bad values are refused. */
static void test_sampler(void) {
    refused("/v1/completions", fox_body(2), "logit_bias", "{\"99999\": 1}", "logit_bias");
    refused("/v1/completions", fox_body(2), "logit_bias", "{\"x\": 1}", "logit_bias");
    refused("/v1/completions", fox_body(2), "logit_bias", "{\"5\": 101}", "logit_bias");
    refused("/v1/completions", fox_body(2), "presence_penalty", "3", "presence_penalty");
    refused("/v1/completions", fox_body(2), "frequency_penalty", "-2.5", "frequency_penalty");
    refused("/v1/completions", fox_body(2), "repetition_penalty", "0", "repetition_penalty");
    refused("/v1/completions", fox_body(2), "min_p", "1.5", "min_p");
    json_t *r, *b = fox_body(4);
    json_object_set_new(b, "logit_bias", json_pack("{s:i}", "1234", 100));
    int s = post("/v1/completions", b, &r);
    reference forced = {.toks = {1234, 1234, 1234, 1234}, .n = 4};
    char *want = detok(&forced);
    CHECK(s == 200 && streq(js(r, "choices/0/text"), want), "logit_bias +100 forces token 1234: %s vs \"%s\"", show(r),
          want);
    free(want), json_decref(r);

    reference greedy = reference_tokens("-p", (char *)quick_fox, "-n", "8", NULL);
    want = detok(&greedy);
    b = json_pack("{s:s,s:i,s:f,s:f,s:i}", "prompt", quick_fox, "max_tokens", PARITY_N, "temperature", 1.0, "min_p",
                  1.0, "seed", 7);
    s = post("/v1/completions", b, &r);
    CHECK(s == 200 && streq(js(r, "choices/0/text"), want), "min_p 1 samples the greedy text: %s vs \"%s\"", show(r),
          want);
    free(want), json_decref(r);

    reference pen = reference_tokens("-p", (char *)quick_fox, "-n", "8", "--repeat-penalty", "1.5", "--presence-penalty",
                                     "0.5", "--frequency-penalty", "1", "--logit-bias", "1234=3", NULL);
    want = detok(&pen);
    b = json_pack("{s:s,s:i,s:i,s:f,s:f,s:f,s:{s:i}}", "prompt", quick_fox, "max_tokens", PARITY_N, "temperature", 0,
                  "repetition_penalty", 1.5, "presence_penalty", 0.5, "frequency_penalty", 1.0, "logit_bias", "1234", 3);
    s = post("/v1/completions", b, &r);
    CHECK(s == 200 && streq(js(r, "choices/0/text"), want), "penalties equal qwenrt generate's: %s vs \"%s\"", show(r),
          want);
    free(want), json_decref(r);
}

/* Greedy with presence / frequency penalties, checked exactly from the reported (raw) logprobs: each token is the
 * argmax of logprob - frequency * count - presence * (count > 0) over the top 20 (8 steps penalise at most 8
 * tokens, so the adjusted argmax is among them). */
static void test_penalty_logprobs(void) {
    const double pres = 0.7, freq = 0.9;
    json_t *r, *b = json_pack("{s:s,s:i,s:i,s:f,s:f,s:i}", "prompt", quick_fox, "max_tokens", PARITY_N, "temperature", 0,
                              "presence_penalty", pres, "frequency_penalty", freq, "logprobs", 5);
    json_object_set_new(b, "logprobs", json_integer(5));
    post("/v1/completions", b, &r);
    json_t *tokens = jp(r, "choices/0/logprobs/tokens"), *tops = jp(r, "choices/0/logprobs/top_logprobs");
    CHECK(json_array_size(tokens) > 0, "penalised logprobs: %s", show(r));
    /* counts by token text: the top_logprobs maps are keyed by text */
    json_t *count = json_object();
    for (size_t i = 0; i < json_array_size(tokens); i++) {
        const char *tok = json_string_value(json_array_get(tokens, i)), *best = NULL, *key;
        double best_v = -INFINITY;
        json_t *v;
        json_object_foreach(json_array_get(tops, i), key, v) {
            long long c = json_integer_value(json_object_get(count, key));
            double adj = json_number_value(v) - freq * (double)c - (c ? pres : 0);
            if (adj > best_v) best_v = adj, best = key;
        }
        /* a choice outside the top 5 is right only when all of them were penalised */
        bool outside = !json_object_get(json_array_get(tops, i), tok), all_penalised = true;
        json_object_foreach(json_array_get(tops, i), key, v) all_penalised &= json_object_get(count, key) != NULL;
        CHECK(outside ? all_penalised : streq(best, tok), "step %zu: chose \"%s\", the penalised argmax of its top 5 is "
              "\"%s\"", i, tok, best ? best : "");
        json_object_set_new(count, tok, json_integer(json_integer_value(json_object_get(count, tok)) + 1));
    }
    json_decref(count);
    json_decref(r);
}

/* logprobs in the OpenAI shapes, non-streamed and streamed; greedy picks the most likely token. */
static void test_logprobs(void) {
    refused(chat_path, hi_chat(2), "top_logprobs", "21", "top_logprobs");
    refused(chat_path, hi_chat(2), "top_logprobs", "2", "top_logprobs"); /* without logprobs: true */
    refused("/v1/completions", fox_body(2), "logprobs", "6", "logprobs");
    json_t *r, *b = fox_body(PARITY_N);
    json_object_set_new(b, "logprobs", json_integer(3));
    int s = post("/v1/completions", b, &r);
    json_t *lp = jp(r, "choices/0/logprobs");
    size_t n = json_array_size(json_object_get(lp, "tokens"));
    CHECK(s == 200 && n > 0 && n == json_array_size(json_object_get(lp, "token_logprobs")) &&
              n == json_array_size(json_object_get(lp, "top_logprobs")) &&
              n == json_array_size(json_object_get(lp, "text_offset")),
          "completion logprobs: %s", show(r));
    size_t offset = 0;
    for (size_t i = 0; i < n; i++) {
        double chosen = json_number_value(json_array_get(json_object_get(lp, "token_logprobs"), i)), top = -INFINITY;
        json_t *alts = json_array_get(json_object_get(lp, "top_logprobs"), i), *v;
        const char *key;
        json_object_foreach(alts, key, v) top = fmax(top, json_number_value(v));
        CHECK(chosen <= 0 && fabs(chosen - top) < 1e-4 && json_object_size(alts) <= 3 && json_object_size(alts) >= 1,
              "token %zu: logprob %g, best alternative %g: %s", i, chosen, top, show(alts));
        /* offsets count bytes; a token holding part of a character is written as \xHH, so stop checking there */
        const char *tok = json_string_value(json_array_get(json_object_get(lp, "tokens"), i));
        if (offset == SIZE_MAX || (tok && strstr(tok, "\\x"))) {
            offset = SIZE_MAX;
            continue;
        }
        CHECK(ji(lp, "text_offset/0") == 0 &&
                  (size_t)json_integer_value(json_array_get(json_object_get(lp, "text_offset"), i)) == offset,
              "text_offset %zu: %s", i, show(json_object_get(lp, "text_offset")));
        offset += tok ? strlen(tok) : 0;
    }
    json_decref(r);

    b = hi_chat(PARITY_N);
    json_object_set_new(b, "logprobs", json_true());
    json_object_set_new(b, "top_logprobs", json_integer(2));
    s = post(chat_path, json_deep_copy(b), &r);
    json_t *content = jp(r, "choices/0/logprobs/content");
    n = json_array_size(content);
    CHECK(s == 200 && n > 0, "chat logprobs: %s", show(r));
    for (size_t i = 0; i < n; i++) {
        json_t *item = json_array_get(content, i);
        CHECK(js(item, "token") && json_array_size(jp(item, "top_logprobs")) == 2 && json_is_array(jp(item, "bytes")) &&
                  fabs(json_number_value(jp(item, "logprob")) - json_number_value(jp(item, "top_logprobs/0/logprob"))) < 1e-4,
              "chat logprobs item %zu: %s", i, show(item));
    }
    json_t *ev;
    stream(chat_path, b, &ev);
    size_t streamed = 0;
    for (size_t i = 0; i < json_array_size(ev); i++)
        streamed += json_array_size(jp(json_array_get(ev, i), "choices/0/logprobs/content"));
    CHECK(streamed == n, "streamed chat logprobs: %zu entries, %zu not streamed", streamed, n);
    json_decref(ev);
    json_decref(r);
}

/* The served id and its --alias are accepted; other names get 404 model_not_found naming the served id. */
static void test_models(void) {
    json_t *r, *b = hi_chat(2);
    json_object_set_new(b, "model", json_string("gpt-nope"));
    int s = post(chat_path, b, &r);
    error_param(s, r, 404, "model", "unknown model");
    CHECK(streq(js(r, "error/code"), "model_not_found") && js(r, "error/message") && strstr(js(r, "error/message"), "'fx'"),
          "unknown model: %s", show(r));
    json_decref(r);
    const char *names[] = {"fx", "fx-alias"};
    for (int i = 0; i < 2; i++) {
        b = hi_chat(2);
        json_object_set_new(b, "model", json_string(names[i]));
        s = post(chat_path, b, &r);
        CHECK(s == 200, "model %s: %d %s", names[i], s, show(r));
        json_decref(r);
    }
    http_resp m = get("/v1/models");
    json_t *j = parse(&m);
    CHECK(streq(js(j, "data/0/id"), "fx") && streq(js(j, "data/1/id"), "fx-alias"), "/v1/models: %s", show(j));
    json_decref(j);
    free(m.body);
}

/* Sends body to path on a raw socket and hangs up after ms. */
static void hang_up_after(const char *path, json_t *body, int ms) {
    char *s = json_dumps(body, JSON_COMPACT), head[256];
    json_decref(body);
    int h = snprintf(head, sizeof head, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n", path, strlen(s));
    int fd = http_open(30);
    CHECK(fd >= 0 && send_all(fd, head, (size_t)h) && send_all(fd, s, strlen(s)), "send the abandoned request");
    sleep_ms(ms);
    if (fd >= 0) close(fd);
    free(s);
}

/* A client that hangs up during a long prefill cancels it between pieces: the session keeps the pieces done (the
 * same prompt then reuses them, same greedy output). The times are printed, not checked (a loaded machine). */
static void test_prefill_cancel(void) {
    enum { N = 1000 };
    int ids[N], other[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 29 + 3) % 1990, other[i] = (i * 31 + 5) % 1990;
    json_t *full, *again;
    double t0 = now_s();
    post("/v1/completions", ids_body(other, N, 2), &full); /* a full prefill of as many tokens, timed */
    double t_full = now_s() - t0;
    json_decref(full);
    int s = post("/v1/completions", ids_body(ids, N, 2), &full); /* the reference answer for ids */
    for (int streamed = 0; streamed < 2; streamed++) {
        json_t *b = ids_body(other, 3, 1); /* leave the session elsewhere, so ids start cold */
        post("/v1/completions", b, &again), json_decref(again);
        b = ids_body(ids, N, 400);
        if (streamed) json_object_set_new(b, "stream", json_true());
        /* a quarter into the prefill: the first piece is done by the time the cancel is seen (it is checked between
         * pieces), the last one is not */
        hang_up_after("/v1/completions", b, t_full > 0.04 ? (int)(t_full * 250) : 10);
        t0 = now_s();
        int s2 = post("/v1/completions", ids_body(ids, N, 2), &again);
        double t = now_s() - t0;
        printf("prefill cancel (%s): full prefill %.2f s; the same prompt after a hang-up answered in %.2f s, %lld "
               "tokens reused\n", streamed ? "streamed" : "whole body", t_full, t,
               ji(again, "usage/prompt_tokens_details/cached_tokens"));
        CHECK(s == 200 && s2 == 200 && streq(js(again, "choices/0/text"), js(full, "choices/0/text")),
              "after a cancelled prefill the same prompt answers as before: %s vs %s", show(again), show(full));
        /* a prefill that ran to its end would have left the prompt and a generated token (no strict prefix of ids:
         * nothing reused); one stopped between pieces leaves whole pieces, fewer than N tokens */
        const long long cached = ji(again, "usage/prompt_tokens_details/cached_tokens");
        CHECK(cached > 0 && cached < N, "the cancelled prefill stopped between pieces and kept them: %s",
              show(jp(again, "usage")));
        json_decref(again);
    }
    json_decref(full);
}

typedef struct {
    json_t *body, *events;
    int status;
} bg_request;

static void *bg_stream(void *arg) {
    bg_request *q = arg;
    q->status = stream("/v1/completions", q->body, &q->events);
    return NULL;
}

/* Sends a streamed completion on a raw socket and returns the socket once its first event arrived (peeked, not
 * read: read_response then reads the whole answer); -1 on failure. */
static int stream_started(json_t *body) {
    json_object_set_new(body, "stream", json_true());
    char *s = json_dumps(body, JSON_COMPACT), head[256], peek[1 << 14];
    json_decref(body);
    int h = snprintf(head, sizeof head, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n", strlen(s));
    int fd = http_open(REQUEST_S);
    bool ok = fd >= 0 && send_all(fd, head, (size_t)h) && send_all(fd, s, strlen(s));
    free(s);
    for (double deadline = now_s() + REQUEST_S; ok; sleep_ms(5)) {
        ssize_t k = recv(fd, peek, sizeof peek - 1, MSG_PEEK);
        ok = k > 0 && now_s() < deadline;
        if (ok && (peek[k] = 0, strstr(peek, "data: "))) return fd;
    }
    if (fd >= 0) close(fd);
    return -1;
}

/* SIGTERM with --shutdown-grace 3 while one request streams and a long one waits behind it: the first still
 * finishes in full; the long one, cut after the grace, ends with an error event, never with a finish_reason;
 * the server exits 0. */
static void test_shutdown(void) {
    /* a short request (8 tokens) in flight: it must finish within the 3 s grace even under AddressSanitizer */
    reference ref = reference_tokens("-p", (char *)quick_fox, "-n", "8", NULL);
    json_t *short_body = fox_body(8);
    json_object_set_new(short_body, "stream_options", json_pack("{s:b}", "include_usage", 1));
    int fd = stream_started(short_body);
    CHECK(fd >= 0, "the first request streams");
    /* long enough to outlast the grace on a fast CPU too: no stop token can end it early */
    bg_request longq = {.body = fox_body(4000)};
    json_object_set_new(longq.body, "logit_bias", json_pack("{s:i,s:i,s:i}", "2002", -100, "2000", -100, "2047", -100));
    pthread_t tl;
    if (pthread_create(&tl, NULL, bg_stream, &longq)) die("pthread_create");
    /* SIGTERM as soon as the long one waits in the queue, while the first still generates */
    for (double deadline = now_s() + 30; now_s() < deadline; sleep_ms(5)) {
        if (metric_now("qwenrt_queue_depth") >= 1) break;
    }
    double t0 = now_s();
    int rc = stop_server();
    double t = now_s() - t0;
    pthread_join(tl, NULL);
    http_resp r = fd >= 0 ? read_response(fd, now_s() + REQUEST_S) : (http_resp){0};
    if (fd >= 0) close(fd);
    json_t *short_ev = sse_events(r.body);
    free(r.body);
    CHECK(rc == 0, "the server exits 0 on SIGTERM (AddressSanitizer reports leaks as non-zero): %d; log in "
          "%s/server.log", rc, scratch);
    json_t *usage = jp(json_array_get(short_ev, json_array_size(short_ev) - 2), "usage");
    CHECK(r.status == 200 && ji(usage, "completion_tokens") == ref.n + ref.stopped && is_done(short_ev),
          "a request in flight at SIGTERM finishes within the grace: %d, usage %s", r.status, show(usage));
    bool error = false, stopped = false;
    for (size_t i = 0; i < json_array_size(longq.events); i++) {
        json_t *e = json_array_get(longq.events, i);
        error |= json_object_get(e, "error") != NULL;
        stopped |= js(e, "choices/0/finish_reason") != NULL;
    }
    CHECK(error && !stopped && is_done(longq.events), "a generation cut by shutdown ends with an error: %zu events, last %s",
          json_array_size(longq.events), show(json_array_get(longq.events, json_array_size(longq.events) - 2)));
    printf("shutdown: SIGTERM to exit %.2f s; the long request had %zu events\n", t, json_array_size(longq.events));
    json_decref(short_ev), json_decref(longq.events);
}

/* ==== main ==== */

static void section(const char *name, void (*fn)(void)) {
    int failures = test_failures;
    double t0 = now_s();
    fn();
    printf("%s %-20s %.1f s\n", test_failures == failures ? "ok  " : "FAIL", name, now_s() - t0);
    fflush(stdout);
}

/* A copy of the fixture from_dir in dir with the first value of its final norm NaN (BF16 0x7fc0): every logit is NaN. */
static void make_nan_fixture(const char *from_dir, const char *dir) {
    static const char *files[] = {"config.json", "tokenizer.json", "model.safetensors"};
    mkdir(dir, 0777);
    for (int i = 0; i < 3; i++) {
        char from[1200], to[1200], cmd[2500];
        snprintf(from, sizeof from, "%s/%s", from_dir, files[i]);
        snprintf(to, sizeof to, "%s/%s", dir, files[i]);
        snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
        if (system(cmd)) die("cannot copy %s", from);
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "r+b");
    uint8_t len8[8];
    if (!f || fread(len8, 1, 8, f) != 8) die("cannot read %s", path);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | len8[i];
    char *hdr = calloc(1, hlen + 1);
    if (fread(hdr, 1, hlen, f) != hlen) die("cannot read the header of %s", path);
    json_t *h = json_loads(hdr, 0, NULL);
    json_t *off = json_object_get(json_object_get(h, "model.language_model.norm.weight"), "data_offsets");
    if (!off) die("%s: no model.language_model.norm.weight", path);
    fseek(f, (long)(8 + hlen + (uint64_t)json_integer_value(json_array_get(off, 0))), SEEK_SET);
    const uint8_t nan_bf16[2] = {0xc0, 0x7f};
    fwrite(nan_bf16, 1, 2, f);
    fclose(f);
    json_decref(h);
    free(hdr);
}

/* NaN weights: a request fails with a server error that says why, plain and streamed, never a normal finish. */
static void test_nan_weights(void) {
    json_t *r;
    int s = post("/v1/completions", json_pack("{s:[i,i,i],s:i}", "prompt", 1, 2, 3, "max_tokens", 4), &r);
    error_ok(s, r, 500, "NaN weights");
    const char *msg = js(r, "error/message");
    CHECK(msg && strstr(msg, "non-finite logits"), "NaN weights: the message names the cause: %s", show(r));
    json_decref(r);
    json_t *events;
    stream("/v1/completions", json_pack("{s:[i,i,i],s:i}", "prompt", 1, 2, 3, "max_tokens", 4), &events);
    int finished = 0, errored = 0;
    for (size_t i = 0; i < json_array_size(events); i++) {
        json_t *e = json_array_get(events, i);
        finished |= js(e, "choices/0/finish_reason") != NULL;
        errored |= json_object_get(e, "error") != NULL;
    }
    CHECK(errored && !finished, "NaN weights, streamed: an error event and no finish_reason: %s", show(events));
    json_decref(events);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: test_server QWENRT_BINARY TEST_DATA_DIR SCRATCH_DIR [full|small]\n");
        return 2;
    }
    qwenrt = argv[1], data_dir = argv[2], scratch = argv[3];
    small_mode = argc > 4 && !strcmp(argv[4], "small");
    snprintf(fx, sizeof fx, "%s/fx", scratch);
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN); /* a server that hangs up is a failed send, not a dead test */
    signal(SIGALRM, on_watchdog);
    alarm(WATCHDOG_S);
    atexit(at_exit);

    make_fixture();
    char queue[16];
    snprintf(queue, sizeof queue, "%d", QUEUE);
    char *extra[] = {"--ctx", "4096", "--queue", queue, "--max-body", "200000", "--spec-k", "2", "--alias", "fx-alias",
                     "--shutdown-grace", "3", NULL};
    start_server(extra);
    section("basics", test_basics);
    section("parity", test_parity);
    section("stop", test_stop);
    section("prefix_reuse", test_prefix_reuse);
    section("bad_requests", test_bad_requests);
    section("disconnect", test_disconnect);
    section("load", test_load);
    section("metrics", test_metrics);
    section("queue_full", test_queue_full);
    section("validation", test_validation);
    section("sampler", test_sampler);
    section("penalty_logprobs", test_penalty_logprobs);
    section("logprobs", test_logprobs);
    section("models", test_models);
    section("prefill_cancel", test_prefill_cancel);
    section("shutdown", test_shutdown);

    /* test_shutdown has stopped the server: the NaN-weights fixture runs on a server of its own */
    char good[sizeof fx];
    snprintf(good, sizeof good, "%s", fx);
    snprintf(fx, sizeof fx, "%s/fx-nan", scratch);
    make_nan_fixture(good, fx);
    char *plain[] = {"--ctx", "64", "--spec-k", "0", NULL};
    start_server(plain);
    section("nan_weights", test_nan_weights);
    CHECK(stop_server() == 0, "the NaN-weights server exits 0 on SIGTERM");
    snprintf(fx, sizeof fx, "%s", good);
    return test_exit("server");
}
