#!/usr/bin/env bash
# One call on the GPU machine: the gpu-labelled tests (every CUDA op and matmul variant against the CPU backend; the
# fixture models end to end, the 4080-token references included), then the protocol's headline rows for both
# layouts (docs/benchmarks.md: ctx 128 and 8192, K = 0 and 6 at simulated AL 3.86, parity). Build here first:
#   cmake -S . -B build-cuda -DQRT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a && cmake --build build-cuda -j
# copy build-cuda/bin/{qwenrt,test_cuda_ops,test_cuda_model} into a git-ignored folder of the main checkout (build-*),
# carry that folder with the device tool, and run from the repository root:
#   BIN=build-x QRT_COMMIT=<hash> bash scripts/gpu-check.sh
# Environment: BUDGET (seconds, default 450: a step that would start past it is skipped and says so),
# SANITIZE=1 (also compute-sanitizer over test_cuda_model, ~2 min), TILEBENCH=1 (also the decode-size tilebench),
# PREFILL=1 (also the NVFP4 prefill table: mma_gemm, mma_pf's two forms fp4pf / fp4pf_f16 and cuBLASLt at M = 33..2048
# on the 27B shapes; and the ctx-128 K=0 row with QRT_FP4_PREFILL=1 and =2, against bench_nvfp4's row without it),
# LONG=1 (also the all-NVFP4 ctx-32768 row, K = 0: TTFT and decode against the protocol's 0.8x of ctx 128),
# NCU_PREFILL=1 (also Nsight Compute's speed-of-light, occupancy and warp-state sections of the GDN prefill kernels
# and the prefill attention in an 8192-token piece: what limits them).
# Logs go to $OUT (the device tool returns that folder; it returns a limited number of files, so there are few);
# a short table is printed last.
set -u
BIN=${BIN:-build-cuda/bin}
OUT=${OUT:-gpu-check-out}
BUDGET=${BUDGET:-450}
mkdir -p "$OUT"
export QRT_CACHE_DIR="$OUT/tune" # the autotune cache comes back with the logs
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$SECONDS
{
  echo "commit ${QRT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo "?")} date $(date -u +%Y-%m-%dT%H:%MZ)"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total,temperature.gpu,power.draw \
    --format=csv,noheader 2>&1
} > "$OUT/summary.txt"

step() { # name timeout_s command...: skipped when it could run past BUDGET
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET - (SECONDS - T0)))
  if [ "$left" -lt 20 ]; then
    echo "$name skipped: $((SECONDS - T0)) s of the $BUDGET s budget used" >> "$OUT/summary.txt"
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t)) s" >> "$OUT/summary.txt"
  return $rc
}
table() { sed -n '/^ *ctx *K *TTFT/,/^$/p' "$OUT/$1.log"; grep -h "^parity\|device memory" "$OUT/$1.log"; }

step cuda_model 150 "$BIN/test_cuda_model" tests/data
step cuda_ops 240 "$BIN/test_cuda_ops"
rows=(--synthetic qwen3.6-27b --ctx 128,8192 -K 0,6 --sim-al 3.86 --parity -n 64 --reps 1 --no-breakdown)
step bench_stored 150 "$BIN/qwenrt" bench --format stored "${rows[@]}"
step bench_nvfp4 150 "$BIN/qwenrt" bench --format nvfp4 "${rows[@]}"
[ "${TILEBENCH:-0}" = 1 ] && step tilebench 200 "$BIN/qwenrt" tilebench
if [ "${PREFILL:-0}" = 1 ]; then
  step prefill_tilebench 200 env QRT_BLAS_MIN_T=17 "$BIN/qwenrt" tilebench --formats nvfp4 --variants mma_gemm \
    --shapes gdn_in,gdn_out,attn_qkv,attn_o,mlp_gate_up,mlp_down --m 33,64,128,192,256,512,2048 --reps 5 --cell-ms 5
  for f in 1 2; do
    step prefill_pf$f 120 env QRT_FP4_PREFILL=$f "$BIN/qwenrt" bench --format nvfp4 --synthetic qwen3.6-27b --ctx 128 \
      -K 0 -n 16 --reps 1 --no-breakdown
  done
fi
[ "${LONG:-0}" = 1 ] && step bench_long 150 "$BIN/qwenrt" bench --synthetic qwen3.6-27b --ctx 32768 -K 0 -n 16 --reps 1 \
  --no-breakdown
if [ "${NCU_PREFILL:-0}" = 1 ] && command -v ncu > /dev/null; then
  # the first 30 such launches of the warmup's prefill (one 8192-token piece: layers 0-2's GDN, 9 launches each
  # (4 segments of prep and state, the norm), and layer 3's attention); ncu locks the clocks to base
  step ncu_prefill 150 ncu --section SpeedOfLight --section WarpStateStats --section Occupancy \
    --launch-count 30 --kernel-name 'regex:gdn_chunk|gdn_norm|attention_tc' "$BIN/qwenrt" bench --synthetic qwen3.6-27b \
    --ctx 8192 -K 0 -n 2 --reps 1 --no-breakdown
fi
if [ "${SANITIZE:-0}" = 1 ] && command -v compute-sanitizer > /dev/null; then
  step sanitizer_model 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/test_cuda_model" tests/data
fi

echo "==== failures (first 40)"; grep -h "^FAIL" "$OUT/cuda_ops.log" "$OUT/cuda_model.log" 2>/dev/null | head -40
echo "==== test results"; tail -qn 1 "$OUT/cuda_ops.log" "$OUT/cuda_model.log" 2>/dev/null
[ -f "$OUT/sanitizer_model.log" ] && { echo "==== compute-sanitizer"; tail -n 3 "$OUT/sanitizer_model.log"; }
for b in bench_stored bench_nvfp4 bench_long prefill_pf1 prefill_pf2; do [ -f "$OUT/$b.log" ] && { echo "==== $b"; table "$b"; }; done
[ -f "$OUT/prefill_tilebench.log" ] && { echo "==== prefill tilebench"; sed -n '/% of read bandwidth/,$p' "$OUT/prefill_tilebench.log"; }
[ -f "$OUT/tilebench.log" ] && { echo "==== tilebench"; sed -n '/% of read bandwidth/,$p' "$OUT/tilebench.log"; }
[ -f "$OUT/ncu_prefill.log" ] && { echo "==== ncu (prefill kernels)"; grep -E '^  [a-z_]+<|^  void|Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Active Warps' "$OUT/ncu_prefill.log"; }
echo "==== summary"; cat "$OUT/summary.txt"
