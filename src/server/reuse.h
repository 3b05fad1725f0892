/* One session kept across requests, so a prompt that extends the previous conversation is not prefilled
 * again. The session remembers the token ids it consumed; a new prompt that starts with exactly those ids
 * continues from the session's state with only its suffix. Gated DeltaNet state cannot be truncated, so
 * anything else (a prompt that diverges anywhere, even one token before the end) starts from an empty
 * session. A continued generation speculates as asked when the previous one did (the session keeps the MTP
 * head's cache and the hidden state its next pair reads); after a plain one (penalties, logprobs), whose tokens
 * the MTP did not see, it decodes without speculation. */
#ifndef QRT_SERVER_REUSE_H
#define QRT_SERVER_REUSE_H

#include "qwenrt.h"

typedef struct {
    qrt_model *m;
    qrt_session *s;
    int32_t max_ctx;
    int enabled;        /* 0: every generation starts from an empty session */
    int32_t *consumed;  /* the ids the session holds, in order */
    int32_t n_consumed, cap;
} qrt_reuse;

/* max_ctx 0: qrt_session_default_ctx's (the config's maximum as far as memory allows), said on stderr. */
qrt_status qrt_reuse_init(qrt_reuse *r, qrt_model *m, int32_t max_ctx, int enabled);
void qrt_reuse_free(qrt_reuse *r);
/* Forget the kept state (the next generation prefills everything). */
void qrt_reuse_reset(qrt_reuse *r);

/* The tokens a generation of n prompt ids may produce at most (0 when the prompt does not fit). */
int32_t qrt_reuse_room(const qrt_reuse *r, int32_t n);

/* qrt_generate for the whole prompt ids[0..n), reusing the kept state when it is a prefix. opts->max_new is
 * lowered to what fits the context. *reused: prompt tokens not prefilled again (stats->n_prompt counts the
 * rest). */
qrt_status qrt_reuse_generate(qrt_reuse *r, const int32_t *ids, int32_t n, qrt_gen_opts *opts, int32_t *out,
                              qrt_gen_stats *stats, int32_t *reused);

#endif
