/* Speculative decoding with the MTP head (docs/engine.md, docs/model.md §3). One cycle: the MTP drafts K tokens
 * (its first draft comes from catching up on the tokens the last cycle accepted), the main model verifies
 * [next, d1..dK] in one batched forward, the longest matching prefix plus one bonus token is accepted,
 * the main model rolls back to the accepted tokens, and the MTP catches up on them from the main model's
 * hidden states. Greedy: accept while the draft equals the main argmax. Sampling: the standard rejection
 * rule (accept d with probability min(1, p(d)/q(d)), else draw from norm(max(0, p − q))), so the output
 * follows the plain sampling distribution. */
#ifndef QRT_SPEC_H
#define QRT_SPEC_H
#include "engine/sample.h"
#include "model/model.h"

typedef struct {
    qrt_session *s;
    const qrt_gen_opts *opts;
    qrt_gen_stats *stats;
    int K;                /* drafts per cycle */
    qrt_chooser ch;       /* token choice (and its generator) shared by main and draft picks */
    int32_t next;         /* the last committed token, not yet consumed by the main model */
    int hidden_row;       /* row of the last main forward's hidden states holding the last kept token's; -1: none ran */
    int32_t cycle_pos;    /* the main model's position when the current cycle began */
    int cycle_K;          /* the current cycle's drafts (0: a plain step at the end of the context) */
    float *verify_logits; /* host [K+1][V] (sampling only) */
    float *draft_logits;  /* host [V] MTP logits of the latest draft step (sampling only) */
    float *q;             /* host [K][V] draft distributions (sampling only) */
    /* greedy: only the argmax of each row comes back from the backend */
    int32_t verify_picks[QRT_SPEC_MAX_K + 1];
    int32_t draft_pick; /* the MTP's latest greedy pick */
} qrt_spec;

qrt_status qrt_spec_init(qrt_spec *sp, qrt_session *s, int K, const qrt_gen_opts *opts, qrt_gen_stats *stats);
void qrt_spec_free(qrt_spec *sp);
/* Prefill ids through the main model and the MTP head; the first generated token goes to *first (-1 when
 * opts->cancel stopped it between pieces). The session is empty, or a speculative generation left it
 * (qrt_session_kept_hidden is not NULL): then the MTP first redoes its pair at the session's last token with ids[0]. */
qrt_status qrt_spec_prefill(qrt_spec *sp, const int32_t *ids, int32_t n, int32_t *first);
/* One cycle's draft, verify and accept; writes the accepted drafts and the bonus token to out [K+1] and how many to
 * *n_out. Fails (with *n_out = 0) when the main model's or the MTP head's logits are not finite, when the session's
 * context is full, or when a draft hook returns no token. */
qrt_status qrt_spec_cycle(qrt_spec *sp, int32_t *out, int *n_out);
/* End the cycle keeping the first n_keep (1..*n_out) of its tokens out: fewer when the generation stops inside them,
 * so the session holds exactly the tokens given out and can be continued. The main model rolls back to them and the
 * MTP catches up on them; with more, its last row gives the next cycle's first draft. */
void qrt_spec_commit(qrt_spec *sp, const int32_t *out, int n_keep, int more);
/* After the last cycle: keep the hidden of the session's last token, so a later speculative generation can continue
 * the session (no-op when nothing ran). */
void qrt_spec_finish(qrt_spec *sp);
#endif
