/* Writing a safetensors file without holding its tensors in memory: declare every tensor (name, dtype,
 * shape), write the header, then write each tensor's bytes in any order (each lands at its own offset).
 * Tensors are laid out largest element size first, then by name, so every tensor stays aligned to its
 * element size (the safetensors library's own order). */
#ifndef QRT_ST_WRITER_H
#define QRT_ST_WRITER_H
#include <stdio.h>

#include "io/dtype.h"
#include "util/common.h"

typedef struct {
    char *name;
    qrt_dtype dtype;
    int ndim;
    int64_t shape[8];
    uint64_t nbytes, offset; /* offset within the data block */
    int written;
} qrt_stw_entry;

typedef struct {
    char *path;
    FILE *f;
    qrt_stw_entry *e;
    int n, cap;
    uint64_t data_start; /* file offset of the data block */
    uint64_t data_bytes;
} qrt_st_writer;

qrt_status qrt_stw_open(qrt_st_writer *w, const char *path);
qrt_status qrt_stw_declare(qrt_st_writer *w, const char *name, qrt_dtype dt, int ndim, const int64_t *shape);
qrt_status qrt_stw_write_header(qrt_st_writer *w);
/* Write all of tensor name's bytes (nbytes must match its declaration), or a piece of them at byte offset at. */
qrt_status qrt_stw_write(qrt_st_writer *w, const char *name, const void *data, uint64_t nbytes);
qrt_status qrt_stw_write_at(qrt_st_writer *w, const char *name, uint64_t at, const void *data, uint64_t nbytes);
/* Check every declared tensor was written, close; *file_bytes = size of the file (may be NULL). */
qrt_status qrt_stw_close(qrt_st_writer *w, uint64_t *file_bytes);
/* Close and delete a partial file after an error. */
void qrt_stw_abort(qrt_st_writer *w);
#endif
