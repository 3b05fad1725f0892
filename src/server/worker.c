/* The worker thread, its queue and each job's output channel (see worker.h). One mutex guards the queue
 * and every job's output; readers wait on one condition that the worker broadcasts after each append. */
#include "server/worker.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/reuse.h"
#include "tokenizer/tokenizer.h"
#include "util/common.h"

struct qrt_job {
    qrt_worker *w;
    qrt_oa_request req;
    int32_t *ids;
    int32_t n_ids;
    double t_submit_ms;
    int refs;       /* the worker's and the HTTP side's */
    int cancelled;  /* the HTTP side let go before the end */
    int done;
    int status;     /* HTTP status of a whole-body job */
    qrt_buf out;    /* the event stream, or the whole body */
    size_t read;    /* bytes of out a streamed reader has taken */
    qrt_job *next;
};

struct qrt_worker {
    qrt_worker_opts o;
    char model_name[256];
    qrt_model *m;
    qrt_tokenizer *tok;
    qrt_reuse reuse;
    qrt_metrics *metrics;
    int32_t stop_ids[3]; /* <|im_end|>, <|endoftext|>, the model's eos; -1 when absent */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, out_cv;
    qrt_job *head, *tail;
    int n_waiting, stopping;
    int draining; /* shutting down: new requests are refused while the queued and running ones finish */
    int running;  /* the worker is inside run_job */
    unsigned long long next_id;
};

/* ------------------------------------------------------------------------------------------------
 * Jobs */

static void job_unref_locked(qrt_job *j) {
    if (--j->refs > 0) return;
    qrt_oa_request_free(&j->req);
    free(j->ids);
    qrt_buf_free(&j->out);
    free(j);
}

void qrt_job_release(qrt_job *j) {
    qrt_worker *w = j->w;
    pthread_mutex_lock(&w->mu);
    j->cancelled = 1;
    job_unref_locked(j);
    pthread_mutex_unlock(&w->mu);
}

int qrt_job_streamed(const qrt_job *j) { return j->req.stream; }

/* Wait on out_cv for at most 100 ms (w->mu held). */
static void wait_a_while(qrt_worker *w) {
    const struct timespec t = qrt_deadline_after(0.1);
    pthread_cond_timedwait(&w->out_cv, &w->mu, &t);
}

/* Whether the reader should stop waiting because its client left; the job is cancelled then (w->mu held; gone
 * itself only looks at the socket). */
static int reader_gone(qrt_job *j, qrt_client_gone gone, void *arg) {
    if (!gone || !gone(arg)) return 0;
    j->cancelled = 1;
    return 1;
}

size_t qrt_job_read(qrt_job *j, char *dst, size_t max, qrt_client_gone gone, void *arg) {
    qrt_worker *w = j->w;
    pthread_mutex_lock(&w->mu);
    while (j->read == j->out.n && !j->done) {
        if (reader_gone(j, gone, arg)) break;
        wait_a_while(w);
    }
    size_t n = j->out.n - j->read < max ? j->out.n - j->read : max;
    if (n) memcpy(dst, j->out.p + j->read, n);
    j->read += n;
    pthread_mutex_unlock(&w->mu);
    return n;
}

const char *qrt_job_wait(qrt_job *j, int *status, size_t *len, qrt_client_gone gone, void *arg) {
    qrt_worker *w = j->w;
    pthread_mutex_lock(&w->mu);
    while (!j->done) {
        if (reader_gone(j, gone, arg)) return pthread_mutex_unlock(&w->mu), NULL;
        wait_a_while(w);
    }
    pthread_mutex_unlock(&w->mu);
    *status = j->status;
    *len = j->out.n;
    return j->out.p ? j->out.p : "";
}

/* Append output and wake the reader. */
static void job_append(qrt_job *j, const char *s, size_t n) {
    qrt_worker *w = j->w;
    pthread_mutex_lock(&w->mu);
    qrt_buf_add(&j->out, s, n);
    pthread_cond_broadcast(&w->out_cv);
    pthread_mutex_unlock(&w->mu);
}

/* Whether the generation must end now; *shutdown: because the server stops (its grace period ran out). */
static int job_cancelled(qrt_job *j, int *shutdown) {
    pthread_mutex_lock(&j->w->mu);
    int c = j->cancelled || j->w->stopping;
    if (!j->cancelled && j->w->stopping) *shutdown = 1;
    pthread_mutex_unlock(&j->w->mu);
    return c;
}

/* ------------------------------------------------------------------------------------------------
 * One generation */

typedef struct {
    qrt_job *job;
    qrt_worker *w;
    qrt_output out;
    qrt_detok_stream *detok;
    size_t reasoning_sent, content_sent;
    const char *finish; /* set when a stop token or string ended the generation */
    double ttft_ms;
    int cancelled, oom;
    int shutdown; /* cancelled because the server stops (not because the client left): the answer is an error */
    qrt_oa_meta meta;
    /* logprobs: one entry per generated token that has text; lp_sent of them went out in stream chunks, whose
     * text spans lp_offset bytes */
    qrt_oa_logprob *lp;
    size_t n_lp, cap_lp, lp_sent, lp_offset;
} run_ctx;

static int is_stop_id(const qrt_worker *w, int32_t id) {
    for (int i = 0; i < 3; i++)
        if (w->stop_ids[i] >= 0 && w->stop_ids[i] == id) return 1;
    return 0;
}

static const uint8_t *token_bytes(int32_t id, size_t *len, const void *user) {
    return qrt_tokenizer_token_bytes(((const run_ctx *)user)->w->tok, id, len);
}

/* The logprobs not yet sent (all of them for a whole body), or NULL when the request did not ask. */
static const qrt_oa_logprobs *pending_logprobs(run_ctx *c, qrt_oa_logprobs *lp) {
    if (!c->job->req.logprobs) return NULL;
    *lp = (qrt_oa_logprobs){c->lp + c->lp_sent, c->n_lp - c->lp_sent, c->lp_offset, token_bytes, c};
    return lp;
}

/* The pending logprobs went out: later chunks start after them. */
static void logprobs_sent(run_ctx *c) {
    for (; c->lp_sent < c->n_lp; c->lp_sent++) {
        size_t n = 0;
        if (qrt_tokenizer_token_bytes(c->w->tok, c->lp[c->lp_sent].chosen.id, &n)) c->lp_offset += n;
    }
}

/* The log-softmax of the raw logits (the model's distribution, before temperature, penalties and bias, as OpenAI
 * reports it) at the chosen token and at the top_logprobs most likely ones. */
static void on_logits(const float *logits, int32_t V, int32_t id, void *user) {
    run_ctx *c = user;
    if (c->n_lp == c->cap_lp) {
        size_t cap = c->cap_lp ? 2 * c->cap_lp : 64;
        qrt_oa_logprob *p = realloc(c->lp, cap * sizeof *p);
        if (!p) return (void)(c->oom = 1);
        c->lp = p, c->cap_lp = cap;
    }
    float mx = logits[0];
    for (int32_t i = 1; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int32_t i = 0; i < V; i++) sum += exp((double)(logits[i] - mx));
    const float lse = mx + (float)log(sum);
    qrt_oa_logprob *e = &c->lp[c->n_lp++];
    e->chosen = (qrt_oa_alt){id, logits[id] - lse};
    e->n_top = 0;
    /* insertion into a sorted list of at most 20: V x 20 steps at worst, small next to a forward pass */
    const int N = c->job->req.top_logprobs;
    for (int32_t i = 0; i < V && N; i++) {
        const float l = logits[i] - lse;
        if (e->n_top == N && !(l > e->top[N - 1].logprob)) continue;
        int k = e->n_top < N ? e->n_top++ : N - 1;
        for (; k > 0 && l > e->top[k - 1].logprob; k--) e->top[k] = e->top[k - 1];
        e->top[k] = (qrt_oa_alt){i, l};
    }
}

/* Stream what the output made final since the last call. */
static void send_deltas(run_ctx *c) {
    const qrt_output *o = &c->out;
    if (o->reasoning.n == c->reasoning_sent && o->content.n == c->content_sent) return;
    qrt_buf sse = {0};
    qrt_oa_logprobs lp;
    if (!qrt_oa_stream_delta(&sse, &c->job->req, &c->meta, o->reasoning.p + c->reasoning_sent,
                             o->reasoning.n - c->reasoning_sent, o->content.p + c->content_sent,
                             o->content.n - c->content_sent, pending_logprobs(c, &lp)))
        c->oom = 1;
    logprobs_sent(c);
    c->reasoning_sent = o->reasoning.n, c->content_sent = o->content.n;
    job_append(c->job, sse.p, sse.n);
    qrt_buf_free(&sse);
}

static int on_token(int32_t id, void *user) {
    run_ctx *c = user;
    if (c->ttft_ms < 0) c->ttft_ms = qrt_now_ms() - c->job->t_submit_ms;
    if (job_cancelled(c->job, &c->shutdown)) return c->cancelled = 1;
    if (is_stop_id(c->w, id)) {
        if (c->job->req.logprobs && c->n_lp) c->n_lp--; /* a stop token is not part of the answer */
        return c->finish = "stop", 1;
    }
    const char *text = "";
    size_t len = 0;
    size_t ignored;
    /* ids past the tokenizer's vocabulary (padding rows of the logits) have no text */
    if (qrt_tokenizer_token_bytes(c->w->tok, id, &ignored) && qrt_detok_stream_push(c->detok, id, &text, &len) != QRT_OK)
        return c->oom = 1;
    if (!qrt_output_push(&c->out, text, len)) return c->oom = 1;
    if (c->job->req.stream) send_deltas(c);
    if (c->out.stopped) return c->finish = "stop", 1;
    return c->oom;
}

/* Between prefill pieces: a long prompt whose client left (or a server past its grace) stops there. */
static int prefill_cancelled(void *user) {
    run_ctx *c = user;
    return c->cancelled = job_cancelled(c->job, &c->shutdown);
}

static void finish_with_error(run_ctx *c, int status, const char *message) {
    if (c->job->req.stream) {
        qrt_buf sse = {0};
        qrt_oa_stream_error(&sse, message);
        job_append(c->job, sse.p, sse.n);
        qrt_buf_free(&sse);
        return;
    }
    char *body = qrt_oa_error_json(message, status >= 500 ? "server_error" : "invalid_request_error",
                                   status == 503  ? "server_shutting_down"
                                   : status >= 500 ? "generation_failed"
                                                   : "context_length_exceeded");
    c->job->status = status;
    job_append(c->job, body, body ? strlen(body) : 0);
    free(body);
}

static void run_job(qrt_worker *w, qrt_job *j) {
    const qrt_oa_request *req = &j->req;
    run_ctx c = {.job = j, .w = w, .ttft_ms = -1};
    snprintf(c.meta.id, sizeof c.meta.id, "%s-%llu", req->kind == QRT_OA_CHAT ? "chatcmpl" : "cmpl", w->next_id++);
    c.meta.model = w->model_name;
    c.meta.created = (long long)time(NULL);
    const int32_t ctx = w->reuse.max_ctx;
    int32_t max_new = req->max_tokens < 0 ? ctx : (req->max_tokens < ctx ? req->max_tokens : ctx);
    int32_t *ids_out = calloc((size_t)max_new + 1, sizeof *ids_out);
    int ok = ids_out && qrt_detok_stream_new(w->tok, &c.detok) == QRT_OK &&
             qrt_output_init(&c.out, req->kind == QRT_OA_CHAT && req->thinking, req->parse_tools,
                             (const char *const *)req->stops, req->n_stops);
    if (ok && req->forced) ok = qrt_output_push(&c.out, req->forced, strlen(req->forced));
    if (!ok) {
        finish_with_error(&c, 500, "out of memory");
        goto done;
    }
    if (req->stream) {
        qrt_buf sse = {0};
        qrt_oa_stream_begin(&sse, req, &c.meta);
        job_append(j, sse.p, sse.n);
        qrt_buf_free(&sse);
    }
    qrt_gen_opts go = {.max_new = max_new, .stop_eos = 1, .spec_k = w->o.spec_k, .sampling = req->sampling,
                       .on_token = on_token, .user = &c, .cancel = prefill_cancelled,
                       .on_logits = req->logprobs ? on_logits : NULL};
    qrt_gen_stats gs;
    int32_t reused = 0;
    qrt_status st = qrt_reuse_generate(&w->reuse, j->ids, j->n_ids, &go, ids_out, &gs, &reused);
    if (st != QRT_OK) {
        finish_with_error(&c, st == QRT_ERR_CONTEXT ? 400 : 500, qrt_last_error());
        goto done;
    }
    qrt_metrics_generation(w->metrics, &gs, c.ttft_ms, reused, c.cancelled);
    size_t tail_len = 0;
    const char *tail = qrt_detok_stream_flush(c.detok, &tail_len);
    if (!c.out.stopped) qrt_output_push(&c.out, tail, tail_len);
    qrt_output_finish(&c.out);
    const char *finish = c.finish ? c.finish : gs.n_new >= go.max_new ? "length" : "stop";
    qrt_oa_usage u = {.prompt_tokens = j->n_ids, .completion_tokens = gs.n_new, .cached_tokens = reused,
                      .prefill_ms = gs.prefill_ms, .decode_ms = gs.decode_ms};
    if (c.shutdown) {
        /* never a truncated answer that looks complete */
        finish_with_error(&c, 503, "the server shut down before this generation finished (its --shutdown-grace ran "
                          "out); send the request again when it is back");
    } else if (c.oom) {
        finish_with_error(&c, 500, "out of memory while streaming the output");
    } else if (req->stream) {
        send_deltas(&c);
        qrt_buf sse = {0};
        qrt_oa_logprobs lp;
        qrt_oa_stream_end(&sse, req, &c.meta, &c.out, finish, &u, pending_logprobs(&c, &lp));
        job_append(j, sse.p, sse.n);
        qrt_buf_free(&sse);
    } else {
        qrt_oa_logprobs lp;
        char *body = qrt_oa_response(req, &c.meta, &c.out, finish, &u, pending_logprobs(&c, &lp));
        j->status = body ? 200 : 500;
        job_append(j, body ? body : "{}", body ? strlen(body) : 2);
        free(body);
    }
done:
    qrt_output_free(&c.out);
    free(c.lp);
    qrt_detok_stream_free(c.detok);
    free(ids_out);
}

/* ------------------------------------------------------------------------------------------------
 * Worker and queue */

static void *worker_main(void *arg) {
    qrt_worker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->head && !w->stopping) pthread_cond_wait(&w->work_cv, &w->mu);
        if (w->stopping) break;
        qrt_job *j = w->head;
        w->head = j->next;
        if (!w->head) w->tail = NULL;
        w->n_waiting--;
        qrt_metrics_queue_depth(w->metrics, w->n_waiting);
        if (!j->cancelled) {
            w->running = 1;
            pthread_mutex_unlock(&w->mu);
            run_job(w, j);
            pthread_mutex_lock(&w->mu);
            w->running = 0;
        }
        j->done = 1;
        pthread_cond_broadcast(&w->out_cv);
        job_unref_locked(j);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void end_refused(qrt_job *j, int status, const char *message) {
    char *body = qrt_oa_error_json(message, "server_error", "unavailable");
    j->status = status;
    if (j->req.stream) {
        qrt_buf_add(&j->out, "data: ", 6), qrt_buf_add(&j->out, body, body ? strlen(body) : 0);
        qrt_buf_add(&j->out, "\n\ndata: [DONE]\n\n", 16);
    } else {
        qrt_buf_add(&j->out, body, body ? strlen(body) : 0);
    }
    free(body);
    j->done = 1;
}

void qrt_worker_drain(qrt_worker *w, double grace_s) {
    const struct timespec deadline = qrt_deadline_after(grace_s);
    pthread_mutex_lock(&w->mu);
    w->draining = 1;
    /* out_cv is broadcast at every append and at every job's end */
    while ((w->head || w->running) && pthread_cond_timedwait(&w->out_cv, &w->mu, &deadline) == 0) {
    }
    pthread_mutex_unlock(&w->mu);
}

void qrt_worker_stop(qrt_worker *w) {
    pthread_mutex_lock(&w->mu);
    w->stopping = 1;
    while (w->head) {
        qrt_job *j = w->head;
        w->head = j->next;
        end_refused(j, 503, "the server is shutting down");
        job_unref_locked(j);
    }
    w->tail = NULL, w->n_waiting = 0;
    pthread_cond_broadcast(&w->work_cv);
    pthread_cond_broadcast(&w->out_cv);
    pthread_mutex_unlock(&w->mu);
    if (w->thread_started) pthread_join(w->thread, NULL);
    w->thread_started = 0;
}

static int32_t token_id_or_none(const qrt_tokenizer *t, const char *s) { return qrt_tokenizer_token_id(t, s); }

qrt_worker *qrt_worker_new(const qrt_worker_opts *o, qrt_metrics *metrics) {
    qrt_worker *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->o = *o;
    w->metrics = metrics;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->work_cv, NULL);
    pthread_cond_init(&w->out_cv, NULL);
    const char *base = strrchr(o->model_dir, '/');
    snprintf(w->model_name, sizeof w->model_name, "%s", base && base[1] ? base + 1 : o->model_dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", o->model_dir);
    qrt_load_opts lo = {.n_threads = o->threads, .show_progress = 1, .mtp_dir = o->mtp_dir, .device = o->device,
                        .kv_format = QRT_KV_DEFAULT};
    if (qrt_tokenizer_load(path, &w->tok) != QRT_OK || qrt_model_load(o->model_dir, &lo, &w->m) != QRT_OK ||
        qrt_tokenizer_check_model(w->tok, w->m, o->model_dir) != QRT_OK ||
        qrt_reuse_init(&w->reuse, w->m, o->ctx, o->prefix_reuse) != QRT_OK) {
        fprintf(stderr, "qwenrt serve: %s\n", qrt_last_error());
        qrt_worker_free(w);
        return NULL;
    }
    w->stop_ids[0] = token_id_or_none(w->tok, "<|im_end|>");
    w->stop_ids[1] = token_id_or_none(w->tok, "<|endoftext|>");
    w->stop_ids[2] = qrt_model_eos(w->m);
    if (pthread_create(&w->thread, NULL, worker_main, w)) {
        fprintf(stderr, "qwenrt serve: cannot start the worker thread\n");
        qrt_worker_free(w);
        return NULL;
    }
    w->thread_started = 1;
    return w;
}

void qrt_worker_free(qrt_worker *w) {
    if (!w) return;
    qrt_worker_stop(w);
    if (w->reuse.s) qrt_reuse_free(&w->reuse);
    qrt_model_free(w->m);
    qrt_tokenizer_free(w->tok);
    pthread_cond_destroy(&w->work_cv), pthread_cond_destroy(&w->out_cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

const char *qrt_worker_model_name(const qrt_worker *w) { return w->model_name; }
int32_t qrt_worker_vocab(const qrt_worker *w) { return qrt_model_vocab(w->m); }
qrt_chat_dialect qrt_worker_dialect(const qrt_worker *w) { return w->o.dialect; }

/* The prompt's ids: token-id prompts as given, text tokenized (the tokenizer is safe to share). */
static int prompt_ids(qrt_worker *w, qrt_oa_request *req, int32_t **ids, int32_t *n, char *err, size_t err_size) {
    if (req->prompt_ids) {
        *ids = req->prompt_ids, *n = req->n_prompt_ids;
        req->prompt_ids = NULL;
        return 1;
    }
    size_t count = 0;
    if (qrt_tokenize(w->tok, req->prompt_text, strlen(req->prompt_text), ids, &count) != QRT_OK) {
        snprintf(err, err_size, "the prompt cannot be tokenized: %s", qrt_last_error());
        return 0;
    }
    *n = count > INT32_MAX ? INT32_MAX : (int32_t)count;
    return 1;
}

qrt_job *qrt_worker_submit(qrt_worker *w, qrt_oa_request *req, int *status, char *err, size_t err_size) {
    qrt_job *j = calloc(1, sizeof *j);
    *status = 500;
    if (!j) return snprintf(err, err_size, "out of memory"), NULL;
    j->w = w;
    j->req = *req;
    memset(req, 0, sizeof *req);
    j->refs = 2;
    j->t_submit_ms = qrt_now_ms();
    *status = 400;
    if (!prompt_ids(w, &j->req, &j->ids, &j->n_ids, err, err_size)) goto refuse;
    if (j->n_ids == 0) {
        snprintf(err, err_size, "the prompt has no tokens");
        goto refuse;
    }
    if (qrt_reuse_room(&w->reuse, j->n_ids) == 0) {
        snprintf(err, err_size, "the prompt has %d tokens; this server's context is %d (start it with a larger --ctx)",
                 j->n_ids, w->reuse.max_ctx);
        goto refuse;
    }
    pthread_mutex_lock(&w->mu);
    if (w->stopping || w->draining || w->n_waiting >= w->o.queue_max) {
        pthread_mutex_unlock(&w->mu);
        *status = 503;
        if (w->stopping || w->draining) snprintf(err, err_size, "the server is shutting down");
        else snprintf(err, err_size, "the server is busy (%d requests queued); retry later", w->o.queue_max);
        goto refuse;
    }
    if (w->tail) w->tail->next = j;
    else w->head = j;
    w->tail = j;
    w->n_waiting++;
    qrt_metrics_queue_depth(w->metrics, w->n_waiting);
    pthread_cond_signal(&w->work_cv);
    pthread_mutex_unlock(&w->mu);
    return j;
refuse:
    j->refs = 1;
    job_unref_locked(j);
    return NULL;
}
