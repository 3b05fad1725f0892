/* End to end on the GPU: load each fixture model (tests/data/tiny-*) on the cuda device and check that
 * greedy generation reproduces the Hugging Face continuations stored in reference.safetensors
 * (gen_long after the 130-token prompt, gen_short after the 5-token one; 40 tokens each), and report how
 * far the first-step logits are from HF's. On the model with an MTP head, speculative decoding at K = 1..8
 * must give the same tokens, also with drafts forced to agree (full accepts) or to fail at every position
 * (rollback at each j) on the GPU. Exit 77 (CTest SKIP) when there is no GPU. */
#include <math.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "io/safetensors.h"
#include "model/model.h"

static int failures = 0;

static const qrt_st_tensor *need(const qrt_st_set *ref, const char *name, qrt_dtype dt) {
    const qrt_st_tensor *t = qrt_st_find(ref, name);
    if (!t || t->dtype != dt) {
        printf("FAIL reference tensor %s missing or of the wrong dtype\n", name);
        failures++;
        return NULL;
    }
    return t;
}

static void run_case(qrt_model *m, const qrt_st_set *ref, const char *model, const char *which) {
    char pn[64], gn[64], ln[64];
    snprintf(pn, sizeof pn, "gen_prompt_%s", which);
    snprintf(gn, sizeof gn, "gen_%s", which);
    snprintf(ln, sizeof ln, "gen_logits_%s", which);
    const qrt_st_tensor *pt = need(ref, pn, QRT_DT_I32), *gt = need(ref, gn, QRT_DT_I32), *lt = need(ref, ln, QRT_DT_F32);
    if (!pt || !gt || !lt) return;
    int n = (int)pt->shape[0], n_new = (int)gt->shape[0];
    const int32_t V = qrt_model_vocab(m);
    int32_t *prompt = malloc(sizeof(int32_t) * n), *want = malloc(sizeof(int32_t) * n_new);
    int32_t *got = calloc((size_t)n_new, sizeof(int32_t));
    memcpy(prompt, pt->data, sizeof(int32_t) * n);
    memcpy(want, gt->data, sizeof(int32_t) * n_new);
    qrt_session *s = NULL;
    qrt_gen_stats gs;
    qrt_gen_opts go = {.max_new = n_new, .stop_eos = 0};
    if (qrt_session_new(m, n + n_new, &s) != QRT_OK || qrt_generate(s, prompt, n, &go, got, &gs) != QRT_OK) {
        printf("FAIL %s %s: %s\n", model, which, qrt_last_error());
        failures++;
    } else {
        int first_bad = -1;
        for (int i = 0; i < n_new && first_bad < 0; i++)
            if (got[i] != want[i]) first_bad = i;
        /* first-step logits against HF's (row 0 of gen_logits: the prefill) */
        float *logits = malloc(sizeof(float) * V);
        qrt_session_reset(s);
        double maxd = 0;
        if (qrt_prefill(s, prompt, n, logits) == QRT_OK) {
            const float *hf = (const float *)lt->data;
            for (int32_t v = 0; v < V; v++) maxd = fmax(maxd, fabs((double)logits[v] - hf[v]));
        }
        free(logits);
        if (first_bad >= 0) {
            printf("FAIL %-10s %-5s prompt %3d: token %d is %d, HF has %d (prefill max|Δlogit| %.2e)\n", model, which, n,
                   first_bad, got[first_bad], want[first_bad], maxd);
            failures++;
        } else {
            printf("ok   %-10s %-5s prompt %3d: %d greedy tokens equal HF's (prefill max|Δlogit| %.2e)\n", model,
                   which, n, n_new, maxd);
        }
    }
    qrt_session_free(s);
    free(prompt), free(want), free(got);
}

/* Drafts that agree with the reference for the first break_at-1 positions of a cycle, then disagree. */
typedef struct {
    const int32_t *want;
    int n_prompt, n_want, break_at, V;
} forced;

static int32_t forced_draft(int32_t k, int32_t proposed, int32_t pos, void *user) {
    const forced *f = user;
    int i = pos - f->n_prompt;
    if (i < 0 || i >= f->n_want) return proposed;
    if (f->break_at && k >= f->break_at) return k == f->break_at ? (f->want[i] + 1) % f->V : proposed;
    return f->want[i];
}

static void run_spec_cases(qrt_model *m, const qrt_st_set *ref, const char *model) {
    const qrt_st_tensor *pt = need(ref, "gen_prompt_short", QRT_DT_I32), *gt = need(ref, "gen_short", QRT_DT_I32);
    if (!pt || !gt) return;
    int n = (int)pt->shape[0], n_new = (int)gt->shape[0] - QRT_SPEC_MAX_K;
    const int32_t *prompt = (const int32_t *)pt->data, *want = (const int32_t *)gt->data;
    int32_t got[64];
    int bad = 0, runs = 0;
    for (int K = 1; K <= 8; K++)
        for (int brk = -1; brk <= K; brk++) { /* -1: the MTP's own drafts; 0: all agree; r: fail at draft r */
            forced f = {want, n, (int)gt->shape[0], brk, qrt_model_vocab(m)};
            qrt_gen_opts go = {.max_new = n_new, .spec_k = K, .draft_hook = brk >= 0 ? forced_draft : NULL,
                               .draft_user = &f};
            qrt_session *s = NULL;
            qrt_gen_stats gs;
            runs++;
            if (qrt_session_new(m, n + n_new + K + 1, &s) != QRT_OK || qrt_generate(s, prompt, n, &go, got, &gs) != QRT_OK ||
                memcmp(got, want, sizeof(int32_t) * n_new) != 0 || (brk == 0 && gs.accepts != (int64_t)K * gs.attempts)) {
                printf("FAIL %-10s speculative K=%d drafts %d: tokens differ from greedy (or accepts %lld/%lld)\n", model,
                       K, brk, (long long)gs.accepts, (long long)gs.attempts);
                bad++;
            }
            qrt_session_free(s);
        }
    failures += bad;
    if (!bad) printf("ok   %-10s speculative K=1..8, own/forced/failing drafts: %d runs equal greedy\n", model, runs);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_cuda_model DATA_DIR [cpu]   (cpu: run the same checks on the CPU backend)\n");
        return 2;
    }
    const int device = argc > 2 && !strcmp(argv[2], "cpu") ? QRT_DEVICE_CPU : QRT_DEVICE_CUDA;
    if (device == QRT_DEVICE_CUDA && qrt_cuda_device_count() < 1) {
        printf("SKIP: no CUDA device (no GPU or no driver); the gpu tests need one\n");
        return 77;
    }
    const char *models[] = {"tiny-mm", "tiny-flat", "tiny-tied"};
    for (int i = 0; i < 3; i++) {
        char dir[1024], refpath[1100];
        snprintf(dir, sizeof dir, "%s/%s", argv[1], models[i]);
        snprintf(refpath, sizeof refpath, "%s/reference.safetensors", dir);
        qrt_load_opts opts = {.device = device};
        qrt_model *m = NULL;
        qrt_st_set ref = {0};
        if (qrt_model_load(dir, &opts, &m) != QRT_OK || qrt_st_add_file(&ref, refpath) != QRT_OK) {
            printf("FAIL %s: %s\n", models[i], qrt_last_error());
            failures++;
        } else {
            run_case(m, &ref, models[i], "long");
            run_case(m, &ref, models[i], "short");
            if (m->mtp.present) run_spec_cases(m, &ref, models[i]);
        }
        qrt_st_close(&ref);
        qrt_model_free(m);
    }
    printf("%s: %d failures\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
