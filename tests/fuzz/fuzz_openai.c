/* libFuzzer target: the OpenAI request parser on arbitrary bodies (both endpoints, both chat dialects), then, on
 * the same bytes taken as model output, the tool-call parser with the parsed request's tools. Every path must
 * return (a 400 with a message, or a request) without a crash or a leak. */
#include <string.h>

#include "server/openai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *body = (const char *)data;
    char err[256];
    json_t *tools = NULL;
    for (int kind = 0; kind < 2; kind++)
        for (int dialect = 0; dialect < 2; dialect++) {
            qrt_oa_request r;
            if (!qrt_oa_parse(kind ? QRT_OA_COMPLETION : QRT_OA_CHAT, body, size, (qrt_chat_dialect)dialect, 2048, &r,
                              err, sizeof err))
                continue;
            if (r.tools && !tools) tools = json_incref(r.tools);
            qrt_oa_request_free(&r);
        }
    json_t *calls = qrt_oa_tool_calls(body, size, tools);
    json_decref(calls);
    json_decref(tools);
    return 0;
}
