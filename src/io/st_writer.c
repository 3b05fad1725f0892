#include "io/st_writer.h"

#include <errno.h>
#include <jansson.h>
#include <string.h>

qrt_status qrt_stw_open(qrt_st_writer *w, const char *path) {
    memset(w, 0, sizeof *w);
    w->f = fopen(path, "wb");
    if (!w->f) return qrt_fail(QRT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    w->path = strdup(path);
    return QRT_OK;
}

qrt_status qrt_stw_declare(qrt_st_writer *w, const char *name, qrt_dtype dt, int ndim, const int64_t *shape) {
    QRT_ASSERT(ndim >= 0 && ndim <= 8 && qrt_dtype_size(dt) > 0);
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->e[i].name, name) == 0) return qrt_fail(QRT_ERR_ARG, "%s: tensor '%s' declared twice", w->path, name);
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 64;
        qrt_stw_entry *grown = realloc(w->e, sizeof *grown * (size_t)cap);
        if (!grown) return qrt_fail(QRT_ERR_MEMORY, "out of memory");
        w->e = grown;
        w->cap = cap;
    }
    qrt_stw_entry *e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    if (!(e->name = strdup(name))) return qrt_fail(QRT_ERR_MEMORY, "out of memory");
    e->dtype = dt;
    e->ndim = ndim;
    e->nbytes = qrt_dtype_size(dt);
    for (int d = 0; d < ndim; d++) {
        e->shape[d] = shape[d];
        e->nbytes *= (uint64_t)shape[d];
    }
    w->n++;
    return QRT_OK;
}

static int cmp_layout(const void *a, const void *b) {
    const qrt_stw_entry *x = a, *y = b;
    size_t sx = qrt_dtype_size(x->dtype), sy = qrt_dtype_size(y->dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return strcmp(x->name, y->name);
}

qrt_status qrt_stw_write_header(qrt_st_writer *w) {
    qsort(w->e, (size_t)w->n, sizeof *w->e, cmp_layout);
    json_t *root = json_object();
    json_t *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(root, "__metadata__", meta);
    uint64_t off = 0;
    for (int i = 0; i < w->n; i++) {
        qrt_stw_entry *e = &w->e[i];
        e->offset = off;
        off += e->nbytes;
        json_t *shape = json_array(), *offs = json_array(), *t = json_object();
        for (int d = 0; d < e->ndim; d++) json_array_append_new(shape, json_integer(e->shape[d]));
        json_array_append_new(offs, json_integer((json_int_t)e->offset));
        json_array_append_new(offs, json_integer((json_int_t)(e->offset + e->nbytes)));
        json_object_set_new(t, "dtype", json_string(qrt_dtype_name(e->dtype)));
        json_object_set_new(t, "shape", shape);
        json_object_set_new(t, "data_offsets", offs);
        json_object_set_new(root, e->name, t);
    }
    w->data_bytes = off;
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text) return qrt_fail(QRT_ERR_MEMORY, "out of memory");
    /* the header is padded with spaces so the data block starts 8-byte aligned */
    size_t len = strlen(text), padded = (len + 7) / 8 * 8;
    uint8_t lenbuf[8];
    for (int i = 0; i < 8; i++) lenbuf[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    int ok = fwrite(lenbuf, 1, 8, w->f) == 8 && fwrite(text, 1, len, w->f) == len;
    for (size_t i = len; i < padded && ok; i++) ok = fputc(' ', w->f) != EOF;
    free(text);
    if (!ok) return qrt_fail(QRT_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
    w->data_start = 8 + padded;
    return QRT_OK;
}

static qrt_stw_entry *entry(qrt_st_writer *w, const char *name) {
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->e[i].name, name) == 0) return &w->e[i];
    return NULL;
}

qrt_status qrt_stw_write_at(qrt_st_writer *w, const char *name, uint64_t at, const void *data, uint64_t nbytes) {
    qrt_stw_entry *e = entry(w, name);
    if (!e) return qrt_fail(QRT_ERR_ARG, "%s: tensor '%s' was not declared", w->path, name);
    QRT_ASSERT(at + nbytes <= e->nbytes);
    if (fseeko(w->f, (off_t)(w->data_start + e->offset + at), SEEK_SET) != 0 ||
        fwrite(data, 1, (size_t)nbytes, w->f) != nbytes)
        return qrt_fail(QRT_ERR_IO, "%s: writing tensor '%s' failed: %s", w->path, name, strerror(errno));
    if (at + nbytes == e->nbytes) e->written = 1;
    return QRT_OK;
}

qrt_status qrt_stw_write(qrt_st_writer *w, const char *name, const void *data, uint64_t nbytes) {
    qrt_stw_entry *e = entry(w, name);
    if (!e) return qrt_fail(QRT_ERR_ARG, "%s: tensor '%s' was not declared", w->path, name);
    QRT_ASSERT(nbytes == e->nbytes);
    return qrt_stw_write_at(w, name, 0, data, nbytes);
}

static void release(qrt_st_writer *w) {
    for (int i = 0; i < w->n; i++) free(w->e[i].name);
    free(w->e);
    free(w->path);
    memset(w, 0, sizeof *w);
}

qrt_status qrt_stw_close(qrt_st_writer *w, uint64_t *file_bytes) {
    qrt_status st = QRT_OK;
    for (int i = 0; i < w->n && st == QRT_OK; i++)
        if (!w->e[i].written) st = qrt_fail(QRT_ERR_ARG, "%s: tensor '%s' was declared but not written", w->path,
                                            w->e[i].name);
    if (fclose(w->f) != 0 && st == QRT_OK) st = qrt_fail(QRT_ERR_IO, "%s: close failed: %s", w->path, strerror(errno));
    if (file_bytes) *file_bytes = w->data_start + w->data_bytes;
    release(w);
    return st;
}

void qrt_stw_abort(qrt_st_writer *w) {
    if (w->f) fclose(w->f);
    if (w->path) remove(w->path);
    release(w);
}
