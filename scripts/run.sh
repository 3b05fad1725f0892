#!/usr/bin/env bash
# Build qwenrt and run the main job: the decode benchmark (qwenrt bench). Without -m it runs the built-in
# synthetic model (random weights made in memory): the tiny shape on the CPU, the Qwen3.6-27B shape (MTP head,
# simulated acceptance with --sim-al) on a GPU, twice: first in the layout published NVFP4 checkpoints use
# (--format stored: GDN projections and lm_head BF16; what users run), then all-NVFP4. Extra arguments go to
# qwenrt bench instead of those defaults:
#   scripts/run.sh [-m DIR [--mtp DIR]] [--ctx 128,8192] [-K 0,6] [--sim-al 3.86] [--parity] [--json FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
# AUTO: the CUDA backend when nvcc is found (named explicitly: scripts/test.sh configures this tree with OFF)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DQRT_CUDA=AUTO >/dev/null
cmake --build build -j"$(nproc)" --target qwenrt_cli
args=("$@")
# the built-in default: a short run of the synthetic model, with simulated acceptance for the K=6 row; on a GPU
# also a long prompt (8192 tokens: the prefill on the tensor cores, decode over a long KV cache)
if [[ $# -eq 0 ]]; then
    ctx=128
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then ctx=128,8192; fi
    defaults=(--ctx "$ctx" -K 0,6 -n 32 --reps 3 --sim-al 3.86 --parity)
    ./build/bin/qwenrt bench --format stored "${defaults[@]}"
    exec ./build/bin/qwenrt bench --format nvfp4 "${defaults[@]}"
fi
exec ./build/bin/qwenrt bench "${args[@]}"
