/* Smoke tests of qwenrt bench, membw and doctor on the CPU: each runs, writes JSON that parses, and the JSON
 * holds what docs/bench-schema.md promises; bench's output hashes agree across reps and its parity passes.
 * Never timing assertions (timings are measurements, not invariants). */
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

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    test_bench(dir);
    test_membw(dir);
    test_doctor(dir);
    return test_exit("bench_tools");
}
