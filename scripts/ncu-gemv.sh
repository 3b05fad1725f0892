#!/usr/bin/env bash
# Where an NVFP4 GEMV launch spends its time, on the GPU machine, in one call: Nsight Compute on the first mma_st12x2
# launch of `qwenrt tilebench --shapes SHAPE --m 1` (with an empty tune cache the autotuner times the variants in
# order, so the first fp4_mma_st launch is mma_st12x2's) — duration, DRAM and SM throughput, warps per scheduler,
# stall reasons per issued instruction, and the issue share of every pipe — plus the kernel's SASS opcode counts.
# Build here first (cmake -S . -B build-cuda -DQRT_CUDA=ON && cmake --build build-cuda -j), then with the device
# tool, carrying ["build-cuda/bin"]:
#   bash scripts/ncu-gemv.sh mlp_gate_up
# SHAPE is one of tilebench's --shapes words (default mlp_gate_up). ncu runs with --clock-control none (the clocks are
# left alone). Reports and logs go to $OUT (the device tool returns that folder).
set -u
SHAPE=${1:-mlp_gate_up}
BIN=${BIN:-build-cuda/bin}
OUT=${OUT:-ncu-gemv-out}
mkdir -p "$OUT"
export QRT_CACHE_DIR="$OUT/tune-empty"
rm -rf "$QRT_CACHE_DIR"

# the one-token kernel with x prepared in the block (mma_st<NT=1, 12 warps, 2 slots, SX>)
KERNEL=_Z10fp4_mma_stILi1ELi12ELi2ELb1ELb0EEvPKh12fp4_segments8fp4_xsrcPKfllii11fp4_st_work
echo "== SASS opcodes of $KERNEL (whole kernel: x preparation, main loop, split-tile finish)"
cuobjdump -sass -fun "$KERNEL" "$BIN/qwenrt" > "$OUT/sass.txt" 2>&1 || echo "cuobjdump failed (see $OUT/sass.txt)"
grep -oE '^\s+/\*[0-9a-f]+\*/\s+(@!?U?P[0-9T] )?[A-Z0-9_.]+' "$OUT/sass.txt" | awk '{print $NF}' | sed 's/\..*//' |
  sort | uniq -c | sort -rn | head -20

echo "== ncu: first fp4_mma_st launch of tilebench --shapes $SHAPE --m 1"
ncu --clock-control none -k fp4_mma_st --launch-count 1 \
  --section LaunchStats --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
  --section InstructionStats \
  --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active" \
  -o "$OUT/gemv" -f "$BIN/qwenrt" tilebench --formats nvfp4 --m 1 --shapes "$SHAPE" --reps 3 > "$OUT/ncu-run.log" 2>&1
echo "ncu rc=$? (log: $OUT/ncu-run.log)"
ncu -i "$OUT/gemv.ncu-rep" --page details > "$OUT/details.txt" 2>&1
grep -E "Block Size|Registers Per|Duration|DRAM Throughput|Compute \(SM\) Throughput|Active Warps Per Scheduler|Eligible Warps Per|No Eligible|Warp Cycles Per Issued|Executed Instructions " \
  "$OUT/details.txt"
echo "== stall reasons (warps stalled per issued instruction)"
ncu -i "$OUT/gemv.ncu-rep" --page raw 2>&1 | grep -E "issue_stalled" | awk '{print $NF, $1}' | sort -rn | head -12
echo "== pipes (% of peak issue while active)"
ncu -i "$OUT/gemv.ncu-rep" --page raw 2>&1 | grep -E "sm__inst_executed_pipe_" | awk '{print $NF, $1}' | sort -rn |
  head -16
