/* Byte-level BPE tokenizer of the Qwen3.5/3.6 family, read from a Hugging Face tokenizer.json.
 *
 * Encoding follows HF `tokenizers` step by step:
 *   1. added tokens (added_tokens[], normalized=false) are cut out of the raw text as whole strings
 *      (leftmost-longest);
 *   2. the rest is normalized (NFC via utf8proc) and cut again at normalized=true added tokens;
 *   3. the pre-tokenizer splits it (PCRE2 with the regex from the file, UTF + UCP, JIT);
 *   4. each piece becomes bytes → single-byte tokens (GPT-2 byte↔unicode map) → BPE merges by rank.
 * Decoding maps ids back to bytes and replaces invalid UTF-8 by U+FFFD exactly as HF's ByteLevel
 * decoder (Rust from_utf8_lossy) does. The public part of this API is in qwenrt.h. */
#ifndef QRT_TOKENIZER_H
#define QRT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "qwenrt.h"

/* Parse a tokenizer.json held in memory; name is used in error messages (the file path). */
qrt_status qrt_tokenizer_load_buffer(const char *json, size_t len, const char *name, qrt_tokenizer **out);

/* The bytes a token stands for (after the byte-level map), or NULL for an id with no token. */
const uint8_t *qrt_tokenizer_token_bytes(const qrt_tokenizer *t, int32_t id, size_t *len);
/* 1 when id is an added token (added_tokens[]), 0 otherwise. */
int qrt_tokenizer_is_added(const qrt_tokenizer *t, int32_t id);

/* Check that text is valid UTF-8; on failure *bad_at is the offset of the first bad byte. */
int qrt_utf8_valid(const uint8_t *s, size_t n, size_t *bad_at);

/* Write a byte-only tokenizer.json (256 byte tokens, no merges, the Qwen3.5 pre-tokenizer and chat special
 * tokens at special_base..special_base+32) for synthetic checkpoints. */
qrt_status qrt_tokenizer_write_bytes_only(const char *path, int32_t special_base);
#endif
