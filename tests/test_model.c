/* The CPU engine against Hugging Face transformers (f32) on the fixture models of tests/data (made by
 * scripts/make_fixtures.py):
 *   - prefill logits at T = 1, 63, 64, 65, 130 (GDN chunk boundaries at 64) against HF's rows;
 *   - the same 130 tokens fed in uneven pieces, token by token, and as prefill + decode;
 *   - greedy continuations of 40 tokens, token for token, and the logits of every step;
 *   - a 4080-token prompt prefilled in the engine's pieces: HF's logits at 14 positions over it, then 16 greedy
 *     tokens and their logits (test_long_prompt; argument "quick" shortens it for the sanitizer build).
 *
 * Tolerance: LOGIT_TOL on the row-relative error max|ours − HF| / max|HF|. HF's own chunked and recurrent
 * GDN paths differ by up to 6e-5 in absolute logits on these models (tests/data/README.md), i.e. ~2e-5
 * relative; our errors are f32 reordering of the same sums. 1e-4 leaves a 5x margin over what f32
 * rounding gives here and still fails on any real bug (a wrong norm, RoPE or head mapping moves logits
 * by > 1e-2). The argmax must match at every position unless HF's own top-2 gap is below the tolerance
 * (a tie within f32 noise), in which case our pick must be one of the tied tokens. */
#include <stdlib.h>

#include "io/quant_encode.h"
#include "model/model.h"
#include "test_util.h"
#include "util/argmax.h"

#define LOGIT_TOL 1e-4

typedef struct {
    const char *name;
    qrt_model *m;
    qrt_st_set ref;
    const int32_t *prompt; /* [130] */
    const float *logits;   /* [130][V] */
    int n_prompt, V;
    double worst;          /* largest row error seen */
} fixture;

static void check_row(fixture *f, const char *what, int row, const float *got, const float *ref) {
    double err = row_rel_err(got, ref, f->V);
    if (!(err <= f->worst)) f->worst = err;
    CHECK(err <= LOGIT_TOL, "%s %s row %d: relative error %.3g > %.1g", f->name, what, row, err, LOGIT_TOL);
    int32_t mine = qrt_argmax(got, f->V), theirs = qrt_argmax(ref, f->V);
    CHECK(mine == theirs || ref[theirs] - ref[mine] <= LOGIT_TOL * fabsf(ref[theirs]),
          "%s %s row %d: argmax %d, HF %d (HF gap %.3g)", f->name, what, row, mine, theirs, ref[theirs] - ref[mine]);
}

/* Prefill of the first T prompt tokens with every row requested. */
static void test_prefill(fixture *f, int T) {
    qrt_session *s;
    CHECK_OK(qrt_session_new(f->m, T, &s));
    int32_t *rows = malloc(sizeof *rows * T);
    float *out = malloc(sizeof *out * (size_t)T * f->V);
    for (int i = 0; i < T; i++) rows[i] = i;
    char what[32];
    snprintf(what, sizeof what, "prefill T=%d", T);
    CHECK_OK(qrt_forward(s, f->prompt, T, rows, T, out));
    for (int i = 0; i < T; i++) check_row(f, what, i, out + (size_t)i * f->V, f->logits + (size_t)i * f->V);
    CHECK(qrt_session_pos(s) == T, "position after prefill");
    free(rows);
    free(out);
    qrt_session_free(s);
}

/* Feed the prompt in the given piece sizes (0-terminated), keeping every row; returns the logits. */
static float *run_pieces(fixture *f, const int *pieces) {
    qrt_session *s;
    CHECK_OK(qrt_session_new(f->m, f->n_prompt, &s));
    float *out = malloc(sizeof *out * (size_t)f->n_prompt * f->V);
    int32_t rows[QRT_MAX_T];
    for (int i = 0; i < QRT_MAX_T; i++) rows[i] = i;
    int pos = 0;
    for (int p = 0; pieces[p] && pos < f->n_prompt; p++) {
        int n = QRT_MIN(pieces[p], f->n_prompt - pos);
        CHECK_OK(qrt_forward(s, f->prompt + pos, n, rows, n, out + (size_t)pos * f->V));
        pos += n;
    }
    CHECK(pos == f->n_prompt, "pieces cover the prompt");
    qrt_session_free(s);
    return out;
}

static void test_pieces(fixture *f) {
    static const int uneven[] = {50, 1, 13, 66, 0};
    static int one_by_one[131];
    static const int prefill_then_decode[] = {65, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                              1,  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                              1,  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0};
    for (int i = 0; i < 130; i++) one_by_one[i] = 1;
    float *a = run_pieces(f, uneven), *b = run_pieces(f, one_by_one), *c = run_pieces(f, prefill_then_decode);
    double ab = 0, bc = 0;
    for (int i = 0; i < f->n_prompt; i++) {
        const float *ref = f->logits + (size_t)i * f->V;
        check_row(f, "pieces 50+1+13+66", i, a + (size_t)i * f->V, ref);
        check_row(f, "token by token", i, b + (size_t)i * f->V, ref);
        check_row(f, "prefill 65 + decode", i, c + (size_t)i * f->V, ref);
        ab = fmax(ab, row_rel_err(a + (size_t)i * f->V, b + (size_t)i * f->V, f->V));
        bc = fmax(bc, row_rel_err(c + (size_t)i * f->V, b + (size_t)i * f->V, f->V));
    }
    /* prefill + decode against pure decode: the same tokens through the chunked and recurrent forms */
    CHECK(bc <= LOGIT_TOL, "%s: prefill+decode vs token-by-token differ by %.3g", f->name, bc);
    printf("  %s: pieces vs token-by-token %.2e, prefill+decode vs token-by-token %.2e\n", f->name, ab, bc);
    free(a);
    free(b);
    free(c);
}

/* Greedy continuation (40 tokens; 16 after the long prompt) from the reference set ref: ids exact, and every step's
 * logits. */
static void test_greedy(fixture *f, const qrt_st_set *ref, const char *prompt_name, const char *gen_name,
                        const char *logits_name) {
    const qrt_st_tensor *tp = ref_tensor(ref, prompt_name, QRT_DT_I32), *tg = ref_tensor(ref, gen_name, QRT_DT_I32),
                        *tl = ref_tensor(ref, logits_name, QRT_DT_F32);
    if (!tp || !tg || !tl) return;
    const int32_t *prompt = (const int32_t *)tp->data, *gen = (const int32_t *)tg->data;
    const float *ref_logits = (const float *)tl->data;
    int n = (int)tp->shape[0], n_new = (int)tg->shape[0];
    qrt_session *s;
    CHECK_OK(qrt_session_new(f->m, n + n_new, &s));
    int32_t *out = calloc((size_t)n_new, sizeof *out);
    qrt_gen_opts go = {.max_new = n_new, .stop_eos = 0};
    qrt_gen_stats gs;
    CHECK_OK(qrt_generate(s, prompt, n, &go, out, &gs));
    int same = gs.n_new == n_new;
    for (int i = 0; i < n_new && same; i++) same = out[i] == gen[i];
    CHECK(same, "%s %s: greedy continuation differs from transformers (first %d new tokens)", f->name, gen_name, n_new);
    /* step logits, teacher-forced on HF's tokens so one early difference does not hide later ones */
    qrt_session_reset(s);
    float *logits = malloc(sizeof *logits * f->V);
    CHECK_OK(qrt_prefill(s, prompt, n, logits));
    for (int i = 0; i < n_new; i++) {
        check_row(f, logits_name, i, logits, ref_logits + (size_t)i * f->V);
        if (i + 1 < n_new) CHECK_OK(qrt_decode(s, gen[i], logits));
    }
    free(logits);
    free(out);
    qrt_session_free(s);
}

/* The long prompt (reference-long.safetensors: 4080 tokens, HF's logits at 14 positions spread over it, 16 greedy
 * tokens after it), prefilled through the public call as an application would: the CPU's pieces of 256 tokens, so
 * 16 pieces, each GDN layer's chunked form carrying its state from chunk to chunk and piece to piece (on tiny-longmem,
 * whose GDN heads decay slowly, that state is in every row), attention over up to 4095 keys, RoPE at positions up to
 * 4095. Same tolerance as the short prompt: the errors stay at the short prompt's level (≤ 2.2e-5 of the row), and
 * HF's own chunked and recurrent paths agree to 1e-5 of the row at this length (tests/data/README.md).
 * LONG_QUICK (the sanitizer build, where a full run takes minutes): the rows up to position 1024 from a prefix of 1025
 * tokens (causal: row t is the reference for any prefix that holds it) and no continuation. */
#define LONG_QUICK 1
#define LONG_FULL 2
static void test_long_prompt(fixture *f, const char *dir, int mode) {
    char path[1100];
    snprintf(path, sizeof path, "%s/reference-long.safetensors", dir);
    qrt_st_set ref = {0};
    CHECK_OK(qrt_st_add_file(&ref, path));
    const qrt_st_tensor *tp = ref_tensor(&ref, "prompt", QRT_DT_I32), *tr = ref_tensor(&ref, "rows", QRT_DT_I32),
                        *tl = ref_tensor(&ref, "logits", QRT_DT_F32);
    if (!tp || !tr || !tl) {
        qrt_st_close(&ref);
        return;
    }
    const int32_t *prompt = (const int32_t *)tp->data, *rows = (const int32_t *)tr->data;
    int n = (int)tp->shape[0], n_rows = (int)tr->shape[0];
    CHECK(tl->shape[0] == n_rows && tl->shape[1] == f->V, "%s reference-long logits shape", f->name);
    if (mode == LONG_QUICK) {
        while (n_rows > 1 && rows[n_rows - 1] > 1024) n_rows--;
        n = rows[n_rows - 1] + 1;
    }
    const double before = f->worst;
    f->worst = 0;
    qrt_session *s;
    CHECK_OK(qrt_session_new(f->m, n, &s));
    float *out = malloc(sizeof *out * (size_t)n_rows * f->V);
    CHECK_OK(qrt_forward(s, prompt, n, rows, n_rows, out));
    char what[48];
    snprintf(what, sizeof what, "long prompt (%d tokens), position", n);
    for (int i = 0; i < n_rows; i++)
        check_row(f, what, rows[i], out + (size_t)i * f->V, (const float *)tl->data + (size_t)i * f->V);
    const double rows_worst = f->worst;
    const int piece = s->piece;
    free(out);
    qrt_session_free(s);
    f->worst = 0;
    if (mode == LONG_FULL) test_greedy(f, &ref, "prompt", "gen", "gen_logits");
    printf("  %s: long prompt of %d tokens in pieces of %d: %d rows, max row-relative error %.2e", f->name, n, piece,
           n_rows, rows_worst);
    if (mode == LONG_FULL) printf("; greedy continuation's steps %.2e\n", f->worst);
    else printf(" (quick: a prefix, no continuation)\n");
    f->worst = fmax(before, fmax(rows_worst, f->worst));
    qrt_st_close(&ref);
}

static void run_fixture(const char *data, const char *name, int long_prompt) {
    fixture f = {.name = name};
    char dir[1024], refpath[1100];
    snprintf(dir, sizeof dir, "%s/%s", data, name);
    snprintf(refpath, sizeof refpath, "%s/reference.safetensors", dir);
    CHECK_OK(qrt_model_load(dir, &test_cpu, &f.m));
    memset(&f.ref, 0, sizeof f.ref);
    CHECK_OK(qrt_st_add_file(&f.ref, refpath));
    const qrt_st_tensor *tp = ref_tensor(&f.ref, "prompt", QRT_DT_I32), *tl = ref_tensor(&f.ref, "logits", QRT_DT_F32);
    if (!f.m || !tp || !tl) return;
    f.prompt = (const int32_t *)tp->data;
    f.logits = (const float *)tl->data;
    f.n_prompt = (int)tp->shape[0];
    f.V = qrt_model_vocab(f.m);
    CHECK(tl->shape[0] == f.n_prompt && tl->shape[1] == f.V, "reference logits shape");
    static const int Ts[] = {1, 63, 64, 65, 130};
    for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) test_prefill(&f, Ts[i]);
    test_pieces(&f);
    test_greedy(&f, &f.ref, "gen_prompt_long", "gen_long", "gen_logits_long");
    test_greedy(&f, &f.ref, "gen_prompt_short", "gen_short", "gen_logits_short");
    if (long_prompt) test_long_prompt(&f, dir, long_prompt);
    printf("  %s: max row-relative logit error vs transformers %.2e (tolerance %.0e)\n", name, f.worst, LOGIT_TOL);
    qrt_st_close(&f.ref);
    qrt_model_free(f.m);
}

/* The reduced-precision KV caches against HF (which keeps f32 K and V), over the whole 130-token prefill.
 * This random-weight model amplifies rounding (measured: bf16 7e-3, fp8 6e-2 row-relative), so the bounds
 * here only catch gross errors (a wrong scale or byte order gives errors near 1); the exact rounding of
 * each format is checked by test_kv_roundtrip. */
static void test_kv_format(const char *data, const char *name, int fmt, double tol) {
    char dir[1024], refpath[1100];
    snprintf(dir, sizeof dir, "%s/%s", data, name);
    snprintf(refpath, sizeof refpath, "%s/reference.safetensors", dir);
    qrt_load_opts opts = test_cpu;
    opts.kv_format = fmt;
    qrt_model *m = NULL;
    qrt_st_set ref = {0};
    CHECK_OK(qrt_model_load(dir, &opts, &m));
    CHECK_OK(qrt_st_add_file(&ref, refpath));
    const qrt_st_tensor *tp = ref_tensor(&ref, "prompt", QRT_DT_I32), *tl = ref_tensor(&ref, "logits", QRT_DT_F32);
    if (m && tp && tl) {
        const int T = (int)tp->shape[0], V = qrt_model_vocab(m);
        int32_t *rows = malloc(sizeof *rows * T);
        float *out = malloc(sizeof *out * (size_t)T * V);
        for (int i = 0; i < T; i++) rows[i] = i;
        qrt_session *s;
        CHECK_OK(qrt_session_new(m, T, &s));
        CHECK_OK(qrt_forward(s, (const int32_t *)tp->data, T, rows, T, out));
        double worst = 0;
        for (int i = 0; i < T; i++)
            worst = fmax(worst, row_rel_err(out + (size_t)i * V, (const float *)tl->data + (size_t)i * V, V));
        CHECK(worst <= tol, "%s with KV format %d: relative logit error %.3g > %.3g", name, fmt, worst, tol);
        printf("  %s: %s KV cache, max row-relative logit error vs transformers %.2e (tolerance %.0e)\n", name,
               fmt == QRT_KV_BF16 ? "bf16" : "fp8", worst, tol);
        qrt_session_free(s);
        free(rows);
        free(out);
    }
    qrt_st_close(&ref);
    qrt_model_free(m);
}

/* A stored row comes back as exactly its rounding: attention over a single cached position returns that
 * position's value row (softmax weight 1; the gate is 100, and sigmoid(100) is exactly 1 in f32), so it exposes
 * the cache's dequantized contents bit for bit. Expected values are computed here from the format definitions
 * (bf16 RNE; e4m3 RNE of x / (amax/448)). */
static void test_kv_roundtrip(int fmt) {
    const qrt_backend *be = qrt_backend_cpu();
    enum { HKV = 2, DH = 64 };
    float k[HKV * DH], v[HKV * DH], qg[HKV * 2 * DH], out[HKV * DH], ones[DH];
    uint32_t seed = 12345u + (uint32_t)fmt;
    for (int i = 0; i < HKV * DH; i++) {
        seed = seed * 1664525u + 1013904223u;
        float u = (float)(seed >> 8) / 16777216.0f - 0.5f;
        v[i] = u * (i < DH ? 3.0f : 1e-3f) * (1 + i % 7); /* two heads of very different magnitude */
        k[i] = u;
        qg[i / DH * 2 * DH + i % DH] = -u;
        qg[i / DH * 2 * DH + DH + i % DH] = 100.0f;
    }
    for (int d = 0; d < DH; d++) ones[d] = 1.0f;
    v[5] = 0;
    uint8_t kbuf[HKV * DH * 4], vbuf[HKV * DH * 4];
    float ks[HKV], vs[HKV];
    qrt_kv kv = {fmt, kbuf, vbuf, fmt == QRT_KV_FP8 ? ks : NULL, fmt == QRT_KV_FP8 ? vs : NULL};
    be->attn_prep(qg, k, v, ones, ones, 1e-6f, &kv, 1, 0, HKV, HKV, DH, 0, 1e4);
    be->attention(qg, &kv, 1, 0, HKV, HKV, DH, out);
    int exact = 1;
    for (int h = 0; h < HKV; h++) {
        float amax = 0;
        for (int d = 0; d < DH; d++) amax = fmaxf(amax, fabsf(v[h * DH + d]));
        for (int d = 0; d < DH; d++) {
            float x = v[h * DH + d], want;
            if (fmt == QRT_KV_BF16) want = qrt_bf16_to_f32(qrt_f32_to_bf16(x));
            else want = qrt_e4m3_lut[qrt_e4m3_encode(x / (amax / 448.0f))] * (amax / 448.0f);
            exact &= memcmp(&want, &out[h * DH + d], 4) == 0;
        }
    }
    CHECK(exact, "KV format %d: a stored row does not read back as its rounding", fmt);
}

/* Batch invariance, the property speculative decoding's parity rests on: a token's matmul row and a query's
 * attention output have the same bits computed in a batch (a prefill piece: tiled over tokens and keys, the
 * attention scores kept between passes) as alone (decode: one token, scores computed twice). Sizes are odd so that
 * every tile has a remainder: K = 1003 (two 512-column blocks and a tail of 3), N = 13, T = 300 (past the 256 tokens
 * one weight block serves); attention with a head group of 3 (blocks of 16 queries split groups), Dh = 40 (a vector
 * part and a scalar tail), 37 queries after 5 cached positions. */
static float test_rand(uint32_t *seed) {
    *seed = *seed * 1664525u + 1013904223u;
    return (float)(*seed >> 8) / 16777216.0f - 0.5f;
}

static void test_batch_invariance(int fmt) {
    const qrt_backend *be = qrt_backend_cpu();
    uint32_t seed = 777u + (uint32_t)fmt;
    if (fmt == QRT_KV_F32) { /* the matmul does not depend on the KV format: once */
        enum { N = 13, K = 1003, T = 300 };
        uint16_t *w = malloc(sizeof(uint16_t) * N * K);
        float *x = malloc(sizeof(float) * T * K), *y = malloc(sizeof(float) * T * N), y1[N];
        for (int i = 0; i < N * K; i++) w[i] = qrt_f32_to_bf16(test_rand(&seed));
        for (int i = 0; i < T * K; i++) x[i] = test_rand(&seed);
        qrt_linear W = {.fmt = QRT_WF_BF16, .n = N, .k = K, .data = w, .name = "w"};
        be->matmul(&W, x, T, y);
        int same = 1;
        for (int t = 0; t < T; t++) {
            be->matmul(&W, x + (size_t)t * K, 1, y1);
            same &= memcmp(y1, y + (size_t)t * N, sizeof y1) == 0;
        }
        CHECK(same, "matmul: a token's row differs between T = %d and T = 1", T);
        free(w), free(x), free(y);
    }
    enum { HQ = 6, HKV = 2, DH = 40, P0 = 5, T = 37, C = P0 + T };
    float *qg = malloc(sizeof(float) * C * HQ * 2 * DH), *k = malloc(sizeof(float) * C * HKV * DH);
    float *v = malloc(sizeof(float) * C * HKV * DH), *out = malloc(sizeof(float) * T * HQ * DH), out1[HQ * DH];
    float ones[DH], ks[C * HKV], vs[C * HKV];
    uint8_t *kc = malloc(sizeof(float) * C * HKV * DH), *vc = malloc(sizeof(float) * C * HKV * DH);
    for (int i = 0; i < C * HQ * 2 * DH; i++) qg[i] = 4 * test_rand(&seed);
    for (int i = 0; i < C * HKV * DH; i++) k[i] = test_rand(&seed), v[i] = test_rand(&seed);
    for (int d = 0; d < DH; d++) ones[d] = 1.0f;
    qrt_kv kv = {fmt, kc, vc, fmt == QRT_KV_FP8 ? ks : NULL, fmt == QRT_KV_FP8 ? vs : NULL};
    be->attn_prep(qg, k, v, ones, ones, 1e-6f, &kv, C, 0, HQ, HKV, DH, 16, 1e4); /* fills the cache */
    const float *q = qg + (size_t)P0 * HQ * 2 * DH; /* the last T tokens' queries */
    be->attention(q, &kv, T, P0, HQ, HKV, DH, out);
    int same = 1;
    for (int t = 0; t < T; t++) {
        be->attention(q + (size_t)t * HQ * 2 * DH, &kv, 1, P0 + t, HQ, HKV, DH, out1);
        same &= memcmp(out1, out + (size_t)t * HQ * DH, sizeof out1) == 0;
    }
    CHECK(same, "KV format %d: a query's attention output differs between T = %d and T = 1", fmt, T);
    free(qg), free(k), free(v), free(out), free(kc), free(vc);
}

int main(int argc, char **argv) {
    const char *data = argc > 1 ? argv[1] : "tests/data";
    const int long_prompt = argc > 2 && !strcmp(argv[2], "quick") ? LONG_QUICK : LONG_FULL;
    run_fixture(data, "tiny-mm", long_prompt);
    run_fixture(data, "tiny-flat", long_prompt);
    run_fixture(data, "tiny-tied", long_prompt);
    run_fixture(data, "tiny-longmem", long_prompt);
    test_kv_roundtrip(QRT_KV_BF16);
    test_kv_roundtrip(QRT_KV_FP8);
    for (int fmt = QRT_KV_F32; fmt <= QRT_KV_FP8; fmt++) test_batch_invariance(fmt);
    test_kv_format(data, "tiny-mm", QRT_KV_BF16, 3e-2);
    test_kv_format(data, "tiny-mm", QRT_KV_FP8, 3e-1);
    return test_exit("test_model");
}
