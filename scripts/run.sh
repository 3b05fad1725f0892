#!/usr/bin/env bash
# Build qwenrt and run the main job: greedy decoding on a checkpoint folder (default: the committed
# fixture model), printing the generated ids and the decode speed.
#   scripts/run.sh [-m DIR] [other qwenrt generate options]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target qwenrt_cli
args=("$@")
if [[ " ${args[*]-} " != *" -m "* ]]; then args=(-m tests/data/tiny-mm "${args[@]}"); fi
exec ./build/bin/qwenrt generate --ids 1,2,3,4,5,6,7,8 -n 64 --no-eos "${args[@]}"
