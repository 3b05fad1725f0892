/* The sampling adjustment flags of qwenrt generate and qwenrt chat (see tools.h). */
#include <stdlib.h>
#include <string.h>

#include "tools/tools.h"

/* --logit-bias entries: a command parses its flags once and generates with them, so one process-wide table is
 * enough and the qrt_sampling that points into it stays valid for the whole run. */
#define MAX_BIASES 64
static qrt_logit_bias biases[MAX_BIASES];

/* --logit-bias ID=BIAS, BIAS in [-100, 100] (-100 bans the token). */
static int parse_bias(const char *cmd, const char *v, qrt_sampling *sp) {
    char *eq;
    long id = strtol(v, &eq, 10);
    double bias;
    if (eq == v || *eq != '=' || id < 0 || id > INT32_MAX) {
        fprintf(stderr, "qwenrt %s: --logit-bias expects TOKEN_ID=BIAS (e.g. 42=-100), got '%s'\n", cmd, v);
        return -1;
    }
    if (!qrt_tool_number(cmd, "--logit-bias", eq + 1, -100, 100, &bias)) return -1;
    if (sp->n_logit_bias >= MAX_BIASES) {
        fprintf(stderr, "qwenrt %s: at most %d --logit-bias flags\n", cmd, MAX_BIASES);
        return -1;
    }
    biases[sp->n_logit_bias++] = (qrt_logit_bias){(int32_t)id, (float)bias};
    sp->logit_bias = biases;
    return 1;
}

int qrt_tool_sampling_flag(const char *cmd, const char *f, const char *v, qrt_sampling *sp) {
    static const struct {
        const char *flag;
        double lo, hi;
    } nums[] = {{"--repeat-penalty", 1e-6, 100}, {"--presence-penalty", -2, 2}, {"--frequency-penalty", -2, 2},
                {"--min-p", 0, 1}};
    if (!strcmp(f, "--logit-bias")) return parse_bias(cmd, v, sp);
    for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++) {
        double x;
        if (strcmp(f, nums[k].flag)) continue;
        if (!qrt_tool_number(cmd, f, v, nums[k].lo, nums[k].hi, &x)) return -1;
        float *dst[] = {&sp->repetition_penalty, &sp->presence_penalty, &sp->frequency_penalty, &sp->min_p};
        *dst[k] = (float)x;
        return 1;
    }
    return 0;
}

int qrt_tool_check_logit_bias(const char *cmd, const qrt_sampling *sp, int32_t vocab) {
    for (int32_t k = 0; k < sp->n_logit_bias; k++)
        if (sp->logit_bias[k].id >= vocab) {
            fprintf(stderr, "qwenrt %s: --logit-bias token %d is outside the vocabulary [0, %d)\n", cmd,
                    sp->logit_bias[k].id, vocab);
            return 0;
        }
    return 1;
}
