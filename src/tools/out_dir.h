/* The output folder of `qwenrt quantize` and `qwenrt synth`: OUT is either left exactly as it was or
 * replaced whole by a complete checkpoint, never a mix of old and new files.
 *
 * The tool writes every file into a fresh temporary folder beside OUT (same parent, hence same file system, so
 * the final rename is atomic) and moves it into place only once every file is complete and on disk. Before
 * anything is written OUT is checked against IN: the same folder (however spelled: `DIR/`, `./DIR`, a symlink)
 * or one inside the other is refused, because quantize maps IN while it writes and writing over IN truncates
 * that mapping (SIGBUS, a corrupt source). A non-empty OUT is refused unless force, because an old
 * model.safetensors.index.json or stray shard left beside new files wins at load. */
#ifndef QRT_OUT_DIR_H
#define QRT_OUT_DIR_H
#include "util/common.h"

#define QRT_OUT_PATH 4096

typedef struct {
    char target[QRT_OUT_PATH]; /* OUT as an absolute path with symlinks resolved: what gets replaced */
    char tmp[QRT_OUT_PATH];    /* <parent>/.<name>.tmp-<pid>: where the tool writes its files */
    char old[QRT_OUT_PATH];    /* <parent>/.<name>.old-<pid>: the replaced OUT while the new one moves in */
    int replace;               /* OUT exists and is not empty (allowed only with force) */
} qrt_out_dir;

/* Checks OUT (and IN, which may be NULL when there is no input folder) and creates the temporary folder.
 * Writes nothing when it fails. */
qrt_status qrt_out_dir_begin(qrt_out_dir *o, const char *out, const char *in, int force);
/* Flushes the temporary folder's files to disk and moves the folder into place (an old non-empty OUT is
 * renamed aside first and deleted last). On failure the temporary folder is removed and OUT is as it was. */
qrt_status qrt_out_dir_commit(qrt_out_dir *o);
/* Removes the temporary folder after a failed write; OUT was never touched. */
void qrt_out_dir_abort(qrt_out_dir *o);
#endif
