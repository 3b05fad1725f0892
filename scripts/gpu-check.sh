#!/usr/bin/env bash
# One call on the GPU machine: the gpu-labelled tests (every CUDA op and matmul variant against the CPU
# backend; the fixture models end to end) and the NVFP4 tilebench. Build here first:
#   cmake -S . -B build-cuda -DQRT_CUDA=ON && cmake --build build-cuda -j
# then run it with the device tool, carrying the binaries: carry ["build-cuda/bin"], command
#   bash scripts/gpu-check.sh
# Full logs go to $OUT (the device tool returns that folder); a short table is printed last.
# The binaries are run directly rather than through ctest: only build-cuda/bin travels, not the build tree.
# The device tool sends the session's main checkout, not a helper's worktree: from a worktree, copy bin/,
# this script and tests/data into one git-ignored folder of the main checkout (build-*), carry that, and run
#   cd FOLDER && QRT_COMMIT=<hash> BIN=bin bash gpu-check.sh
set -u
BIN=${BIN:-build-cuda/bin}
OUT=${OUT:-gpu-check-out}
mkdir -p "$OUT"
export QRT_CACHE_DIR="$OUT/tune" # the autotune cache comes back with the logs
{
  echo "commit ${QRT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo "?")} date $(date -u +%Y-%m-%dT%H:%MZ)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total,temperature.gpu,power.draw \
    --format=csv 2>&1
} > "$OUT/device.txt"

run() { # name timeout_s command...
  local name=$1 limit=$2
  shift 2
  local t0=$(date +%s.%N)
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  printf '%-16s rc=%-3d %6.1f s\n' "$name" "$rc" "$(python3 -c "print($(date +%s.%N) - $t0)" 2>/dev/null || echo 0)" \
    >> "$OUT/summary.txt"
  return $rc
}
: > "$OUT/summary.txt"
run cuda_ops 300 "$BIN/test_cuda_ops"
run cuda_model 120 "$BIN/test_cuda_model" tests/data
run tilebench 200 "$BIN/qwenrt" tilebench
# out-of-bounds and uninitialised reads across a whole forward pass (the fixture models), where available
if command -v compute-sanitizer > /dev/null; then
  run sanitizer_model 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/test_cuda_model" tests/data
fi

echo "==== device"; cat "$OUT/device.txt"
echo "==== failures (first 40)"; grep -h "^FAIL" "$OUT/cuda_ops.log" "$OUT/cuda_model.log" | head -40
echo "==== test results"; tail -n 1 "$OUT/cuda_ops.log"; grep -h "^ok\|^FAIL\|^PASS\|^SKIP" "$OUT/cuda_model.log"
[ -f "$OUT/sanitizer_model.log" ] && { echo "==== compute-sanitizer"; tail -n 3 "$OUT/sanitizer_model.log"; }
echo "==== tilebench"; cat "$OUT/tilebench.log"
echo "==== summary"; cat "$OUT/summary.txt"
