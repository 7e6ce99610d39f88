#!/usr/bin/env bash
# Set up a new machine, build, and run the whole test suite (what CI runs).
# Under CI (CI=true) the unit tests also run once under AddressSanitizer + UndefinedBehaviorSanitizer
# first; then the plain -Werror build, the Python package's pytest suite (emulator), and the full ctest suite
# last, so the run ends with ctest's summary.
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

echo "== build (-Werror)"
cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNJ_WERROR=ON >/dev/null
cmake --build build -j "$jobs"

# The Python package, installed the README's way into a virtual environment that sees Debian's torch,
# numpy and pytest, then its tests on the emulator (the installed copy, not the source tree, is imported).
echo "== python package (pip install ./python) and pytest on the emulator"
py=""
for c in python3 /usr/bin/python3; do
  if "$c" -c 'import torch, numpy, pytest' 2>/dev/null; then py=$c; break; fi
done
[ -n "$py" ] || { echo "test: no python3 with torch, numpy and pytest (run scripts/setup.sh)" >&2; exit 1; }
"$py" -m venv --system-site-packages build/pyenv
NORMJIT_CMAKE_BUILD_DIR="$PWD/build" build/pyenv/bin/python -m pip install -q --no-build-isolation ./python
# one kernel cache for the whole session: each distinct kernel compiles once (pytest exits 5 on no tests)
NORMJIT_CACHE_DIR="$PWD/build/pytest-cache" build/pyenv/bin/python -m pytest -p no:cacheprovider -ra python/tests

echo "== full test suite"
ctest --test-dir build --output-on-failure -j "$jobs"
