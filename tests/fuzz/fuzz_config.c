/* libFuzzer target: config.json parsing on arbitrary bytes. */
#include "io/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qrt_config cfg;
    qrt_config_parse((const char *)data, size, "fuzz/config.json", &cfg);
    return 0;
}
