#!/usr/bin/env bash
# Decode A/B of two or more qwenrt binaries in one call on one machine, as the numbers in docs/benchmarks.md are taken:
# machines differ by a few percent from one device call to the next (the same binary
# has measured 183.6 and 175.0 tok/s in two calls), so only runs of one call compare. Each binary gets its own NVFP4 tune cache, made by one warm-up run
# whose rows are not counted: picks timed on one binary's kernels can be wrong for another's (a base binary
# with picks made by a changed one has measured 5% slow). Then ROUNDS rounds run the binaries in turns, so drift during the
# call falls on all of them alike. Every run's rows go to $OUT/NAME-ROUND.log; the table printed last has tok/s per
# binary and (ctx, K), one column per round, with chain + verify ms per cycle on K > 0 rows.
#   scripts/ab-bench.sh [-r ROUNDS] BIN... [-- bench options]
# BIN: a qwenrt binary, named in the table by its folder (base/qwenrt -> base). Bench options by default:
#   --synthetic qwen3.6-27b --ctx 128 -K 0,6 --sim-al 3.86 -n 64 --reps 2 --no-breakdown
# On the CPU (no GPU needed to try it): scripts/ab-bench.sh -r 1 A/qwenrt B/qwenrt -- --synthetic tiny --device cpu -n 8
set -euo pipefail
rounds=2
if [ "${1:-}" = "-r" ]; then rounds=$2; shift 2; fi
bins=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do bins+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
opts=("$@")
[ ${#opts[@]} -eq 0 ] && opts=(--synthetic qwen3.6-27b --ctx 128 -K 0,6 --sim-al 3.86 -n 64 --reps 2 --no-breakdown)
if [ ${#bins[@]} -lt 1 ] || ! [[ $rounds =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: scripts/ab-bench.sh [-r ROUNDS] BIN... [-- bench options]" >&2
    exit 2
fi
for b in "${bins[@]}"; do
    [ -x "$b" ] || { echo "ab-bench: $b is not an executable qwenrt binary" >&2; exit 2; }
done
OUT=${OUT:-ab-out}
mkdir -p "$OUT"
name() { basename "$(dirname "$1")"; }

run() { # binary label: the bench with the binary's own tune cache; its table rows into $OUT/label.log
    QRT_CACHE_DIR="$OUT/tune-$(name "$1")" "$1" bench "${opts[@]}" > "$OUT/$2.log" 2>&1 ||
        { echo "ab-bench: $1 failed, see $OUT/$2.log" >&2; tail -5 "$OUT/$2.log" >&2; exit 1; }
}
for b in "${bins[@]}"; do
    echo "== warm-up $(name "$b") (makes its tune cache; not counted)"
    run "$b" "$(name "$b")-warm"
done
for r in $(seq 1 "$rounds"); do
    for b in "${bins[@]}"; do echo "== $(name "$b") round $r"; run "$b" "$(name "$b")-$r"; done
done

# rows of the decode table: ctx K TTFT dec_ms tok/s AL att acc chain_ms verify_ms ...; one line per (binary, ctx, K),
# the rounds' logs read in order; K > 0 rows also give chain + verify ms per cycle, where a K=6 change shows which half
echo
printf '%-12s %6s %3s  tok/s by round (K > 0: chain + verify ms per cycle)\n' binary ctx K
for b in "${bins[@]}"; do
    n=$(name "$b")
    logs=()
    for r in $(seq 1 "$rounds"); do logs+=("$OUT/$n-$r.log"); done
    awk -v n="$n" '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 12 {
            key = $1 " " $2
            if (!(key in row)) order[++k] = key
            row[key] = row[key] "  " $5 ($2 > 0 ? " (" $9 " + " $10 ")" : "")
        }
        END {
            for (i = 1; i <= k; i++) {
                split(order[i], f, " ")
                printf "%-12s %6s %3s %s\n", n, f[1], f[2], row[order[i]]
            }
        }' \
        "${logs[@]}"
done
