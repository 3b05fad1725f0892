/* Speculation that continues a session (a conversation's next turn under prefix reuse), shared by test_spec (CPU)
 * and test_cuda_model (GPU). One session holds a three-turn conversation; each turn after the first gets only the
 * tokens that follow what the session holds. Every turn is checked against a fresh speculative generation of the
 * whole conversation so far in a new session:
 *   - the same greedy tokens, equal to plain greedy decoding of the whole conversation;
 *   - a continued turn speculates (cycles > 0), and the session then holds exactly the tokens given out but the last
 *     (turns end inside a cycle too);
 *   - the MTP head's state is right: its KV cache at every position held equals the fresh session's, and the hidden
 *     kept for its next pair equals the last token's in a plain forward of the tokens held, each row within CONT_TOL
 *     (a prefill runs the chunked GDN where decoding runs it token by token; the two agree to rounding); and it
 *     proposes the same drafts at the same positions as the fresh generation (min_same of them: all where argmax
 *     does not flip on rounding). The third turn starts with a token other than the one the second gave out, so
 *     the pair at the session's last token must be redone.
 * With forced drafts (the plain greedy continuation replaces each proposal, after it is logged) every cycle accepts
 * all K, so turns stop inside cycles and the cycle structure is fixed whatever the MTP proposes. */
#ifndef QRT_TEST_CONTINUED_SPEC_H
#define QRT_TEST_CONTINUED_SPEC_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

#define CONT_MAX_LOG 3072 /* (k, position, proposal) of up to 1024 drafts */
#define CONT_CTX 512
#define CONT_TOL 1e-3     /* relative to a row's largest value; a pair of the wrong token or hidden is off by ~1 */

typedef struct {
    const int32_t *truth; /* forced drafts: the plain greedy continuation after n_prompt tokens, or NULL */
    int n_prompt, n_truth;
    int n;
    int32_t log[CONT_MAX_LOG]; /* [n/3][3] k, position, proposal */
} cont_drafts;

static int32_t cont_draft(int32_t k, int32_t proposed, int32_t pos, void *user) {
    cont_drafts *d = user;
    if (d->n + 3 <= CONT_MAX_LOG) d->log[d->n++] = k, d->log[d->n++] = pos, d->log[d->n++] = proposed;
    const int i = pos - d->n_prompt;
    return d->truth && i >= 0 && i < d->n_truth ? d->truth[i] : proposed;
}

/* What the check saw (for the report line). */
typedef struct {
    int64_t cycles;       /* of the continued turns */
    int drafts, same;     /* drafts proposed in the continued turns; how many equal the fresh generation's */
    double worst;         /* the MTP state's largest relative difference (its cache, its kept hidden) */
} cont_report;

/* The larger of a and b; NaN when either is (fmax would drop it). */
static double cont_worse(double a, double b) { return a != a ? a : (b != b || b > a) ? b : a; }

/* Largest relative difference of n rows [n][w] (backend memory) of a from those of b, each row against its largest
 * value in b. */
static double cont_rows_err(const qrt_model *m, const float *a, const float *b, size_t n, size_t w) {
    float *x = malloc(sizeof(float) * n * w), *y = malloc(sizeof(float) * n * w);
    double worst = x && y ? 0 : INFINITY;
    if (x && y) m->be->download(x, a, sizeof(float) * n * w), m->be->download(y, b, sizeof(float) * n * w);
    for (size_t r = 0; r < n && x && y; r++) {
        double d = 0, big = 0;
        for (size_t i = r * w; i < (r + 1) * w; i++)
            d = cont_worse(d, fabs((double)x[i] - y[i])), big = fmax(big, fabs(y[i]));
        worst = cont_worse(worst, big > 0 ? d / big : d);
    }
    free(x), free(y);
    return worst;
}

/* The MTP head's KV cache in s against f's at every position s holds (f32 KV caches). */
static double cont_mtp_cache_err(const qrt_session *s, const qrt_session *f) {
    const qrt_model *m = s->m;
    const size_t n = (size_t)qrt_session_pos(s) * m->cfg.n_kv_heads, w = (size_t)m->cfg.head_dim;
    if (s->mtp.kv.fmt != QRT_KV_F32) return INFINITY;
    return cont_worse(cont_rows_err(m, s->mtp.kv.k, f->mtp.kv.k, n, w), cont_rows_err(m, s->mtp.kv.v, f->mtp.kv.v, n, w));
}

/* The hidden s kept for its last token against that token's hidden in a plain forward of the tokens s holds, held
 * [pos] (≤ f's piece: one piece), run in scratch session f. */
static double cont_kept_hidden_err(const qrt_session *s, qrt_session *f, const int32_t *held) {
    const int pos = qrt_session_pos(s);
    const float *kept = qrt_session_kept_hidden(s);
    int32_t pick;
    qrt_session_reset(f);
    if (!kept || pos > f->piece || qrt_forward_greedy(f, held, pos, NULL, 1, &pick) != QRT_OK) return INFINITY;
    return cont_rows_err(s->m, kept, qrt_session_hidden(f, pos - 1), 1, (size_t)s->m->cfg.hidden);
}

/* n_new greedy tokens after ids [n] in session s (K drafts, logged to d) into out; 0 with why on failure. */
static int cont_generate(qrt_session *s, const int32_t *ids, int n, int n_new, int K, cont_drafts *d, int32_t *out,
                         qrt_gen_stats *gs, char *why, size_t why_size) {
    qrt_gen_opts go = {.max_new = n_new, .spec_k = K, .draft_hook = cont_draft, .draft_user = d};
    if (qrt_generate(s, ids, n, &go, out, gs) == QRT_OK && gs->n_new == n_new) return 1;
    snprintf(why, why_size, "generation failed: %s", qrt_last_error());
    return 0;
}

/* The buffers of one check. */
typedef struct {
    qrt_session *s, *f;    /* the conversation's session; the fresh generations' */
    int32_t *conv;         /* [CONT_CTX] the conversation so far */
    int32_t *truth, *got, *want; /* [CONT_CTX] plain greedy, continued, fresh speculative tokens of a turn */
    cont_drafts dc, df;    /* drafts of the continued and the fresh generation */
} cont_bufs;

/* Turn t: n tokens after the conversation conv [len], continuing b->s; 1 when every check holds. */
static int cont_turn(cont_bufs *b, int t, int len, int n, int K, int forced, cont_report *rep, char *why,
                     size_t why_size) {
    const int held = qrt_session_pos(b->s);
    qrt_gen_stats gc, gf, gp;
    /* the reference: plain greedy decoding of the whole conversation (and the forced drafts) */
    qrt_gen_opts plain = {.max_new = n + K + 1, .spec_k = 0};
    qrt_session_reset(b->f);
    if (qrt_generate(b->f, b->conv, len, &plain, b->truth, &gp) != QRT_OK)
        return snprintf(why, why_size, "plain generation failed: %s", qrt_last_error()), 0;
    memset(&b->dc, 0, sizeof b->dc), memset(&b->df, 0, sizeof b->df);
    b->dc.truth = b->df.truth = forced ? b->truth : NULL;
    b->dc.n_prompt = b->df.n_prompt = len, b->dc.n_truth = b->df.n_truth = n + K + 1;
    qrt_session_reset(b->f);
    if (!cont_generate(b->f, b->conv, len, n, K, &b->df, b->want, &gf, why, why_size) ||
        !cont_generate(b->s, b->conv + held, len - held, n, K, &b->dc, b->got, &gc, why, why_size))
        return 0;
    if (memcmp(b->want, b->truth, sizeof(int32_t) * n) || memcmp(b->got, b->want, sizeof(int32_t) * n))
        return snprintf(why, why_size, "turn %d: the continued or fresh speculative tokens differ from plain greedy", t), 0;
    if (t && gc.attempts == 0) return snprintf(why, why_size, "turn %d: the continued generation did not speculate", t), 0;
    if (qrt_session_pos(b->s) != len + n - 1)
        return snprintf(why, why_size, "turn %d: the session holds %d tokens, not the %d given out but the last", t,
                        qrt_session_pos(b->s), len + n - 1), 0;
    memcpy(b->conv + len, b->got, sizeof(int32_t) * n); /* the answer joins the conversation */
    const double cache = cont_mtp_cache_err(b->s, b->f), hidden = cont_kept_hidden_err(b->s, b->f, b->conv);
    rep->worst = cont_worse(rep->worst, cont_worse(cache, hidden));
    if (!(rep->worst <= CONT_TOL))
        return snprintf(why, why_size, "turn %d: the MTP head's cache is %.2e, the kept hidden %.2e off", t, cache,
                        hidden), 0;
    if (b->dc.n != b->df.n)
        return snprintf(why, why_size, "turn %d: %d drafts continued vs %d fresh", t, b->dc.n / 3, b->df.n / 3), 0;
    for (int i = 0; i < b->dc.n; i += 3) {
        const int32_t *c = b->dc.log + i, *f = b->df.log + i;
        if (c[0] != f[0] || c[1] != f[1])
            return snprintf(why, why_size, "turn %d: draft %d is k=%d at %d continued, k=%d at %d fresh", t, i / 3, c[0],
                            c[1], f[0], f[1]), 0;
        if (t) rep->drafts++, rep->same += c[2] == f[2];
    }
    if (t) rep->cycles += gc.attempts;
    return 1;
}

/* The conversation: prompt, then per turn the answer and the next user message (user [n_user]); K drafts per cycle,
 * forced or the MTP's own. min_same: the fraction of the continued turns' proposals that must equal the fresh
 * generations' (1 where argmax does not flip on rounding, as on the CPU). 1 when every check holds, else 0 with why. */
static int cont_check(qrt_model *m, const int32_t *prompt, int n_prompt, const int32_t *user, int n_user, int K,
                      int forced, double min_same, cont_report *rep, char *why, size_t why_size) {
    /* forced, the turns stop inside a cycle or at its end, keeping 1, 2 or K+1 of its tokens: K = 3 keeps 1, 2, 4 */
    static const int n_new[3] = {10, 15, 13};
    const int32_t V = qrt_model_vocab(m);
    cont_bufs *b = calloc(1, sizeof *b);
    memset(rep, 0, sizeof *rep);
    int ok = b && (b->conv = malloc(sizeof(int32_t) * CONT_CTX)) && (b->truth = malloc(sizeof(int32_t) * CONT_CTX)) &&
             (b->got = malloc(sizeof(int32_t) * CONT_CTX)) && (b->want = malloc(sizeof(int32_t) * CONT_CTX)) &&
             n_prompt + 3 * n_user + 10 + 15 + 13 <= QRT_MAX_T && qrt_session_new(m, CONT_CTX, &b->s) == QRT_OK &&
             qrt_session_new(m, CONT_CTX, &b->f) == QRT_OK;
    if (!ok) snprintf(why, why_size, "setup failed: %s", qrt_last_error());
    int len = n_prompt;
    if (ok) memcpy(b->conv, prompt, sizeof(int32_t) * n_prompt);
    for (int t = 0; t < 3 && ok; t++) {
        ok = cont_turn(b, t, len, n_new[t], K, forced, rep, why, why_size);
        len += n_new[t];
        /* the next user message; the third turn's first token is not the one the second gave out (as when a stop
         * string or the template changes it), so the MTP pair at the session's last token must be redone */
        if (t == 1) b->conv[len - 1] = (b->conv[len - 1] + 1) % V;
        memcpy(b->conv + len, user, sizeof(int32_t) * n_user);
        len += n_user;
    }
    if (ok && rep->same < min_same * rep->drafts) {
        snprintf(why, why_size, "the continued turns proposed %d of %d drafts as the fresh generations did", rep->same,
                 rep->drafts);
        ok = 0;
    }
    if (b) {
        qrt_session_free(b->s), qrt_session_free(b->f);
        free(b->conv), free(b->truth), free(b->got), free(b->want);
    }
    free(b);
    return ok;
}
#endif
