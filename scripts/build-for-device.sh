#!/usr/bin/env bash
# Builds build-dev/ for a GPU machine that has the CUDA toolkit but none of our Debian packages:
# Lua and xxhash are linked statically into the tool and tests; libcmocka, Lua for libnormjit.so and any
# other shared library they link (libcrypto) are copied next to the build (lib/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-dev -j "$(nproc)"
mkdir -p build-dev/lib
cp -L /usr/lib/x86_64-linux-gnu/libcmocka.so.0 build-dev/lib/
cp -L /usr/lib/x86_64-linux-gnu/liblua5.4.so.0 build-dev/lib/  # libnormjit.so's (the Python package loads it)
# every other shared library the tool, the tests and libnormjit.so need beyond glibc (libcrypto, ...)
for f in build-dev/normjit build-dev/libnormjit.so.0 build-dev/tests/test_gpu_*; do ldd "$f"; done |
  awk '$3 ~ /^\// {print $3}' | sort -u | grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" build-dev/lib/; done
echo "build-dev ready: carry it and run tools/gpu-check build-dev"
