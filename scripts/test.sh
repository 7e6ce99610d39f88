#!/usr/bin/env bash
# Set up a new machine, build, and run the whole test suite (what CI runs).
# Under CI (CI=true) the unit tests also run once under AddressSanitizer + UndefinedBehaviorSanitizer
# first; the plain -Werror build, its install check and the full suite run last, so the run ends with
# ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs=$(nproc)
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)

if [ "${CI:-}" = "true" ] || [ "${NJ_SANITIZE:-0}" = "1" ]; then
  echo "== unit tests under ASan + UBSan"
  cmake -S . -B build-asan "${gen[@]}" -DCMAKE_BUILD_TYPE=Debug -DNJ_SANITIZE=ON -DNJ_WERROR=ON >/dev/null
  cmake --build build-asan -j "$jobs"
  # halt_on_error + exitcode make any sanitizer report fail its test program.
  ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0:exitcode=86 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=87 \
    ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE "matrix|gpu"
fi

echo "== build (-Werror) and full test suite"
cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNJ_WERROR=ON >/dev/null
cmake --build build -j "$jobs"
echo "== install into a temporary prefix; consumers via find_package and pkg-config (scripts/check-install.sh)"
bash scripts/check-install.sh build
echo "== full test suite"
ctest --test-dir build --output-on-failure -j "$jobs"
