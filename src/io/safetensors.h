/* safetensors reading by mmap: one file, or the shards listed in model.safetensors.index.json.
 *
 * File layout: u64 little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "BF16", "shape": [r, c], "data_offsets": [begin, end]}, "__metadata__": {...}},
 * then the data block; offsets are relative to the data block. Every field is checked against the file
 * size before any tensor byte is touched. */
#ifndef QRT_SAFETENSORS_H
#define QRT_SAFETENSORS_H
#include <stdint.h>

#include "io/dtype.h"
#include "util/common.h"

#define QRT_ST_MAX_DIMS 8

typedef struct {
    char *name;
    qrt_dtype dtype;
    int ndim;
    int64_t shape[QRT_ST_MAX_DIMS];
    const uint8_t *data; /* points into the file's mapping */
    uint64_t nbytes;
    int file;            /* index into qrt_st_set.files */
} qrt_st_tensor;

typedef struct {
    char *path;
    uint8_t *map;
    size_t size;
} qrt_st_file;

typedef struct {
    qrt_st_file *files;
    int n_files;
    qrt_st_tensor *tensors; /* sorted by name */
    int n_tensors;
} qrt_st_set;

/* Parse and validate a header held in buf[0..size) (the whole file). path names the file in errors.
 * On success *out holds *n tensors whose data pointers point into buf. Used by the fuzz target. */
qrt_status qrt_st_parse(const uint8_t *buf, size_t size, const char *path, qrt_st_tensor **out, int *n);
void qrt_st_free_tensors(qrt_st_tensor *t, int n);

/* Map one file and add its tensors to set. A name already in set is an error. */
qrt_status qrt_st_add_file(qrt_st_set *set, const char *path);
/* Open a checkpoint folder: model.safetensors.index.json's shards if present, else model.safetensors,
 * else every *.safetensors in the folder. */
qrt_status qrt_st_open_dir(qrt_st_set *set, const char *dir);
const qrt_st_tensor *qrt_st_find(const qrt_st_set *set, const char *name);
void qrt_st_close(qrt_st_set *set);

/* "[5120, 17408]" */
void qrt_st_shape_str(const qrt_st_tensor *t, char *buf, size_t n);
#endif
