/* The model side of the server: one worker thread owns the model, the tokenizer's output side and one
 * session (qrt_reuse), and runs one generation at a time. HTTP threads submit jobs to a bounded queue and
 * read each job's output (server-sent events, or the whole JSON body) as it grows. */
#ifndef QRT_SERVER_WORKER_H
#define QRT_SERVER_WORKER_H

#include <stddef.h>
#include <sys/types.h>

#include "server/metrics.h"
#include "server/openai.h"

typedef struct {
    const char *model_dir, *mtp_dir;
    int threads, device;
    int32_t ctx;       /* the session's context in tokens; 0: qrt_session_default_ctx's */
    int spec_k;        /* QRT_SPEC_DEFAULT, 0 or 1..16 (see reuse.h for continued generations) */
    int prefix_reuse;  /* keep the session between requests (see reuse.h) */
    int queue_max;     /* requests that may wait while one runs; more get 503 */
    qrt_chat_dialect dialect;
} qrt_worker_opts;

typedef struct qrt_worker qrt_worker;
typedef struct qrt_job qrt_job;

/* Load the model and DIR/tokenizer.json and start the worker; NULL after printing why. */
qrt_worker *qrt_worker_new(const qrt_worker_opts *o, qrt_metrics *metrics);
/* Shutting down, first: refuse new jobs and wait up to grace_s seconds for the queued and running ones to end. */
void qrt_worker_drain(qrt_worker *w, double grace_s);
/* Cancel every job, wake every reader and join the worker; jobs still held stay readable (and done). A generation
 * cut here ends with an error (503, or an error event), never as if it were complete. */
void qrt_worker_stop(qrt_worker *w);
void qrt_worker_free(qrt_worker *w);
const char *qrt_worker_model_name(const qrt_worker *w);
int32_t qrt_worker_vocab(const qrt_worker *w);
qrt_chat_dialect qrt_worker_dialect(const qrt_worker *w);

/* Queue a parsed request (*req is moved into the job). NULL when refused: *status is 400 (the prompt does
 * not fit), 503 (the queue is full or the server is stopping) or 500, with a message in err. */
qrt_job *qrt_worker_submit(qrt_worker *w, qrt_oa_request *req, int *status, char *err, size_t err_size);

/* Asked every 100 ms while a reader waits: non-zero when the client went away (then the job is cancelled, even
 * during a long prefill that writes nothing for a while). */
typedef int (*qrt_client_gone)(void *arg);
/* Streamed jobs: copy up to max new bytes of the event stream, waiting for some; 0 at its end or when gone. */
size_t qrt_job_read(qrt_job *j, char *dst, size_t max, qrt_client_gone gone, void *arg);
/* Whole-body jobs: wait for the end; the body stays valid until qrt_job_release. NULL when the client went away. */
const char *qrt_job_wait(qrt_job *j, int *status, size_t *len, qrt_client_gone gone, void *arg);
int qrt_job_streamed(const qrt_job *j);
/* The HTTP side is done with the job; a generation still running for it stops at its next token. */
void qrt_job_release(qrt_job *j);

#endif
