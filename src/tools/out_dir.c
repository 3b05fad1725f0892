/* OUT of quantize and synth: checked before anything is written, written beside itself, swapped in whole
 * (out_dir.h says why). Paths are compared by device and inode, so every spelling of a folder is caught. */
#include "tools/out_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

static qrt_status copy_path(char *dst, const char *src) {
    if (snprintf(dst, QRT_OUT_PATH, "%s", src) >= QRT_OUT_PATH)
        return qrt_fail(QRT_ERR_ARG, "path too long (over %d bytes): %.80s...", QRT_OUT_PATH - 1, src);
    return QRT_OK;
}

/* dir + "/" + name, without doubling the slash when dir is "/". */
static qrt_status join(char *dst, const char *dir, const char *name) {
    const char *sep = dir[strlen(dir) - 1] == '/' ? "" : "/";
    if (snprintf(dst, QRT_OUT_PATH, "%s%s%s", dir, sep, name) >= QRT_OUT_PATH)
        return qrt_fail(QRT_ERR_ARG, "path too long (over %d bytes): %.80s/%s", QRT_OUT_PATH - 1, dir, name);
    return QRT_OK;
}

/* "a/b/c//" -> parent "a/b", name "c"; "c" -> ".", "c"; "/c" -> "/", "c"; "/" -> "/", "". */
static qrt_status split(const char *path, char *parent, char *name) {
    char buf[QRT_OUT_PATH];
    QRT_TRY(copy_path(buf, path));
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/') buf[--n] = 0;
    char *slash = strrchr(buf, '/');
    if (!slash) {
        strcpy(parent, ".");
        return copy_path(name, buf);
    }
    QRT_TRY(copy_path(name, slash + 1));
    if (slash == buf) slash[1] = 0; /* keep the root's own slash */
    else *slash = 0;
    return copy_path(parent, buf);
}

/* o->target: OUT made absolute with symlinks resolved, so a symlinked OUT replaces the folder it points at
 * (the link stays). When OUT does not exist yet, its parent folder must. */
static qrt_status resolve_target(qrt_out_dir *o, const char *out, struct stat *st, int *exists) {
    char real[PATH_MAX], parent[QRT_OUT_PATH], name[QRT_OUT_PATH];
    *exists = stat(out, st) == 0;
    if (*exists) {
        if (!realpath(out, real)) return qrt_fail(QRT_ERR_IO, "OUT %s: cannot resolve: %s", out, strerror(errno));
        return copy_path(o->target, real);
    }
    if (errno != ENOENT) return qrt_fail(QRT_ERR_IO, "OUT %s: %s", out, strerror(errno));
    struct stat link;
    if (lstat(out, &link) == 0)
        return qrt_fail(QRT_ERR_ARG, "OUT %s is a symlink to nothing; remove it or point it at a folder", out);
    QRT_TRY(split(out, parent, name));
    if (!realpath(parent, real))
        return qrt_fail(QRT_ERR_IO, "OUT %s: its parent folder %s: %s; create it first", out, parent, strerror(errno));
    return join(o->target, real, name);
}

/* Whether the canonical path, or a folder above it, is the file st; *self says it was path itself. */
static int is_under(const char *path, const struct stat *st, int *self) {
    char buf[QRT_OUT_PATH];
    snprintf(buf, sizeof buf, "%s", path);
    for (*self = 1;; *self = 0) {
        struct stat s;
        if (stat(buf, &s) == 0 && same_file(&s, st)) return 1;
        char *slash = strrchr(buf, '/');
        if (!slash || !buf[1]) return 0; /* past the root */
        if (slash == buf) slash[1] = 0;
        else *slash = 0;
    }
}

/* OUT must not be IN, lie inside IN (the tool would read what it writes), or hold IN (replacing OUT would
 * delete the source). out_st is NULL when OUT does not exist yet. */
static qrt_status check_against_in(const qrt_out_dir *o, const char *out, const char *in, const struct stat *out_st) {
    struct stat in_st;
    char in_real[PATH_MAX];
    if (stat(in, &in_st) != 0 || !realpath(in, in_real))
        return qrt_fail(QRT_ERR_IO, "IN %s: %s", in, strerror(errno));
    int self;
    if (is_under(o->target, &in_st, &self))
        return self ? qrt_fail(QRT_ERR_ARG, "OUT %s is the same folder as IN %s; write to a different folder", out, in)
                    : qrt_fail(QRT_ERR_ARG, "OUT %s is inside IN %s; write to a folder outside IN", out, in);
    if (out_st && is_under(in_real, out_st, &self))
        return qrt_fail(QRT_ERR_ARG, "IN %s is inside OUT %s; replacing OUT would delete IN, so pick another OUT",
                        in, out);
    return QRT_OK;
}

static qrt_status dir_is_empty(const char *path, const char *out, int *empty) {
    DIR *d = opendir(path);
    if (!d) return qrt_fail(QRT_ERR_IO, "OUT %s: cannot list: %s", out, strerror(errno));
    const struct dirent *e;
    *empty = 1;
    while (*empty && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) *empty = 0;
    closedir(d);
    return QRT_OK;
}

/* <parent>/.<name>.<what>-<pid>: hidden, beside OUT, and tied to this process. */
static qrt_status beside(char *dst, const char *target, const char *what) {
    char parent[QRT_OUT_PATH], name[QRT_OUT_PATH], hidden[QRT_OUT_PATH + 32];
    QRT_TRY(split(target, parent, name));
    snprintf(hidden, sizeof hidden, ".%s.%s-%ld", name, what, (long)getpid());
    return join(dst, parent, hidden);
}

qrt_status qrt_out_dir_begin(qrt_out_dir *o, const char *out, const char *in, int force) {
    memset(o, 0, sizeof *o);
    struct stat out_st;
    int exists;
    QRT_TRY(resolve_target(o, out, &out_st, &exists));
    if (!strcmp(o->target, "/"))
        return qrt_fail(QRT_ERR_ARG, "OUT %s is the root folder; name a folder to create", out);
    if (in) QRT_TRY(check_against_in(o, out, in, exists ? &out_st : NULL));
    if (exists) {
        if (!S_ISDIR(out_st.st_mode))
            return qrt_fail(QRT_ERR_ARG, "OUT %s exists and is not a folder; remove it or pick another name", out);
        int empty = 0;
        QRT_TRY(dir_is_empty(o->target, out, &empty));
        if (!empty && !force)
            return qrt_fail(QRT_ERR_ARG, "OUT %s exists and is not empty; pass --force to replace it", out);
        o->replace = !empty;
    }
    QRT_TRY(beside(o->tmp, o->target, "tmp"));
    QRT_TRY(beside(o->old, o->target, "old"));
    if (mkdir(o->tmp, 0755) != 0) {
        qrt_status st = errno == EEXIST
                            ? qrt_fail(QRT_ERR_IO, "%s already exists (left by an interrupted run?); remove it and "
                                       "try again", o->tmp)
                            : qrt_fail(QRT_ERR_IO, "%s: cannot create folder: %s", o->tmp, strerror(errno));
        o->tmp[0] = 0; /* not ours: abort must not delete it */
        return st;
    }
    return QRT_OK;
}

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb, (void)type, (void)ftw;
    return remove(path);
}

/* rm -rf path, never following symlinks out of it. */
static int remove_tree(const char *path) { return nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* fsync every file the tool wrote (the tools write a flat folder), then the folder itself, so a crash right
 * after the rename cannot leave OUT holding files whose data never reached the disk. */
static qrt_status sync_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return qrt_fail(QRT_ERR_IO, "%s: cannot list: %s", dir, strerror(errno));
    qrt_status st = QRT_OK;
    const struct dirent *e;
    while (st == QRT_OK && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        int fd = openat(dirfd(d), e->d_name, O_RDONLY);
        if (fd < 0 || fsync(fd) != 0) st = qrt_fail(QRT_ERR_IO, "%s/%s: cannot flush to disk: %s", dir, e->d_name,
                                                    strerror(errno));
        if (fd >= 0) close(fd);
    }
    if (st == QRT_OK && fsync(dirfd(d)) != 0)
        st = qrt_fail(QRT_ERR_IO, "%s: cannot flush to disk: %s", dir, strerror(errno));
    closedir(d);
    return st;
}

/* The renames themselves reach the disk only when the parent folder is flushed; best effort. */
static void sync_parent(const char *target) {
    char parent[QRT_OUT_PATH], name[QRT_OUT_PATH];
    if (split(target, parent, name) != QRT_OK) return;
    int fd = open(parent, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) fsync(fd), close(fd);
}

/* OUT exists and is not empty: move it aside, move the new folder in, then delete the old one. If the second
 * rename fails the old OUT goes back, so OUT never holds a mix of old and new files. */
static qrt_status swap_in(qrt_out_dir *o) {
    if (rename(o->target, o->old) != 0)
        return qrt_fail(QRT_ERR_IO, "cannot move the old %s aside to %s: %s", o->target, o->old, strerror(errno));
    if (rename(o->tmp, o->target) != 0) {
        int err = errno;
        if (rename(o->old, o->target) != 0)
            return qrt_fail(QRT_ERR_IO, "cannot move %s into place (%s), nor the old folder back from %s; move it "
                            "back by hand", o->target, strerror(err), o->old);
        return qrt_fail(QRT_ERR_IO, "cannot move %s into place: %s; the old folder is back", o->target, strerror(err));
    }
    sync_parent(o->target);
    if (remove_tree(o->old) != 0)
        fprintf(stderr, "qwenrt: warning: the replaced folder %s could not be removed completely; delete it by hand\n",
                o->old);
    return QRT_OK;
}

qrt_status qrt_out_dir_commit(qrt_out_dir *o) {
    qrt_status st = sync_files(o->tmp);
    if (st == QRT_OK && o->replace) st = swap_in(o);
    else if (st == QRT_OK && rename(o->tmp, o->target) != 0) /* an empty OUT is replaced by the rename itself */
        st = qrt_fail(QRT_ERR_IO, "cannot move %s into place as %s: %s", o->tmp, o->target, strerror(errno));
    if (st != QRT_OK) return qrt_out_dir_abort(o), st;
    sync_parent(o->target);
    o->tmp[0] = 0;
    return QRT_OK;
}

void qrt_out_dir_abort(qrt_out_dir *o) {
    if (o->tmp[0]) remove_tree(o->tmp);
    o->tmp[0] = 0;
}
