/* End to end on the GPU: load each fixture model (tests/data/tiny-*) on the cuda device and check that
 * greedy generation reproduces the Hugging Face continuations stored in reference.safetensors
 * (gen_long after the 130-token prompt, gen_short after the 5-token one; 40 tokens each), and report how
 * far the first-step logits are from HF's. Exit 77 (CTest SKIP) when there is no GPU. */
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
        }
        qrt_st_close(&ref);
        qrt_model_free(m);
    }
    printf("%s: %d failures\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
