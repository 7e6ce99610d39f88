#!/usr/bin/env bash
# Set up a new machine, build, and run the main job: warm the kernel cache in ./cache for the example
# LLM-serving manifest (compile-only for sm_90 when this machine has no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)"
exec ./build/normjit warmup --cache ./cache "${@:-manifests/llm.txt}"
