#!/usr/bin/env bash
# Where one decoded token's GPU time goes, kernel by kernel, on the GPU machine in one call: Nsight Compute's
# gpu__time_duration of COUNT consecutive kernel launches after SKIP of `qwenrt bench --synthetic qwen3.6-27b --ctx CTX
# -K 0` (graphs off, so every kernel is a launch ncu can time; caches and clocks left alone), summed by kernel name: µs
# over the window, calls and µs per call. Kernels run one at a time under ncu, so the sum is above the graphed decode
# time (no overlap, and every kernel pays ~2 µs that a graph node partly hides). Build here first, then with the
# device tool, carrying ["build-cuda/bin"]:
#   bash scripts/ncu-kernels.sh
# Environment (defaults: a whole decode window at ctx 128, about 1.1 decoded tokens: divide by calls / 64 of gate+up
# for per token):
#   CTX (128), SKIP (12000), COUNT (600): the window of launches timed
#   KERNELS: a regular expression; only launches of kernels whose names match are counted, skipped and timed
# The decode attention at a long context, two tokens (a prefill of 32768 tokens is 4 pieces x 16 layers of
# attention_tc; each decoded token 16 attention_tc + 16 attention_merge):
#   CTX=32768 KERNELS=attention SKIP=64 COUNT=64 bash scripts/ncu-kernels.sh
# Where one 8192-token prefill's time goes, every kernel (the warmup's prefill is the first ~2000 launches: its
# matmuls' x_to_bf16, dequant_fp4 and cuBLASLt kernels, the conv, the GDN and attention kernels, the norms):
#   CTX=8192 SKIP=0 COUNT=2400 bash scripts/ncu-kernels.sh
# Output: a table on stdout; the raw CSV in $OUT (the device tool returns that folder).
set -u
BIN=${BIN:-build-cuda/bin}
OUT=${OUT:-ncu-kernels-out}
CTX=${CTX:-128}
SKIP=${SKIP:-12000}
COUNT=${COUNT:-600}
mkdir -p "$OUT"
export QRT_CACHE_DIR="$OUT/tune"
filter=()
[ -n "${KERNELS:-}" ] && filter=(--kernel-name "regex:$KERNELS")
# one plain run first: the NVFP4 autotuner's timing launches must not fall in the profiled window
"$BIN/qwenrt" bench --synthetic qwen3.6-27b --ctx 128 -K 0 -n 8 --reps 1 --no-breakdown > /dev/null 2>&1
QRT_CUDA_GRAPHS=0 ncu --csv --cache-control none --clock-control none --metrics gpu__time_duration.sum \
  "${filter[@]}" --launch-skip "$SKIP" --launch-count "$COUNT" \
  "$BIN/qwenrt" bench --synthetic qwen3.6-27b --ctx "$CTX" -K 0 -n 48 --reps 1 --no-breakdown > "$OUT/kernels.csv" 2> "$OUT/ncu.err"
echo "ncu rc=$? (csv: $OUT/kernels.csv)"
# the CSV's fields are quoted and kernel names hold commas, so split on the quotes' '","'
awk -F'","' '
  $0 ~ /gpu__time_duration/ { name = $5; sub(/\(.*/, "", name); sub(/^void /, "", name)
    v = $NF; gsub(/[",]/, "", v); n[name]++; t[name] += v / 1000 }
  END { for (k in n) printf "%10.1f us %5d calls %8.2f us/call  %s\n", t[k], n[k], t[k] / n[k], k }' "$OUT/kernels.csv" |
  sort -rn
