/* Speculative decoding on the CPU (tiny-mm, the fixture with an MTP head):
 *   1. greedy parity: for K = 1..8 and three prompts, speculative output equals plain greedy output;
 *   2. forced accepts: a draft hook that returns the main model's own choice makes every cycle accept all
 *      K drafts (AL = K), and a hook that breaks draft r makes every cycle accept exactly r-1; the output
 *      still equals plain greedy output;
 *   3. rollback: after one cycle that accepts j of K = 6 drafts (j = 0..6; and of K = 16, a 17-token verify), the
 *      session state (position, GDN recurrent and conv state, KV cache) equals bit for bit a session that decoded
 *      only the accepted tokens one at a time — with the f32, bf16 and fp8 KV caches (K = 6);
 *   4. sampling: the distribution of the 2nd and 3rd sampled tokens with speculation matches plain
 *      sampling (two-sample chi-square over 2000 seeded runs each, 500 in quick mode; threshold below);
 *   5. failures reach the caller: a cycle in a full context, a draft hook returning no token; a context that ends
 *      at the last new token gives plain greedy's output all the same;
 *   6. the cost of one verify (K+1 tokens, one batched forward) against one decode step;
 *   7. continued speculation (a conversation's next turns on one session, tests/continued_spec.h) at K = 1, 3, 6
 *      (quick: 3) with the MTP's own and forced drafts: the tokens and the MTP's proposals of a fresh generation of the whole
 *      conversation; a session a plain generation left is continued plainly (an explicit spec_k is refused);
 *   8. the draft steps' NVFP4 copy of lm_head (QRT_DRAFT_HEAD=nvfp4): speculative output equals plain greedy output,
 *      and the MTP's proposals (under forced full accepts, so both runs draft at the same positions) are those of
 *      the copy: some differ from the BF16 lm_head's, most agree. */
#include <stdlib.h>

#include "continued_spec.h"
#include "engine/spec.h"
#include "test_util.h"

#define N_NEW 40

/* "quick" (the sanitizer builds pass it): the same checks on fewer cases and samples, so the test stays in
 * CI's budget at ASan speed — K in {1, 3, 6, 8}, one prompt for the reduced-precision KV caches, and 500
 * sampling runs (the chi-square limit holds for any sample size; the test only loses power). */
static int quick;

typedef struct {
    qrt_model *m;
    int V;
    const int32_t *prompts[3];
    int n_prompt[3];
} env;

static int32_t *plain_greedy(env *e, const int32_t *prompt, int n, int n_new) {
    qrt_session *s;
    CHECK_OK(qrt_session_new(e->m, n + n_new, &s));
    int32_t *out = calloc((size_t)n_new, sizeof *out);
    qrt_gen_opts go = {.max_new = n_new, .spec_k = 0};
    CHECK_OK(qrt_generate(s, prompt, n, &go, out, NULL));
    qrt_session_free(s);
    return out;
}

typedef struct {
    const int32_t *truth; /* plain greedy continuation */
    int n_prompt, n_truth;
    int break_at;         /* 0: always agree; r: draft r of every cycle is made wrong */
    int V;
} oracle;

static int32_t oracle_draft(int32_t k, int32_t proposed, int32_t pos, void *user) {
    const oracle *o = user;
    int i = pos - o->n_prompt;
    if (i < 0 || i >= o->n_truth) return proposed;
    if (o->break_at && k == o->break_at) return (o->truth[i] + 1) % o->V;
    if (o->break_at && k > o->break_at) return proposed;
    return o->truth[i];
}

static void spec_run(env *e, const int32_t *prompt, int n, int K, oracle *o, int32_t *out, qrt_gen_stats *gs) {
    qrt_session *s;
    CHECK_OK(qrt_session_new(e->m, n + N_NEW + K + 1, &s));
    qrt_gen_opts go = {.max_new = N_NEW, .spec_k = K, .draft_hook = o ? oracle_draft : NULL, .draft_user = o};
    CHECK_OK(qrt_generate(s, prompt, n, &go, out, gs));
    qrt_session_free(s);
}

/* The oracle needs the main model's choice for every position a draft can reach: N_NEW + K. */
#define N_TRUTH (N_NEW + QRT_SPEC_MAX_K + 1)

static void test_parity(env *e) {
    for (int p = 0; p < 3; p++) {
        int32_t *truth = plain_greedy(e, e->prompts[p], e->n_prompt[p], N_TRUTH);
        for (int K = 1; K <= 8; K++) {
            if (quick && K != 1 && K != 3 && K != 6 && K != 8) continue;
            int32_t out[N_NEW];
            qrt_gen_stats gs;
            spec_run(e, e->prompts[p], e->n_prompt[p], K, NULL, out, &gs);
            CHECK(gs.n_new == N_NEW && !memcmp(out, truth, sizeof out), "prompt %d K=%d: speculative != plain", p, K);
            /* forced full accepts */
            oracle o = {truth, e->n_prompt[p], N_TRUTH, 0, e->V};
            spec_run(e, e->prompts[p], e->n_prompt[p], K, &o, out, &gs);
            CHECK(!memcmp(out, truth, sizeof out), "prompt %d K=%d full accepts: output differs", p, K);
            CHECK(gs.accepts == (int64_t)K * gs.attempts && gs.full_accepts == gs.attempts,
                  "prompt %d K=%d: oracle drafts gave AL %lld/%lld", p, K, (long long)gs.accepts, (long long)gs.attempts);
            /* rejection at every draft position r (the long prompt only checks parity, to keep the test short) */
            for (int r = 1; r <= K && p != 1 && (K == 2 || K == 6 || K == 8); r++) {
                oracle ob = {truth, e->n_prompt[p], N_TRUTH, r, e->V};
                spec_run(e, e->prompts[p], e->n_prompt[p], K, &ob, out, &gs);
                CHECK(!memcmp(out, truth, sizeof out), "prompt %d K=%d reject at %d: output differs", p, K, r);
                CHECK(gs.accepts == (int64_t)(r - 1) * gs.attempts, "prompt %d K=%d reject at %d: %lld accepts in %lld "
                      "cycles", p, K, r, (long long)gs.accepts, (long long)gs.attempts);
            }
        }
        free(truth);
    }
}

/* Bit-exact comparison of everything a later token depends on. */
static void compare_state(env *e, const qrt_session *a, const qrt_session *b, const char *what) {
    const qrt_config *c = &e->m->cfg;
    CHECK(a->pos == b->pos, "%s: position %d vs %d", what, a->pos, b->pos);
    size_t S = (size_t)c->gdn_v_heads * c->gdn_dk * c->gdn_dv, conv = (size_t)(c->conv_kernel - 1) * e->m->conv_dim;
    const int fmt = a->m->kv_format;
    size_t rows = (size_t)a->pos * c->n_kv_heads, kv = rows * c->head_dim * qrt_kv_elem_bytes(fmt);
    for (int i = 0; i < c->n_layers; i++) {
        const qrt_layer_state *x = &a->ls[i], *y = &b->ls[i];
        if (c->layer_kind[i] == QRT_LAYER_LINEAR) {
            CHECK(!memcmp(x->S, y->S, S * sizeof(float)), "%s: layer %d GDN state differs", what, i);
            CHECK(!memcmp(x->conv, y->conv, conv * sizeof(float)), "%s: layer %d conv state differs", what, i);
        } else {
            const qrt_kv *p = &x->kv, *q = &y->kv;
            int same = !memcmp(p->k, q->k, kv) && !memcmp(p->v, q->v, kv);
            if (fmt == QRT_KV_FP8) same = same && !memcmp(p->ks, q->ks, rows * 4) && !memcmp(p->vs, q->vs, rows * 4);
            CHECK(same, "%s: layer %d KV cache differs", what, i);
        }
    }
}

static void test_rollback_state(env *e, int p, int K) {
    const int n = e->n_prompt[p];
    int32_t *truth = plain_greedy(e, e->prompts[p], n, K + 2);
    for (int j = 0; j <= K; j++) {
        oracle o = {truth + 1, n + 1, K + 1, j < K ? j + 1 : 0, e->V}; /* drafts start after the first token */
        qrt_session *a, *b;
        CHECK_OK(qrt_session_new(e->m, n + K + 2, &a));
        CHECK_OK(qrt_session_new(e->m, n + K + 2, &b));
        qrt_gen_opts go = {.max_new = K + 2, .spec_k = K, .draft_hook = oracle_draft, .draft_user = &o};
        qrt_gen_stats gs = {0};
        qrt_spec sp;
        int32_t first, got[QRT_SPEC_MAX_K + 1];
        CHECK_OK(qrt_spec_init(&sp, a, K, &go, &gs));
        CHECK_OK(qrt_spec_prefill(&sp, e->prompts[p], n, &first));
        int kept = 0;
        CHECK_OK(qrt_spec_cycle(&sp, got, &kept));
        CHECK(kept == j + 1, "prompt %d: cycle meant to accept %d drafts kept %d tokens", p, j, kept);
        qrt_spec_commit(&sp, got, kept, 1);
        /* b: the prompt, then the first token and the accepted drafts one at a time */
        float *logits = malloc(sizeof(float) * e->V);
        CHECK_OK(qrt_prefill(b, e->prompts[p], n, logits));
        CHECK_OK(qrt_decode(b, first, logits));
        for (int i = 0; i + 1 < kept; i++) CHECK_OK(qrt_decode(b, got[i], logits));
        char what[64];
        snprintf(what, sizeof what, "prompt %d, %d of %d drafts accepted", p, j, K);
        compare_state(e, a, b, what);
        free(logits);
        qrt_spec_free(&sp);
        qrt_session_free(a);
        qrt_session_free(b);
    }
    free(truth);
}

typedef struct {
    int k;      /* the draft to replace */
    int32_t id; /* with this */
} bad_draft_at;

static int32_t bad_draft(int32_t k, int32_t proposed, int32_t pos, void *user) {
    const bad_draft_at *b = user;
    (void)pos;
    return k == b->k ? b->id : proposed;
}

/* A context that ends exactly at the last new token: the cycles near its end draft fewer tokens, and the output is
 * still plain greedy's, to the last token. */
static void test_context_end(env *e) {
    const int n = e->n_prompt[2];
    int32_t *truth = plain_greedy(e, e->prompts[2], n, N_NEW);
    for (int K = 1; K <= 8; K += 7) {
        qrt_session *s;
        CHECK_OK(qrt_session_new(e->m, n + N_NEW - 1, &s));
        int32_t out[N_NEW];
        qrt_gen_opts go = {.max_new = N_NEW, .spec_k = K};
        qrt_gen_stats gs = {0};
        CHECK_OK(qrt_generate(s, e->prompts[2], n, &go, out, &gs));
        CHECK(gs.n_new == N_NEW && !memcmp(out, truth, sizeof out),
              "K=%d in a context that ends at the last token: %d tokens, output %s plain greedy's", K, gs.n_new,
              memcmp(out, truth, sizeof out) ? "differs from" : "equals");
        qrt_session_free(s);
    }
    free(truth);
}

/* A cycle's failures come back as its status (with nothing accepted), not as tokens from stale results. */
static void test_cycle_errors(env *e) {
    const int n = e->n_prompt[0];
    /* the context holds one token after the prompt: the first cycle decodes it plainly, the second has no room */
    qrt_session *s;
    CHECK_OK(qrt_session_new(e->m, n + 1, &s));
    qrt_gen_opts go = {.spec_k = 2};
    qrt_gen_stats gs = {0};
    qrt_spec sp;
    int32_t first, got[QRT_SPEC_MAX_K + 1];
    int kept = -1;
    CHECK_OK(qrt_spec_init(&sp, s, 2, &go, &gs));
    CHECK_OK(qrt_spec_prefill(&sp, e->prompts[0], n, &first));
    CHECK_OK(qrt_spec_cycle(&sp, got, &kept));
    CHECK(kept == 1, "the last room in the context: %d tokens kept, expected 1", kept);
    qrt_spec_commit(&sp, got, kept, 1);
    qrt_status st = qrt_spec_cycle(&sp, got, &kept);
    CHECK(st == QRT_ERR_CONTEXT && kept == 0, "a cycle in a full context returned %s with %d tokens",
          qrt_status_str(st), kept);
    qrt_spec_free(&sp);
    qrt_session_free(s);
    /* a draft hook returning ids outside the vocabulary: draft 1 of K = 1 (only the verify would read it) and
     * draft 2 of K = 3 (the MTP head's next draft step would embed it) */
    const int32_t bad[] = {-1, e->V};
    for (int K = 1; K <= 3; K += 2)
        for (int i = 0; i < 2; i++) {
            CHECK_OK(qrt_session_new(e->m, n + 8, &s));
            int32_t out[4];
            bad_draft_at b = {(K + 1) / 2, bad[i]};
            qrt_gen_opts gb = {.max_new = 4, .spec_k = K, .draft_hook = bad_draft, .draft_user = &b};
            st = qrt_generate(s, e->prompts[0], n, &gb, out, NULL);
            CHECK(st == QRT_ERR_ARG && strstr(qrt_last_error(), "draft hook"),
                  "K=%d, draft %d from the hook %d: %s (%s)", K, b.k, b.id, qrt_status_str(st), qrt_last_error());
            qrt_session_free(s);
        }
}

/* Two-sample chi-square. Tokens are taken from the most to the least frequent (both samples together) and
 * merged into groups of at least 10 samples, so every group is large enough for the statistic and rare
 * tokens still count. Under the null hypothesis X² ~ chi²(df); we fail above df + 5·sqrt(2·df), which for
 * df in the tens to hundreds is beyond the 0.9999 quantile (about a 1e-4 false-alarm rate for a fixed seed
 * set, and the seeds are fixed, so the outcome is reproducible). A real error in the rejection rule (e.g.
 * accepting every draft) moves X² by hundreds to thousands here. */
static const int *sort_a, *sort_b;
static int by_total_desc(const void *x, const void *y) {
    int i = *(const int *)x, j = *(const int *)y;
    int d = (sort_a[j] + sort_b[j]) - (sort_a[i] + sort_b[i]);
    return d ? d : i - j;
}

static void chi_square(const int *a, const int *b, int V, const char *what) {
    int *order = malloc(sizeof(int) * V);
    for (int i = 0; i < V; i++) order[i] = i;
    sort_a = a, sort_b = b;
    qsort(order, (size_t)V, sizeof(int), by_total_desc);
    double x2 = 0;
    int df = -1, ga = 0, gb = 0;
    for (int r = 0; r < V; r++) {
        ga += a[order[r]];
        gb += b[order[r]];
        if (ga + gb >= 10 || (r == V - 1 && ga + gb > 0)) {
            x2 += (double)(ga - gb) * (ga - gb) / (ga + gb);
            df++;
            ga = gb = 0;
        }
    }
    free(order);
    double limit = df + 5 * sqrt(2.0 * df);
    printf("  %s: chi-square %.1f on %d degrees of freedom (limit %.1f)\n", what, x2, df, limit);
    CHECK(df > 0 && x2 < limit, "%s: speculative sampling distribution differs (X2 %.1f, df %d)", what, x2, df);
}

static void test_sampling(env *e, qrt_sampling sampling, const char *what) {
    enum { N = 3 };
    const int RUNS = quick ? 500 : 2000;
    const int32_t *prompt = e->prompts[0];
    int n = e->n_prompt[0];
    int *plain[N], *spec[N];
    for (int t = 0; t < N; t++) {
        plain[t] = calloc((size_t)e->V, sizeof(int));
        spec[t] = calloc((size_t)e->V, sizeof(int));
    }
    qrt_session *s;
    CHECK_OK(qrt_session_new(e->m, n + N + 8, &s));
    int64_t attempts = 0, accepts = 0;
    for (int r = 0; r < RUNS; r++) {
        int32_t out[N];
        qrt_gen_stats gs;
        for (int mode = 0; mode < 2; mode++) {
            qrt_gen_opts go = {.max_new = N, .spec_k = mode ? 3 : 0, .sampling = sampling};
            go.sampling.seed = (uint64_t)r * 2 + (uint64_t)mode; /* independent streams for the two samples */
            qrt_session_reset(s);
            CHECK_OK(qrt_generate(s, prompt, n, &go, out, &gs));
            for (int t = 0; t < N; t++) (mode ? spec : plain)[t][out[t]]++;
            if (mode) attempts += gs.attempts, accepts += gs.accepts;
        }
    }
    printf("  %s: %lld cycles, %lld drafts accepted\n", what, (long long)attempts, (long long)accepts);
    CHECK(accepts > 0 && accepts < 3 * attempts, "%s: the test must see both accepts and rejections", what);
    char name[96];
    for (int t = 1; t < N; t++) {
        snprintf(name, sizeof name, "%s, token %d", what, t + 1);
        chi_square(plain[t], spec[t], e->V, name);
    }
    for (int t = 0; t < N; t++) {
        free(plain[t]);
        free(spec[t]);
    }
    qrt_session_free(s);
}

static void measure_verify(env *e) {
    const int32_t *prompt = e->prompts[1];
    qrt_session *s;
    CHECK_OK(qrt_session_new(e->m, 200, &s));
    float *logits = malloc(sizeof(float) * e->V * 8);
    int32_t rows[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    double decode = 1e30, verify = 1e30;
    for (int rep = 0; rep < 20; rep++) {
        qrt_session_reset(s);
        CHECK_OK(qrt_prefill(s, prompt, 64, logits));
        double t0 = qrt_now_ms();
        CHECK_OK(qrt_decode(s, prompt[64], logits));
        double t1 = qrt_now_ms();
        qrt_session_reset(s);
        CHECK_OK(qrt_prefill(s, prompt, 64, logits));
        qrt_session_begin_verify(s);
        double t2 = qrt_now_ms();
        CHECK_OK(qrt_forward(s, prompt + 64, 7, rows, 7, logits));
        double t3 = qrt_now_ms();
        decode = fmin(decode, t1 - t0);
        verify = fmin(verify, t3 - t2);
    }
    printf("  verify of 7 tokens (K=6) %.3f ms vs one decode step %.3f ms: %.2fx (CPU, tiny-mm, best of 20)\n", verify,
           decode, verify / decode);
    free(logits);
    qrt_session_free(s);
}

static void test_continued(env *e) {
    const int32_t *user = e->prompts[1] + 40; /* the next user messages: 6 tokens of the long prompt */
    const int Ks[] = {3, 1, 6};
    for (int i = 0; i < (quick ? 1 : 3); i++)
        for (int forced = 0; forced < 2; forced++) {
            cont_report rep;
            char why[256] = "";
            CHECK(cont_check(e->m, e->prompts[0], e->n_prompt[0], user, 6, Ks[i], forced, 1.0, &rep, why, sizeof why),
                  "continued speculation, K=%d, %s drafts: %s", Ks[i], forced ? "forced" : "own", why);
            printf("  continued turns K=%d, %s drafts: %lld cycles, %d of %d proposals as in fresh generations, MTP "
                   "state within %.1e\n", Ks[i], forced ? "forced" : "own", (long long)rep.cycles, rep.same, rep.drafts,
                   rep.worst);
        }
    /* a plain generation leaves a session the MTP head did not follow */
    qrt_session *s;
    CHECK_OK(qrt_session_new(e->m, 64, &s));
    int32_t out[8], next[3] = {0, user[0], user[1]};
    qrt_gen_opts go = {.max_new = 4, .spec_k = 0};
    qrt_gen_stats gs;
    CHECK_OK(qrt_generate(s, e->prompts[0], e->n_prompt[0], &go, out, &gs));
    next[0] = out[3];
    go.spec_k = 3;
    CHECK(qrt_generate(s, next, 3, &go, out, &gs) == QRT_ERR_ARG && strstr(qrt_last_error(), "spec_k 0"),
          "spec_k 3 on a session a plain generation left: %s", qrt_last_error());
    go.spec_k = QRT_SPEC_DEFAULT;
    CHECK_OK(qrt_generate(s, next, 3, &go, out, &gs));
    CHECK(gs.attempts == 0 && gs.n_new == 4, "the default continues it plainly: %lld cycles", (long long)gs.attempts);
    qrt_session_free(s);
}

/* The MTP's proposal at each position under forced full accepts (the oracle's drafts), into seen [N_TRUTH] (-1: none). */
typedef struct {
    oracle o;
    int32_t *seen;
} recorder;

static int32_t record_draft(int32_t k, int32_t proposed, int32_t pos, void *user) {
    recorder *r = user;
    const int i = pos - r->o.n_prompt;
    if (i >= 0 && i < r->o.n_truth) r->seen[i] = proposed;
    return oracle_draft(k, proposed, pos, &r->o);
}

static void record_proposals(env *e, int p, int K, const int32_t *truth, int32_t *seen) {
    for (int i = 0; i < N_TRUTH; i++) seen[i] = -1;
    recorder r = {{truth, e->n_prompt[p], N_TRUTH, 0, e->V}, seen};
    qrt_session *s;
    CHECK_OK(qrt_session_new(e->m, e->n_prompt[p] + N_NEW + K + 1, &s));
    int32_t out[N_NEW];
    qrt_gen_stats gs;
    qrt_gen_opts go = {.max_new = N_NEW, .spec_k = K, .draft_hook = record_draft, .draft_user = &r};
    CHECK_OK(qrt_generate(s, e->prompts[p], e->n_prompt[p], &go, out, &gs));
    qrt_session_free(s);
}

static void test_draft_head(env *e, const char *dir) {
    setenv("QRT_DRAFT_HEAD", "nvfp4", 1);
    env d = *e;
    const qrt_status st = qrt_model_load(dir, &test_cpu, &d.m);
    unsetenv("QRT_DRAFT_HEAD");
    CHECK_OK(st);
    if (!d.m) return;
    const qrt_linear *h = &d.m->mtp.draft_head;
    CHECK(h->data && h->fmt == QRT_WF_NVFP4 && h->n == d.V && h->k == d.m->cfg.hidden,
          "QRT_DRAFT_HEAD=nvfp4: the model has no NVFP4 [%d x %d] draft head", d.V, d.m->cfg.hidden);
    int differ = 0, agree = 0;
    for (int p = 0; p < 3; p++) {
        int32_t *truth = plain_greedy(e, e->prompts[p], e->n_prompt[p], N_TRUTH);
        for (int K = 1; K <= 7; K += 3) {
            if (quick && K != 3) continue;
            int32_t out[N_NEW];
            qrt_gen_stats gs;
            spec_run(&d, d.prompts[p], d.n_prompt[p], K, NULL, out, &gs);
            CHECK(gs.n_new == N_NEW && !memcmp(out, truth, sizeof out), "draft head, prompt %d K=%d: speculative != "
                  "plain", p, K);
        }
        int32_t with_lm_head[N_TRUTH], with_copy[N_TRUTH];
        record_proposals(e, p, 3, truth, with_lm_head);
        record_proposals(&d, p, 3, truth, with_copy);
        for (int i = 0; i < N_TRUTH; i++)
            if (with_lm_head[i] >= 0 && with_copy[i] >= 0) with_lm_head[i] == with_copy[i] ? agree++ : differ++;
        free(truth);
    }
    CHECK(differ > 0 && agree > differ, "draft head: %d of %d proposals differ from the BF16 lm_head's (expected some, "
          "fewer than half)", differ, differ + agree);
    printf("  draft head (QRT_DRAFT_HEAD=nvfp4): greedy output unchanged; %d of %d proposals differ from lm_head's\n",
           differ, differ + agree);
    qrt_model_free(d.m);
}

int main(int argc, char **argv) {
    const char *data = argc > 1 ? argv[1] : "tests/data";
    quick = argc > 2 && !strcmp(argv[2], "quick");
    char dir[1024], refpath[1100];
    snprintf(dir, sizeof dir, "%s/tiny-mm", data);
    snprintf(refpath, sizeof refpath, "%s/reference.safetensors", dir);
    env e = {0};
    CHECK_OK(qrt_model_load(dir, &test_cpu, &e.m));
    qrt_st_set ref = {0};
    CHECK_OK(qrt_st_add_file(&ref, refpath));
    const qrt_st_tensor *ps = ref_tensor(&ref, "gen_prompt_short", QRT_DT_I32), *pl = ref_tensor(&ref, "prompt", QRT_DT_I32);
    if (!e.m || !ps || !pl) return test_exit("test_spec");
    CHECK(e.m->mtp.present, "tiny-mm has an MTP head");
    e.V = qrt_model_vocab(e.m);
    e.prompts[0] = (const int32_t *)ps->data;
    e.n_prompt[0] = (int)ps->shape[0];
    e.prompts[1] = (const int32_t *)pl->data;
    e.n_prompt[1] = (int)pl->shape[0];
    e.prompts[2] = (const int32_t *)pl->data + 17;
    e.n_prompt[2] = 20;
    test_parity(&e);
    test_cycle_errors(&e);
    test_context_end(&e);
    for (int p = 0; p < 3; p++) test_rollback_state(&e, p, 6);
    test_rollback_state(&e, 1, QRT_SPEC_MAX_K); /* a verify of 17 tokens: still the recurrence */
    /* the reduced-precision KV caches: rollback stays bit-exact and speculative output equals plain output */
    for (int fmt = QRT_KV_BF16; fmt <= QRT_KV_FP8; fmt++) {
        qrt_load_opts kv_opts = test_cpu;
        kv_opts.kv_format = fmt;
        env k = e;
        CHECK_OK(qrt_model_load(dir, &kv_opts, &k.m));
        if (!k.m) continue;
        for (int p = 0; p < (quick ? 1 : 3); p++) test_rollback_state(&k, p, 6);
        int32_t *truth = plain_greedy(&k, k.prompts[2], k.n_prompt[2], N_NEW);
        for (int K = 1; K <= 8; K += 3) {
            int32_t out[N_NEW];
            qrt_gen_stats gs;
            spec_run(&k, k.prompts[2], k.n_prompt[2], K, NULL, out, &gs);
            CHECK(!memcmp(out, truth, sizeof out), "KV format %d K=%d: speculative != plain", fmt, K);
        }
        free(truth);
        qrt_model_free(k.m);
    }
    test_sampling(&e, (qrt_sampling){.temperature = 1.0f, .top_k = 20}, "temperature 1, top-k 20");
    test_sampling(&e, (qrt_sampling){.temperature = 1.5f, .top_p = 0.9f}, "temperature 1.5, top-p 0.9");
    measure_verify(&e);
    test_continued(&e);
    test_draft_head(&e, dir);
    qrt_st_close(&ref);
    qrt_model_free(e.m);
    return test_exit("test_spec");
}
