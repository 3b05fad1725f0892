#include "io/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A header is JSON text of a few MB at most even for 1000-tensor shards; refusing giant headers stops
 * a corrupt length from making us parse gigabytes. */
#define MAX_HEADER_BYTES (256u << 20)

void qrt_st_free_tensors(qrt_st_tensor *t, int n) {
    if (!t) return;
    for (int i = 0; i < n; i++) free(t[i].name);
    free(t);
}

static qrt_status parse_entry(const char *path, const char *name, json_t *v, const uint8_t *data, uint64_t data_size,
                              qrt_st_tensor *t) {
    if (!json_is_object(v)) return qrt_fail(QRT_ERR_FORMAT, "%s: tensor '%s': entry is not a JSON object", path, name);
    json_t *jdt = json_object_get(v, "dtype"), *jshape = json_object_get(v, "shape"),
           *joff = json_object_get(v, "data_offsets");
    if (!json_is_string(jdt)) return qrt_fail(QRT_ERR_FORMAT, "%s: tensor '%s': missing string field 'dtype'", path, name);
    t->dtype = qrt_dtype_from_name(json_string_value(jdt));
    if (t->dtype == QRT_DT_UNKNOWN)
        return qrt_fail(QRT_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%s'", path, name, json_string_value(jdt));
    if (!json_is_array(jshape) || json_array_size(jshape) > QRT_ST_MAX_DIMS)
        return qrt_fail(QRT_ERR_FORMAT, "%s: tensor '%s': 'shape' must be an array of at most %d integers", path, name,
                        QRT_ST_MAX_DIMS);
    t->ndim = (int)json_array_size(jshape);
    uint64_t count = 1;
    for (int d = 0; d < t->ndim; d++) {
        json_t *e = json_array_get(jshape, (size_t)d);
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > (1ll << 40))
            return qrt_fail(QRT_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not an integer in [0, 2^40]", path, name, d);
        t->shape[d] = json_integer_value(e);
        if (t->shape[d] && count > UINT64_MAX / (uint64_t)t->shape[d])
            return qrt_fail(QRT_ERR_FORMAT, "%s: tensor '%s': shape overflows", path, name);
        count *= (uint64_t)t->shape[d];
    }
    if (!json_is_array(joff) || json_array_size(joff) != 2 || !json_is_integer(json_array_get(joff, 0)) ||
        !json_is_integer(json_array_get(joff, 1)))
        return qrt_fail(QRT_ERR_FORMAT, "%s: tensor '%s': 'data_offsets' must be [begin, end]", path, name);
    json_int_t begin = json_integer_value(json_array_get(joff, 0)), end = json_integer_value(json_array_get(joff, 1));
    if (begin < 0 || end < begin || (uint64_t)end > data_size)
        return qrt_fail(QRT_ERR_FORMAT,
                        "%s: tensor '%s': data_offsets [%lld, %lld] fall outside the %llu-byte data block (file "
                        "truncated or header corrupt)",
                        path, name, (long long)begin, (long long)end, (unsigned long long)data_size);
    size_t esize = qrt_dtype_size(t->dtype);
    if (count > UINT64_MAX / esize || (uint64_t)(end - begin) != count * esize)
        return qrt_fail(QRT_ERR_FORMAT, "%s: tensor '%s': %lld bytes in data_offsets but shape x %s needs %llu", path,
                        name, (long long)(end - begin), qrt_dtype_name(t->dtype),
                        (unsigned long long)(count * esize));
    t->data = data + begin;
    t->nbytes = (uint64_t)(end - begin);
    /* A misaligned data block misaligns every tensor: the fault is the header's length (the safetensors writer pads
     * the header to a multiple of 8), not this tensor's offsets. */
    if (((uintptr_t)data) % esize != 0)
        return qrt_fail(QRT_ERR_FORMAT, "%s: malformed header: its length is not padded to a multiple of 8 bytes, so "
                        "the data block after it is misaligned for %s tensors such as '%s'; re-save the file with "
                        "the safetensors library", path, qrt_dtype_name(t->dtype), name);
    if (((uintptr_t)t->data) % esize != 0)
        return qrt_fail(QRT_ERR_FORMAT, "%s: tensor '%s' is not aligned to its %zu-byte elements; re-save the file "
                        "with the safetensors library", path, name, esize);
    return QRT_OK;
}

static int cmp_tensor(const void *a, const void *b) {
    return strcmp(((const qrt_st_tensor *)a)->name, ((const qrt_st_tensor *)b)->name);
}

static int cmp_offset(const void *a, const void *b) {
    const qrt_st_tensor *x = *(const qrt_st_tensor *const *)a, *y = *(const qrt_st_tensor *const *)b;
    if (x->data != y->data) return x->data < y->data ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* The reference safetensors library (Metadata::validate and read_metadata) sorts the tensors by data_offsets and
 * requires each to begin where the previous one ended, the first at 0, and the last to end exactly at the end of
 * the file: no overlaps, no gaps, no trailing bytes. We require the same, so a file we load is one it loads too,
 * and two tensors can never alias the same bytes. */
static qrt_status check_coverage(const char *path, qrt_st_tensor *ts, int n, const uint8_t *data, uint64_t data_size) {
    qrt_st_tensor **by_off = qrt_calloc((size_t)n + 1, sizeof *by_off);
    if (!by_off) return qrt_fail(QRT_ERR_MEMORY, "out of memory checking %s", path);
    for (int i = 0; i < n; i++) by_off[i] = &ts[i];
    qsort(by_off, (size_t)n, sizeof *by_off, cmp_offset);
    qrt_status st = QRT_OK;
    uint64_t at = 0; /* end of the bytes covered so far */
    const char *prev = NULL;
    for (int i = 0; i < n && st == QRT_OK; i++) {
        const qrt_st_tensor *t = by_off[i];
        uint64_t begin = (uint64_t)(t->data - data);
        if (begin < at)
            st = qrt_fail(QRT_ERR_FORMAT, "%s: tensor '%s': data_offsets begin at %llu, inside tensor '%s' (which "
                          "ends at %llu): tensors must not overlap; the header is corrupt", path, t->name,
                          (unsigned long long)begin, prev, (unsigned long long)at);
        else if (begin > at)
            st = qrt_fail(QRT_ERR_FORMAT, "%s: tensor '%s': data_offsets begin at %llu, leaving bytes %llu..%llu "
                          "that no tensor covers; the safetensors format requires contiguous data", path, t->name,
                          (unsigned long long)begin, (unsigned long long)at, (unsigned long long)begin);
        at = begin + t->nbytes;
        prev = t->name;
    }
    if (st == QRT_OK && at != data_size)
        st = qrt_fail(QRT_ERR_FORMAT, "%s: %llu bytes after the end of the last tensor's data (offset %llu%s%s) that "
                      "no tensor covers; the safetensors format requires the data block to end where the last "
                      "tensor does: the file has trailing garbage or the header is incomplete", path,
                      (unsigned long long)(data_size - at), (unsigned long long)at, prev ? ", tensor " : "",
                      prev ? prev : "");
    free(by_off);
    return st;
}

/* __metadata__ is a map of string to string in the format (the reference library refuses anything else). */
static qrt_status check_metadata(const char *path, json_t *meta) {
    if (json_is_null(meta)) return QRT_OK;
    if (!json_is_object(meta))
        return qrt_fail(QRT_ERR_FORMAT, "%s: '__metadata__' must be an object of string values", path);
    const char *key;
    json_t *v;
    json_object_foreach(meta, key, v) {
        if (!json_is_string(v))
            return qrt_fail(QRT_ERR_FORMAT, "%s: '__metadata__' field '%s' is not a string (the format allows only "
                            "string values); re-save the file with the safetensors library", path, key);
    }
    return QRT_OK;
}

qrt_status qrt_st_parse(const uint8_t *buf, size_t size, const char *path, qrt_st_tensor **out, int *n) {
    *out = NULL;
    *n = 0;
    if (size < 8) return qrt_fail(QRT_ERR_FORMAT, "%s: %zu bytes is too short for a safetensors file", path, size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    if (hlen > size - 8)
        return qrt_fail(QRT_ERR_FORMAT, "%s: header length %llu is larger than the file (%zu bytes): truncated or not "
                        "a safetensors file", path, (unsigned long long)hlen, size);
    if (hlen > MAX_HEADER_BYTES)
        return qrt_fail(QRT_ERR_FORMAT, "%s: header length %llu exceeds the %u-byte limit", path,
                        (unsigned long long)hlen, MAX_HEADER_BYTES);
    json_error_t jerr;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return qrt_fail(QRT_ERR_FORMAT, "%s: header is not valid JSON: %s (offset %d)", path, jerr.text, jerr.position);
    if (!json_is_object(root)) {
        json_decref(root);
        return qrt_fail(QRT_ERR_FORMAT, "%s: header is not a JSON object", path);
    }
    const uint8_t *data = buf + 8 + hlen;
    uint64_t data_size = size - 8 - hlen;
    qrt_st_tensor *ts = qrt_calloc(json_object_size(root), sizeof *ts);
    qrt_status st = ts ? QRT_OK : QRT_ERR_MEMORY;
    int count = 0;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (st != QRT_OK) break;
        if (strcmp(key, "__metadata__") == 0) {
            st = check_metadata(path, val);
            continue;
        }
        qrt_st_tensor *t = &ts[count];
        st = parse_entry(path, key, val, data, data_size, t);
        if (st == QRT_OK && !(t->name = strdup(key))) st = qrt_fail(QRT_ERR_MEMORY, "out of memory");
        if (st == QRT_OK) count++;
    }
    json_decref(root);
    if (st == QRT_OK) st = check_coverage(path, ts, count, data, data_size);
    if (st != QRT_OK) {
        qrt_st_free_tensors(ts, count);
        return st;
    }
    qsort(ts, (size_t)count, sizeof *ts, cmp_tensor);
    *out = ts;
    *n = count;
    return QRT_OK;
}

qrt_status qrt_st_add_file(qrt_st_set *set, const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return qrt_fail(QRT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return qrt_fail(QRT_ERR_IO, "%s: not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    uint8_t *map = NULL;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            close(fd);
            return qrt_fail(QRT_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
        }
    }
    close(fd);
    qrt_st_tensor *ts = NULL;
    int n = 0;
    qrt_status st = qrt_st_parse(map ? map : (const uint8_t *)"", size, path, &ts, &n);
    qrt_st_file *files = NULL;
    qrt_st_tensor *merged = NULL;
    if (st == QRT_OK) {
        files = realloc(set->files, sizeof *files * (size_t)(set->n_files + 1));
        merged = files ? realloc(set->tensors, sizeof *merged * (size_t)(set->n_tensors + n + 1)) : NULL;
        if (files) set->files = files;
        if (merged) set->tensors = merged;
        if (!files || !merged) st = qrt_fail(QRT_ERR_MEMORY, "out of memory reading %s", path);
    }
    if (st != QRT_OK) {
        qrt_st_free_tensors(ts, n);
        if (map) munmap(map, size);
        return st;
    }
    int fi = set->n_files++;
    set->files[fi] = (qrt_st_file){strdup(path), map, size};
    for (int i = 0; i < n; i++) {
        ts[i].file = fi;
        set->tensors[set->n_tensors + i] = ts[i];
    }
    free(ts);
    set->n_tensors += n;
    qsort(set->tensors, (size_t)set->n_tensors, sizeof *set->tensors, cmp_tensor);
    for (int i = 1; i < set->n_tensors; i++)
        if (strcmp(set->tensors[i - 1].name, set->tensors[i].name) == 0)
            return qrt_fail(QRT_ERR_FORMAT, "%s: tensor '%s' also appears in %s", path, set->tensors[i].name,
                            set->files[set->tensors[i].file == fi ? set->tensors[i - 1].file : set->tensors[i].file]
                                .path);
    return QRT_OK;
}

const qrt_st_tensor *qrt_st_find(const qrt_st_set *set, const char *name) {
    qrt_st_tensor key = {.name = (char *)name};
    if (!set->n_tensors) return NULL;
    return bsearch(&key, set->tensors, (size_t)set->n_tensors, sizeof key, cmp_tensor);
}

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* The shards named in an index's weight_map, each once, in first-seen order. */
static qrt_status open_index(qrt_st_set *set, const char *dir, const char *index_path) {
    json_error_t jerr;
    json_t *root = json_load_file(index_path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return qrt_fail(QRT_ERR_FORMAT, "%s: not valid JSON: %s (line %d)", index_path, jerr.text, jerr.line);
    json_t *map = json_object_get(root, "weight_map");
    qrt_status st = QRT_OK;
    if (!json_is_object(map)) st = qrt_fail(QRT_ERR_FORMAT, "%s: missing object field 'weight_map'", index_path);
    const char *key;
    json_t *val;
    char **seen = NULL;
    int n_seen = 0;
    if (st == QRT_OK) seen = qrt_calloc(json_object_size(map) + 1, sizeof *seen);
    if (st == QRT_OK && !seen) st = QRT_ERR_MEMORY;
    json_object_foreach(map, key, val) {
        if (st != QRT_OK) break;
        const char *file = json_string_value(val);
        if (!file || strchr(file, '/') || file[0] == '.') {
            st = qrt_fail(QRT_ERR_FORMAT, "%s: weight_map['%s'] must be a plain file name", index_path, key);
            break;
        }
        int dup = 0;
        for (int i = 0; i < n_seen && !dup; i++) dup = strcmp(seen[i], file) == 0;
        if (dup) continue;
        seen[n_seen++] = (char *)file;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        st = qrt_st_add_file(set, path);
    }
    /* Every name the index promises must be in the shards. */
    json_object_foreach(map, key, val) {
        if (st != QRT_OK) break;
        if (!qrt_st_find(set, key))
            st = qrt_fail(QRT_ERR_WEIGHTS, "%s: tensor '%s' is listed for %s but that file does not hold it",
                          index_path, key, json_string_value(val));
    }
    free(seen);
    json_decref(root);
    return st;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static qrt_status open_dir(qrt_st_set *set, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (file_exists(path)) return open_index(set, dir, path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (file_exists(path)) return qrt_st_add_file(set, path);
    DIR *d = opendir(dir);
    if (!d) return qrt_fail(QRT_ERR_IO, "%s: cannot open folder: %s", dir, strerror(errno));
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256)
        if (ends_with(e->d_name, ".safetensors") && strcmp(e->d_name, "mtp.safetensors") != 0)
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    qrt_status st = n ? QRT_OK
                      : qrt_fail(QRT_ERR_IO, "%s: no model.safetensors, model.safetensors.index.json or *.safetensors "
                                 "file; is this a Hugging Face checkpoint folder?", dir);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (st == QRT_OK) st = qrt_st_add_file(set, path);
        free(names[i]);
    }
    return st;
}

/* On failure nothing stays open. */
qrt_status qrt_st_open_dir(qrt_st_set *set, const char *dir) {
    memset(set, 0, sizeof *set);
    qrt_status st = open_dir(set, dir);
    if (st != QRT_OK) qrt_st_close(set);
    return st;
}

void qrt_st_close(qrt_st_set *set) {
    for (int i = 0; i < set->n_files; i++) {
        if (set->files[i].map) munmap(set->files[i].map, set->files[i].size);
        free(set->files[i].path);
    }
    for (int i = 0; i < set->n_tensors; i++) free(set->tensors[i].name);
    free(set->files);
    free(set->tensors);
    memset(set, 0, sizeof *set);
}

void qrt_st_shape_str(const qrt_st_tensor *t, char *buf, size_t n) {
    size_t off = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < t->ndim && off < n; d++)
        off += (size_t)snprintf(buf + off, n - off, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (off < n) snprintf(buf + off, n - off, "]");
}
