#!/usr/bin/env bash
# One GPU call for the chunked GDN form's variants (src/backend/cuda/gdn.cu): the GDN op tests (every chunked variant
# against the CPU backend: tests/test_cuda_ops.c --gdn), then the synthetic Qwen3.6-27B's prefill of 8192 tokens under
# QRT_GDN_VARIANT 1, 2 (the default), 2:32 and 2b, each with its kernel breakdown; printed last: the test result, and per
# variant the prefill's GDN row (conv1d and the GDN op) and the TTFT. Build here first (the CUDA build), then run with
# the device tool, carrying the binaries: carry ["build-cuda/bin"], command
#   bash scripts/gdn-ab.sh
# From a worktree: copy bin/ and this script into one git-ignored folder of the main checkout (build-*), carry that,
# and run  cd FOLDER && BIN=bin bash gdn-ab.sh
# The variants run in turns in one process each, on one machine: compare their rows only with each other. The steps'
# timeouts add up to 590 s (a device call may run 600). VARIANTS narrows the list.
# NCU=1 instead times, per variant, the first 12 GDN kernels of a 2048-token prefill (one piece: the first layers'
# gdn_chunked, or gdn_chunk_prep and gdn_chunk_state, and gdn_norm_gated) under Nsight Compute, kernel by kernel.
set -u
BIN=${BIN:-build-cuda/bin}
OUT=${OUT:-gdn-ab-out}
VARIANTS=${VARIANTS:-"1 2 2:32 2b"}
mkdir -p "$OUT"
export QRT_CACHE_DIR="$OUT/tune" # one NVFP4 tune cache for every run: the matmuls' picks are the same in each
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.total --format=csv > "$OUT/device.txt" 2>&1
: > "$OUT/summary.txt"
name() { echo "${1/:/-}"; } # a variant as a file name
if [ "${NCU:-0}" = 1 ]; then
  for v in $VARIANTS; do
    QRT_GDN_VARIANT=$v QRT_CUDA_GRAPHS=0 timeout 180 ncu --csv --cache-control none --clock-control none \
      --metrics gpu__time_duration.sum --kernel-name regex:gdn --launch-count 12 \
      "$BIN/qwenrt" bench --synthetic qwen3.6-27b --ctx 2048 -K 0 -n 2 --reps 1 --no-breakdown \
      > "$OUT/ncu-$(name "$v").csv" 2> "$OUT/ncu-$(name "$v").err"
    echo "ncu QRT_GDN_VARIANT=$v rc=$?" >> "$OUT/summary.txt"
  done
else
  timeout 150 "$BIN/test_cuda_ops" --gdn > "$OUT/cuda_ops_gdn.log" 2>&1
  echo "test_cuda_ops --gdn rc=$?" >> "$OUT/summary.txt"
  for v in $VARIANTS; do
    QRT_GDN_VARIANT=$v timeout 110 "$BIN/qwenrt" bench --synthetic qwen3.6-27b --ctx 8192 -K 0 -n 8 --reps 1 \
      > "$OUT/bench-$(name "$v").log" 2>&1
    echo "bench QRT_GDN_VARIANT=$v rc=$?" >> "$OUT/summary.txt"
  done
fi

echo "==== device"; cat "$OUT/device.txt"
if [ -f "$OUT/cuda_ops_gdn.log" ]; then
  echo "==== GDN op tests (failures first 40, then the result)"
  grep -h "^FAIL" "$OUT/cuda_ops_gdn.log" | head -40
  tail -n 2 "$OUT/cuda_ops_gdn.log"
fi
for v in $VARIANTS; do
  echo "==== QRT_GDN_VARIANT=$v"
  f="$OUT/bench-$(name "$v").log"
  if [ -f "$f" ]; then
    awk '/kernel categories, prefill/ {p = 1} p && /^ +(GDN|total) / {print} /^ +total / {p = 0}' "$f"
    grep -A1 "TTFT_ms" "$f"
  fi
  # the CSV's fields are quoted and kernel names hold commas (scripts/ncu-kernels.sh reads it the same way)
  f="$OUT/ncu-$(name "$v").csv"
  if [ -f "$f" ]; then
    awk -F'","' '
      $0 ~ /gpu__time_duration/ { name = $5; sub(/\(.*/, "", name); sub(/^void /, "", name)
        v = $NF; gsub(/[",]/, "", v); n[name]++; t[name] += v / 1000 }
      END { for (k in n) printf "  ncu: %8.1f us/call %3d calls  %s\n", t[k] / n[k], n[k], k }' "$f"
  fi
done
echo "==== summary"; cat "$OUT/summary.txt"
