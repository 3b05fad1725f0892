#!/usr/bin/env bash
# Prefill A/B in one call on one machine: the TTFT and the prefill's kernel categories (GEMM, GDN, conv1d, attention,
# other: `qwenrt bench`'s op-timed breakdown) of each RUN, in turns for ROUNDS rounds, so that drift during the call
# falls on every run alike (only runs of one call compare). A RUN is a qwenrt binary, or VAR=VALUE[,VAR=VALUE...]@BIN
# to run that binary with those environment variables (a measurement knob: QRT_BLAS_ALGO=time, QRT_GDN_VARIANT=2b).
#   scripts/prefill-ab.sh [-r ROUNDS] RUN... [-- bench options]
# Bench options by default: --synthetic qwen3.6-27b --ctx 8192 -K 0 -n 4 --reps 1 (one warmup generation, then the
# timed one and the profiled one). Every run shares one NVFP4 tune cache per binary. Logs: $OUT/RUN-ROUND.log; the
# table printed last has one row per run and round (GEMM: every matmul category summed). On the GPU, e.g.
#   scripts/prefill-ab.sh -r 2 base/qwenrt new/qwenrt QRT_BLAS_ALGO=time@new/qwenrt QRT_GDN_VARIANT=2b@new/qwenrt
# On the CPU (no GPU needed to try it):
#   scripts/prefill-ab.sh A/qwenrt B/qwenrt -- --synthetic tiny --device cpu --ctx 128 -K 0 -n 2 --reps 1
set -euo pipefail
rounds=1
if [ "${1:-}" = "-r" ]; then rounds=$2; shift 2; fi
runs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do runs+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
opts=("$@")
[ ${#opts[@]} -eq 0 ] && opts=(--synthetic qwen3.6-27b --ctx 8192 -K 0 -n 4 --reps 1)
if [ ${#runs[@]} -lt 1 ] || ! [[ $rounds =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: scripts/prefill-ab.sh [-r ROUNDS] RUN... [-- bench options]" >&2
    exit 2
fi
bin_of() { echo "${1##*@}"; }
env_of() { if [[ $1 == *@* ]]; then echo "${1%@*}" | tr ',' ' '; fi; }
for r in "${runs[@]}"; do
    [ -x "$(bin_of "$r")" ] || { echo "prefill-ab: $(bin_of "$r") is not an executable qwenrt binary" >&2; exit 2; }
done
OUT=${OUT:-prefill-ab-out}
mkdir -p "$OUT"
# a run as a file name: its binary's folder, then its settings
name() { local b e; b=$(basename "$(dirname "$(bin_of "$1")")"); e=$(env_of "$1" | tr ' =' '_-'); echo "$b${e:+_$e}"; }
for round in $(seq 1 "$rounds"); do
    for r in "${runs[@]}"; do
        b=$(bin_of "$r")
        log="$OUT/$(name "$r")-$round.log"
        # shellcheck disable=SC2046 # the settings split into words on purpose
        env QRT_CACHE_DIR="$OUT/tune-$(basename "$(dirname "$b")")" $(env_of "$r") "$b" bench "${opts[@]}" \
            > "$log" 2>&1 || echo "prefill-ab: $r exited $? (round $round; $log)" >&2
    done
done
# per log: TTFT of the timed rep, then each category's ms in the prefill's breakdown
printf '%-40s %5s %9s %9s %8s %8s %10s %8s  %s\n' run round TTFT_ms GEMM_ms GDN_ms conv_ms attn_ms other_ms tokens
for round in $(seq 1 "$rounds"); do
    for r in "${runs[@]}"; do
        log="$OUT/$(name "$r")-$round.log"
        awk -v run="$(name "$r")" -v round="$round" '
            /rep 1: TTFT/ {
                for (i = 1; i <= NF; i++) { if ($i == "TTFT") ttft = $(i + 1); if ($i == "tokens") tok = $(i + 1) }
            }
            /kernel categories, prefill/ { p = 1; next }
            /kernel categories, decode/ { p = 0 }
            p && / (GEMM|GEMV) / { gemm += $3 }
            p && $1 == "GDN" { gdn = $2 }
            p && $1 == "conv1d" { conv = $2 }
            p && $1 == "attention" { attn = $2 }
            p && $1 == "other" { other = $2 }
            END {
                printf "%-40s %5s %9s %9.1f %8s %8s %10s %8s  %s\n", run, round, ttft, gemm, gdn, conv, attn, other, tok
            }
        ' "$log"
    done
done
