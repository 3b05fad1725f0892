/* Smoke tests of qwenrt bench, membw, doctor and tilebench on the CPU: each runs, writes JSON that parses, and the
 * JSON holds what docs/bench-schema.md promises; bench's output hashes agree across reps and its parity passes;
 * every bad option is refused with exit status 2 (never a crash). Never timing assertions (timings are
 * measurements, not invariants) beyond "positive". */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "test_util.h"
#include "tools/tools.h"

#define EXPECT(cond) CHECK(cond, "%s", "")

static json_t *load(const char *path) {
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    if (!j) fprintf(stderr, "%s: %s (line %d)\n", path, err.text, err.line);
    return j;
}

static void test_bench(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/bench.json", dir);
    char *argv[] = {"--device", "cpu", "--synthetic", "tiny", "--ctx", "16,40", "-K", "0,3", "-n", "8", "--reps", "2",
                    "--sim-al", "2", "--parity", "--json", path};
    EXPECT(qrt_tool_bench((int)(sizeof argv / sizeof argv[0]), argv) == 0);
    json_t *j = load(path);
    EXPECT(j != NULL);
    if (!j) return;
    EXPECT(!strcmp(json_string_value(json_object_get(j, "tool")), "bench"));
    json_t *rows = json_object_get(j, "rows");
    EXPECT(json_array_size(rows) == 4);
    for (size_t i = 0; i < json_array_size(rows); i++) {
        json_t *r = json_array_get(rows, i), *reps = json_object_get(r, "reps");
        EXPECT(json_is_true(json_object_get(r, "hashes_identical")));
        EXPECT(json_is_true(json_object_get(r, "synthetic")));
        EXPECT(json_array_size(reps) == 2);
        const char *h0 = json_string_value(json_object_get(json_array_get(reps, 0), "hash"));
        const char *h1 = json_string_value(json_object_get(json_array_get(reps, 1), "hash"));
        EXPECT(h0 && h1 && !strcmp(h0, h1));
        int k = (int)json_integer_value(json_object_get(r, "k"));
        json_t *med = json_object_get(r, "median");
        EXPECT(json_is_true(json_object_get(r, "simulated_al")) == (k > 0));
        if (k > 0) /* simulated AL 2 with K 3: exactly 2 accepted drafts per cycle */
            EXPECT(json_real_value(json_object_get(med, "al")) == 2.0);
        EXPECT(json_object_get(json_object_get(r, "breakdown"), "categories") != NULL);
    }
    json_t *parity = json_object_get(j, "parity");
    EXPECT(json_array_size(parity) == 2);
    for (size_t i = 0; i < json_array_size(parity); i++)
        EXPECT(json_is_true(json_object_get(json_array_get(parity, i), "pass")));
    json_decref(j);
}

static void test_membw(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/membw.json", dir);
    char *argv[] = {"--device", "cpu", "--sizes", "1M,4M", "--sustain-s", "0.4", "--interval-s", "0.1",
                    "--sustain-size", "8M", "--json", path};
    EXPECT(qrt_tool_membw((int)(sizeof argv / sizeof argv[0]), argv) == 0);
    json_t *j = load(path);
    EXPECT(j != NULL);
    if (!j) return;
    json_t *m = json_object_get(j, "membw");
    EXPECT(json_array_size(json_object_get(m, "sizes")) == 2);
    EXPECT(json_array_size(json_object_get(json_object_get(m, "sustained"), "samples")) >= 1);
    EXPECT(!strcmp(json_string_value(json_object_get(json_object_get(j, "device"), "kind")), "cpu"));
    json_decref(j);
}

static void test_doctor(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/doctor.json", dir);
    char *argv[] = {"--device", "cpu", "--quick", "--json", path};
    EXPECT(qrt_tool_doctor((int)(sizeof argv / sizeof argv[0]), argv) == 0);
    json_t *j = load(path);
    EXPECT(j != NULL);
    if (!j) return;
    EXPECT(json_is_array(json_object_get(j, "verdict")));
    EXPECT(json_object_get(json_object_get(j, "membw"), "sizes") != NULL);
    json_decref(j);
}

/* --kv reaches the model and the JSON. */
static void test_bench_kv(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/bench_kv.json", dir);
    char *argv[] = {"--device", "cpu", "--ctx", "16", "-K", "0", "-n", "4", "--reps", "1", "--no-breakdown", "--kv",
                    "fp8", "--json", path};
    EXPECT(qrt_tool_bench((int)(sizeof argv / sizeof argv[0]), argv) == 0);
    json_t *j = load(path);
    EXPECT(j != NULL);
    if (!j) return;
    const char *kv = json_string_value(json_object_get(json_object_get(j, "settings"), "kv"));
    EXPECT(kv && !strcmp(kv, "fp8"));
    json_decref(j);
}

static void test_tilebench(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tilebench.json", dir);
    /* one thread: on a loaded CI machine an OpenMP barrier can wait a scheduler slice per matmul */
    char *argv[] = {"--device", "cpu", "--preset", "tiny", "--m", "1,7", "--reps", "3", "--cell-ms", "0",
                    "--threads", "1", "--json", path};
    EXPECT(qrt_tool_tilebench((int)(sizeof argv / sizeof argv[0]), argv) == 0);
    json_t *j = load(path);
    EXPECT(j != NULL);
    if (!j) return;
    EXPECT(!strcmp(json_string_value(json_object_get(j, "tool")), "tilebench"));
    EXPECT(json_real_value(json_object_get(j, "read_gbs")) > 0);
    json_t *shapes = json_object_get(j, "shapes"), *results = json_object_get(j, "results");
    EXPECT(json_array_size(shapes) == 8); /* the tiny preset has GDN and attention layers and an MTP head */
    EXPECT(json_array_size(results) == 8 * 3 * 2); /* shapes x bf16/nvfp4/fp8 x M */
    for (size_t i = 0; i < json_array_size(results); i++) {
        json_t *r = json_array_get(results, i);
        EXPECT(json_string_value(json_object_get(r, "shape")) && json_string_value(json_object_get(r, "kernel")));
        EXPECT(json_real_value(json_object_get(r, "ms")) > 0 && json_real_value(json_object_get(r, "gbs")) > 0);
        EXPECT(json_real_value(json_object_get(r, "pct_of_read")) > 0);
        EXPECT(json_integer_value(json_object_get(r, "weight_bytes")) > 0);
        EXPECT(json_is_true(json_object_get(r, "picked"))); /* the CPU has one kernel per format */
    }
    json_decref(j);
}

/* Every bad value is an error naming the flag: exit status 2, before any work. */
static void test_bad_options(void) {
    typedef int (*tool_fn)(int, char **);
    static const struct {
        tool_fn fn;
        int argc;
        char *argv[4];
    } cases[] = {
        {qrt_tool_bench, 2, {"--ctx", "0"}},          {qrt_tool_bench, 2, {"--kv", "f16"}},
        {qrt_tool_bench, 2, {"-n", "x"}},             {qrt_tool_bench, 2, {"--sim-al", "nan"}},
        {qrt_tool_bench, 1, {"--bogus"}},             {qrt_tool_bench, 1, {"--reps"}},
        {qrt_tool_bench, 2, {"-K", "1,"}},            {qrt_tool_membw, 2, {"--sizes", "1e30G"}},
        {qrt_tool_membw, 2, {"--sizes", ""}},         {qrt_tool_membw, 2, {"--sustain-s", "abc"}},
        {qrt_tool_membw, 2, {"--interval-s", "0"}},   {qrt_tool_membw, 2, {"--device", "gpu"}},
        {qrt_tool_doctor, 2, {"--quick", "--bogus"}}, {qrt_tool_doctor, 1, {"--device"}},
        {qrt_tool_tilebench, 2, {"--m", "0"}},        {qrt_tool_tilebench, 2, {"--m", "8193"}},
        {qrt_tool_tilebench, 2, {"--formats", "fp4"}}, {qrt_tool_tilebench, 2, {"--shapes", "nope"}},
        {qrt_tool_tilebench, 2, {"--reps", "2"}},     {qrt_tool_tilebench, 2, {"--cell-ms", "inf"}},
        {qrt_tool_tilebench, 2, {"--preset", "big"}}, {qrt_tool_tilebench, 4, {"--preset", "tiny", "-m", "/nonexistent"}},
        {qrt_tool_tilebench, 1, {"--threads"}},       {qrt_tool_tilebench, 2, {"--formats", ","}},
        {qrt_tool_tilebench, 4, {"--device", "cpu", "--variants", "mma_w1"}}, /* NVFP4 variants exist only on CUDA */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[4];
        memcpy(argv, cases[i].argv, sizeof argv);
        int rc = cases[i].fn(cases[i].argc, argv);
        CHECK(rc == 2, "bad-option case %zu (%s %s): exit status %d, expected 2", i, argv[0],
              cases[i].argc > 1 ? argv[1] : "", rc);
    }
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    test_bad_options();
    test_bench(dir);
    test_bench_kv(dir);
    test_membw(dir);
    test_doctor(dir);
    test_tilebench(dir);
    return test_exit("bench_tools");
}
