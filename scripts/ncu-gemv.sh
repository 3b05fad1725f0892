#!/usr/bin/env bash
# Where an NVFP4 GEMV launch spends its time, on the GPU machine, in one call: Nsight Compute on one launch of one
# variant in `qwenrt tilebench --shapes SHAPE --m M --variants VARIANT` with QRT_NVFP4_VARIANT=VARIANT (so the
# autotuner launches nothing else and the kernel profiled is the one named) — duration, DRAM and SM throughput, warps
# per scheduler, stall reasons per issued instruction, and the issue share of every pipe — plus the SASS opcode counts
# of the variant's kernels. Build here first (cmake -S . -B build-cuda -DQRT_CUDA=ON && cmake --build build-cuda -j),
# then with the device tool, carrying ["build-cuda/bin"]:
#   bash scripts/ncu-gemv.sh mlp_gate_up mma_ck8x2e 1
# SHAPE is one of tilebench's --shapes words (default mlp_gate_up), VARIANT a name `qwenrt tilebench` lists (default
# mma_ck8x2e), M the tokens per call (default 1). ncu runs with --clock-control none (the clocks are left alone, as
# tilebench and decode see them). Reports and logs go to $OUT (the device tool returns that folder).
set -u
SHAPE=${1:-mlp_gate_up}
VARIANT=${2:-mma_ck8x2e}
M=${3:-1}
BIN=${BIN:-build-cuda/bin}
OUT=${OUT:-ncu-gemv-out}
mkdir -p "$OUT"
export QRT_CACHE_DIR="$OUT/tune-empty" QRT_NVFP4_VARIANT="$VARIANT"
rm -rf "$QRT_CACHE_DIR"

# the variant's kernel family (mma_cl12x2 -> fp4_mma_cl, mma_k4_sx -> fp4_mma_k, mma_w1 -> fp4_mma_w) and, for the
# SASS, its template arguments in the mangled names (mma_cl12x2 -> fp4_mma_clILi12ELi2E; mma_il has its token tiles
# first: mma_il12x2 -> fp4_mma_ilILi[0-9]+ELi12ELi2E; mma_ck takes its configuration struct: mma_ck8x2e ->
# fp4_mma_ckI6ck8x2e)
FAMILY=fp4_$(echo "$VARIANT" | sed -E 's/^(mma_[a-z]+)[0-9].*$/\1/')
SHAPE_ARGS=$(echo "$VARIANT" | sed -nE 's/^mma_il([0-9]+)x([0-9]+)$/ILi[0-9]+ELi\1ELi\2E/p;
  s/^mma_cl([0-9]+)x([0-9]+)$/ILi\1ELi\2E/p; s/^mma_(ck[0-9a-z]+)$/I[0-9]+\1L/p')
echo "== SASS opcodes of the ${FAMILY}${SHAPE_ARGS} kernels (whole kernels: x preparation, main loop, finish)"
cuobjdump -sass "$BIN/qwenrt" > "$OUT/sass-all.txt" 2>&1 || echo "cuobjdump failed (see $OUT/sass-all.txt)"
awk -v pat="Function : _Z[0-9]+${FAMILY}${SHAPE_ARGS}" '/Function : /{on = $0 ~ pat} on' "$OUT/sass-all.txt" \
  > "$OUT/sass.txt"
grep "Function : " "$OUT/sass.txt"
grep -oE '^\s+/\*[0-9a-f]+\*/\s+(@!?U?P[0-9T] )?[A-Z0-9_.]+' "$OUT/sass.txt" | awk '{print $NF}' | sed 's/\..*//' |
  sort | uniq -c | sort -rn | head -20

echo "== ncu: the fourth $FAMILY launch (after the warmups) of tilebench --shapes $SHAPE --m $M --variants $VARIANT"
ncu --clock-control none -k "regex:$FAMILY" --launch-skip 3 --launch-count 1 \
  --section LaunchStats --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
  --section InstructionStats \
  --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active" \
  -o "$OUT/gemv" -f "$BIN/qwenrt" tilebench --formats nvfp4 --m "$M" --shapes "$SHAPE" \
  --variants "$VARIANT" --reps 3 > "$OUT/ncu-run.log" 2>&1
echo "ncu rc=$? (log: $OUT/ncu-run.log)"
ncu -i "$OUT/gemv.ncu-rep" --page details > "$OUT/details.txt" 2>&1
grep -E "Block Size|Registers Per|Duration|DRAM Throughput|Compute \(SM\) Throughput|Active Warps Per Scheduler|Eligible Warps Per|No Eligible|Warp Cycles Per Issued|Executed Instructions " \
  "$OUT/details.txt"
echo "== stall reasons (warps stalled per issued instruction)"
ncu -i "$OUT/gemv.ncu-rep" --page raw 2>&1 | grep -E "issue_stalled" | awk '{print $NF, $1}' | sort -rn | head -12
echo "== pipes (% of peak issue while active)"
ncu -i "$OUT/gemv.ncu-rep" --page raw 2>&1 | grep -E "sm__inst_executed_pipe_" | awk '{print $NF, $1}' | sort -rn |
  head -16
