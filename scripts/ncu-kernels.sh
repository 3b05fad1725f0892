#!/usr/bin/env bash
# Where one decoded token's GPU time goes, kernel by kernel, on the GPU machine in one call: Nsight Compute's
# gpu__time_duration of 600 consecutive kernel launches in the middle of `qwenrt bench --synthetic qwen3.6-27b
# --ctx 128 -K 0` (graphs off, so every kernel is a launch ncu can time; caches and clocks left alone), summed by
# kernel name: µs over the window (about 1.1 decoded tokens: divide by calls / 64 of gate+up for per token), calls
# and µs per call. Kernels run one at a time under ncu, so the sum is above the graphed decode time
# (no overlap, and every kernel pays ~2 µs that a graph node partly hides). Build here first, then with the device
# tool, carrying ["build-cuda/bin"]:
#   bash scripts/ncu-kernels.sh
# Output: a table on stdout; the raw CSV in $OUT (the device tool returns that folder).
set -u
BIN=${BIN:-build-cuda/bin}
OUT=${OUT:-ncu-kernels-out}
mkdir -p "$OUT"
export QRT_CACHE_DIR="$OUT/tune"
# one plain run first: the NVFP4 autotuner's timing launches must not fall in the profiled window
"$BIN/qwenrt" bench --synthetic qwen3.6-27b --ctx 128 -K 0 -n 8 --reps 1 --no-breakdown > /dev/null 2>&1
QRT_CUDA_GRAPHS=0 ncu --csv --cache-control none --clock-control none --metrics gpu__time_duration.sum \
  --launch-skip 12000 --launch-count 600 \
  "$BIN/qwenrt" bench --synthetic qwen3.6-27b --ctx 128 -K 0 -n 48 --reps 1 --no-breakdown > "$OUT/kernels.csv" 2> "$OUT/ncu.err"
echo "ncu rc=$? (csv: $OUT/kernels.csv)"
# the CSV's fields are quoted and kernel names hold commas, so split on the quotes' '","'
awk -F'","' '
  $0 ~ /gpu__time_duration/ { name = $5; sub(/\(.*/, "", name); sub(/^void /, "", name)
    v = $NF; gsub(/[",]/, "", v); n[name]++; t[name] += v / 1000 }
  END { for (k in n) printf "%10.1f us %5d calls %8.2f us/call  %s\n", t[k], n[k], t[k] / n[k], k }' "$OUT/kernels.csv" |
  sort -rn
