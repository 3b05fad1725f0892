/* Prefix reuse across generations (see reuse.h). */
#include "server/reuse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

qrt_status qrt_reuse_init(qrt_reuse *r, qrt_model *m, int32_t max_ctx, int enabled) {
    memset(r, 0, sizeof *r);
    if (!max_ctx) { /* the default: the config's maximum, as far as memory allows; said, since it sets what fits */
        size_t avail = 0;
        max_ctx = qrt_session_default_ctx(m, &avail);
        if (max_ctx < 1)
            return qrt_fail(QRT_ERR_MEMORY, "not even a 1-token session fits in the %.1f GB %s memory left after "
                            "loading the model (less %.1f GB kept for scratch)", avail / 1e9, m->be->name,
                            QRT_CTX_RESERVE / 1e9);
        fprintf(stderr, "context: %d tokens (the config's maximum is %d; %.1f GB of %s memory available); -c N sets "
                "it\n", max_ctx, m->cfg.max_pos, avail / 1e9, m->be->name);
    }
    r->m = m, r->max_ctx = max_ctx, r->enabled = enabled;
    return qrt_session_new(m, max_ctx, &r->s);
}

void qrt_reuse_free(qrt_reuse *r) {
    qrt_session_free(r->s);
    free(r->consumed);
    memset(r, 0, sizeof *r);
}

void qrt_reuse_reset(qrt_reuse *r) {
    qrt_session_reset(r->s);
    r->n_consumed = 0;
}

/* qrt_generate needs prompt + max_new - 1 positions (a speculative cycle near the end drafts fewer, spec.c). */
static int32_t room_from(const qrt_reuse *r, int32_t pos, int32_t n) {
    int64_t room = (int64_t)r->max_ctx - pos - n + 1;
    return room < 0 ? 0 : (int32_t)room;
}

int32_t qrt_reuse_room(const qrt_reuse *r, int32_t n) { return room_from(r, 0, n); }

/* How many of ids the kept state covers: all it consumed when that is a strict prefix, else 0. */
static int32_t kept_prefix(const qrt_reuse *r, const int32_t *ids, int32_t n) {
    if (!r->enabled || r->n_consumed == 0 || r->n_consumed >= n) return 0;
    if (memcmp(ids, r->consumed, (size_t)r->n_consumed * sizeof *ids)) return 0;
    return r->n_consumed;
}

/* Remember what the session now holds: the first pos ids of prompt + output (qrt_generate keeps only tokens it gave
 * out, so pos <= n + n_out; a session past that could not be named, and is reset). */
static void remember(qrt_reuse *r, const int32_t *ids, int32_t n, const int32_t *out, int32_t n_out) {
    int32_t pos = qrt_session_pos(r->s);
    if (pos > n + n_out || (pos > r->cap && !(r->consumed = realloc(r->consumed, (size_t)(r->cap = pos) * sizeof(int32_t))))) {
        r->cap = 0;
        qrt_reuse_reset(r);
        return;
    }
    int32_t from_prompt = pos < n ? pos : n;
    memcpy(r->consumed, ids, (size_t)from_prompt * sizeof *ids);
    if (pos > n) memcpy(r->consumed + n, out, (size_t)(pos - n) * sizeof *out);
    r->n_consumed = pos;
}

qrt_status qrt_reuse_generate(qrt_reuse *r, const int32_t *ids, int32_t n, qrt_gen_opts *opts, int32_t *out,
                              qrt_gen_stats *stats, int32_t *reused) {
    int32_t keep = kept_prefix(r, ids, n);
    if (!keep) qrt_reuse_reset(r);
    qrt_gen_opts go = *opts;
    /* a continuation speculates where a speculative generation left the session (its MTP cache covers every kept
     * token); after a plain one (penalties, logprobs) it decodes plainly */
    if (keep && !qrt_session_kept_hidden(r->s)) go.spec_k = 0;
    int32_t room = room_from(r, keep, n - keep);
    if (room == 0) return qrt_fail(QRT_ERR_CONTEXT, "the prompt (%d tokens) does not fit the context of %d; restart "
                                   "with a larger --ctx (serve and chat take it)", n, r->max_ctx);
    if (opts->max_new > room) opts->max_new = room;
    go.max_new = opts->max_new;
    go.history = ids, go.n_history = keep; /* repetition_penalty counts the reused prompt too */
    *reused = keep;
    qrt_status st = qrt_generate(r->s, ids + keep, n - keep, &go, out, stats);
    if (st != QRT_OK) {
        qrt_reuse_reset(r);
        return st;
    }
    remember(r, ids, n, out, stats->n_new);
    return QRT_OK;
}
