/* libFuzzer target: the safetensors header parser on arbitrary bytes. Every input must either parse into
 * tensors whose bytes lie inside the buffer, or fail with a message; never crash or read out of bounds. */
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qrt_st_tensor *t = NULL;
    int n = 0;
    if (qrt_st_parse(data, size, "fuzz", &t, &n) == QRT_OK) {
        for (int i = 0; i < n; i++)
            if (t[i].data < data || t[i].data + t[i].nbytes > data + size) __builtin_trap();
        qrt_st_free_tensors(t, n);
    }
    return 0;
}
