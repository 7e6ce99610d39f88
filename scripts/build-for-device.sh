#!/usr/bin/env bash
# Builds build-dev/ for a GPU machine that has the CUDA toolkit but none of our Debian packages:
# Lua and xxhash are linked statically into the tool and tests; libcmocka, and Lua for libnormjit.so, are
# copied next to the build (lib/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-dev -j "$(nproc)"
mkdir -p build-dev/lib
cp -L /usr/lib/x86_64-linux-gnu/libcmocka.so.0 build-dev/lib/
cp -L /usr/lib/x86_64-linux-gnu/liblua5.4.so.0 build-dev/lib/  # libnormjit.so's (the Python package loads it)
echo "build-dev ready: carry it and run tools/gpu-check build-dev"
