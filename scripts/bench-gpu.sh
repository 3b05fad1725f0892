#!/usr/bin/env bash
# One call on the GPU machine: doctor, membw, and the decode benchmark on the synthetic Qwen3.6-27B shape
# (all-NVFP4, MTP head): K=0 (no speculation) and K=6 at simulated AL 3.86, ctx 128 and 2048, 3 reps,
# parity. Logs and JSON go to $OUT; a short table is printed last. Build first:
#   cmake -S . -B build-cuda -DQRT_CUDA=ON && cmake --build build-cuda -j
# From a worktree, copy build-cuda/bin and this script into one git-ignored folder of the main checkout
# (build-*), carry it, and run:  cd FOLDER && QRT_COMMIT=<hash> BIN=bin bash bench-gpu.sh
set -u
BIN=${BIN:-build-cuda/bin}
OUT=${OUT:-bench-gpu-out}
CTX=${CTX:-128} # ctx 2048 adds ~20 s of prefill per generation (13 of them): give it its own call
mkdir -p "$OUT"
export QRT_CACHE_DIR="$OUT/tune"
echo "commit ${QRT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo "?")} date $(date -u +%Y-%m-%dT%H:%MZ)" \
  > "$OUT/summary.txt"
step() { # name timeout_s command...
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0)) s: $*" >> "$OUT/summary.txt"
}
step doctor 120 "$BIN/qwenrt" doctor --json "$OUT/doctor.json"
step membw 90 "$BIN/qwenrt" membw --json "$OUT/membw.json"
step bench 330 "$BIN/qwenrt" bench --synthetic qwen3.6-27b --ctx "$CTX" -K 0,6 --sim-al 3.86 -n 64 --reps 3 --parity \
  --json "$OUT/bench.json"
echo "==== doctor"; cat "$OUT/doctor.log"
echo "==== membw"; cat "$OUT/membw.log"
echo "==== bench (breakdowns and parity)"; grep -E "^#|kernel|W4A16|BF16|GDN|attention|other|total|parity|identical" "$OUT/bench.log"
echo "==== bench table"; sed -n '/^ *ctx *K *TTFT/,$p' "$OUT/bench.log"
echo "==== summary"; cat "$OUT/summary.txt"
