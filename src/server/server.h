/* `qwenrt serve`: the OpenAI-compatible HTTP server (http.c) over the model worker (worker.c). */
#ifndef QRT_SERVER_H
#define QRT_SERVER_H

#include <stddef.h>
#include <sys/socket.h>

#include "server/worker.h"

typedef struct {
    qrt_worker_opts worker;
    const char *host; /* an IPv4 or IPv6 address ("[::1]" too) or a host name, to bind */
    int port;         /* 0: any free port (printed) */
    size_t max_body;  /* bytes; larger request bodies get 413 */
    double shutdown_grace; /* seconds in-flight requests may take to finish after SIGINT / SIGTERM */
    const char *const *aliases; /* more names the "model" field may give (the id is the model folder's name) */
    int n_aliases;
} qrt_serve_opts;

/* --host and --port → the address to bind: the first getaddrinfo gives for host (brackets around an IPv6
 * address allowed). 0 with a message naming --host in err when it does not resolve. */
int qrt_serve_resolve(const char *host, int port, struct sockaddr_storage *addr, char *err, size_t err_size);

/* Run until SIGINT or SIGTERM (then drain for o->shutdown_grace); returns a process exit code. */
int qrt_serve(const qrt_serve_opts *o);

#endif
