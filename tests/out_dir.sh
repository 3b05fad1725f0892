#!/bin/sh
# Issue 33: `qwenrt quantize` and `qwenrt synth` never lose data in IN or OUT. Usage: out_dir.sh QWENRT DATA CASE,
# one CTest per CASE. Before the fix both tools wrote straight into OUT: OUT equal to IN died with SIGBUS and
# left a corrupt source, an old checkpoint's index and shards stayed beside the new files (and won at load),
# and a failed run left OUT half written. Inputs are copies of tests/data, which is never modified.
q=$1 data=$2 case=$3
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
cd "$t" || exit 1
cp -r "$data/tiny-tied" in # one float model.safetensors: the file a write over IN truncated
fail() { echo "FAIL [$case]: $*"; exit 1; }

# Every path under a folder and a checksum of every file: equal before and after means untouched.
snapshot() { (cd "$1" && find . | LC_ALL=C sort && find . -type f -exec cksum {} + | LC_ALL=C sort); }

# refused PATTERN CMD...: CMD exits 1 or 2 (not a signal, not 0) with a message on stderr containing PATTERN.
refused() {
    pattern=$1; shift
    err=$("$@" 2>&1 >/dev/null); rc=$?
    [ $rc -eq 1 ] || [ $rc -eq 2 ] || fail "exit $rc (want 1 or 2): $*: $err"
    echo "$err" | grep -qF -- "$pattern" || fail "message lacks '$pattern': $*: $err"
    echo "ok: refused: $* -> $err"
}
succeeds() { out=$("$@" 2>&1) || fail "should succeed: $*: $out"; echo "ok: $*"; }
# No .NAME.tmp-PID or .NAME.old-PID folder left in the working folder.
no_leftovers() {
    left=$(ls -A | grep -E '\.(tmp|old)-[0-9]+$')
    [ -z "$left" ] || fail "left behind: $left"
}
# loads_nvfp4 DIR: the folder loads and its linears are NVFP4.
loads_nvfp4() {
    info=$("$q" inspect "$1" 2>&1) || fail "qwenrt inspect $1 failed: $info"
    echo "$info" | grep -q "NVFP4" || fail "$1 holds no NVFP4 linears: $info"
}
# stale DIR: an older checkpoint (sharded, with an index) plus a stray file, as a previous run might leave.
stale() { cp -r "$data/tiny-flat" "$1" && echo old > "$1/notes.txt"; }
# Quantizes or synthesizes under a file size limit, so the write fails midway like a full disk. SIGXFSZ is
# ignored so the write returns EFBIG (an ordinary error path) instead of killing the process.
limited() { (trap '' XFSZ; ulimit -f 200; exec "$@"); }
quant() { "$q" quantize "$@" --format nvfp4 --threads 1; }
synth() { "$q" synth --preset tiny --format bf16 --threads 1 "$@"; }

before=$(snapshot in)
case $case in
same)
    refused "is the same folder as IN" quant in in
    ;;
same_spelled) # the same folder under other names: a trailing slash, ./, a symlink
    ln -s in link
    refused "is the same folder as IN" quant in in/
    refused "is the same folder as IN" quant in ./in
    refused "is the same folder as IN" quant in/ "$t/in"
    refused "is the same folder as IN" quant in link
    ;;
inside)
    refused "is inside IN" quant in in/sub
    [ ! -e in/sub ] || fail "in/sub was created"
    ;;
in_inside_out) # replacing OUT would delete IN with it
    mkdir out && mv in out/in && before_out=$(snapshot out)
    refused "is inside OUT" quant out/in out --force
    [ "$(snapshot out)" = "$before_out" ] || fail "OUT changed"
    mv out/in in
    ;;
nonempty)
    stale out && before_out=$(snapshot out)
    refused "exists and is not empty; pass --force to replace it" quant in out
    [ "$(snapshot out)" = "$before_out" ] || fail "OUT changed"
    ;;
force) # replaced whole: not one of the old checkpoint's files remains, and the result loads
    stale out
    succeeds quant in out --force
    for f in model.safetensors.index.json model-00001-of-00002.safetensors model-00002-of-00002.safetensors \
             reference.json notes.txt; do
        [ ! -e "out/$f" ] || fail "old file out/$f is still there"
    done
    [ -f out/model.safetensors ] && [ -f out/config.json ] || fail "out lacks model.safetensors or config.json"
    loads_nvfp4 out
    ;;
empty) # an existing empty OUT is fine (not a regression test: this worked before, and must keep working)
    mkdir out
    succeeds quant in out
    loads_nvfp4 out
    ;;
interrupted) # a write that fails midway leaves the target as it was: absent, or the old checkpoint
    refused "File too large" limited "$q" quantize in fresh --format nvfp4 --threads 1
    [ ! -e fresh ] || fail "a failed run left fresh/ behind: $(ls -A fresh)"
    succeeds quant in out && before_out=$(snapshot out)
    refused "File too large" limited "$q" quantize in out --format fp8 --threads 1 --force
    [ "$(snapshot out)" = "$before_out" ] || fail "OUT changed"
    loads_nvfp4 out
    ;;
synth_nonempty)
    stale out && before_out=$(snapshot out)
    refused "exists and is not empty; pass --force to replace it" synth out
    [ "$(snapshot out)" = "$before_out" ] || fail "OUT changed"
    ;;
synth_force)
    stale out
    succeeds synth --force out
    [ "$(ls out | LC_ALL=C sort | tr '\n' ' ')" = "config.json model.safetensors tokenizer.json " ] ||
        fail "out holds $(ls out | tr '\n' ' ') (want config.json model.safetensors tokenizer.json)"
    info=$("$q" inspect out 2>&1) || fail "qwenrt inspect out failed: $info"
    ;;
synth_interrupted)
    refused "File too large" limited "$q" synth --preset tiny --format bf16 --threads 1 fresh
    [ ! -e fresh ] || fail "a failed run left fresh/ behind: $(ls -A fresh)"
    stale out && before_out=$(snapshot out)
    refused "File too large" limited "$q" synth --preset tiny --format nvfp4 --threads 1 --force out
    [ "$(snapshot out)" = "$before_out" ] || fail "OUT changed"
    ;;
*)
    fail "unknown case"
    ;;
esac
[ "$(snapshot in)" = "$before" ] || fail "IN changed"
no_leftovers
echo "out_dir $case: passed"
