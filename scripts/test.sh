#!/usr/bin/env bash
# Set up a new machine, build, and run the whole test suite (what CI runs).
# Under CI (CI=true) the unit tests also run once under AddressSanitizer + UndefinedBehaviorSanitizer
# first, then each libFuzzer target for NJ_FUZZ_SECONDS (NJ_FUZZ=1 alone), then the thread suites under
# ThreadSanitizer; then the plain -Werror build, its install check, the Python package's pytest suite
# (emulator), and the full ctest suite last, so the run ends with ctest's summary.
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

if [ "${CI:-}" = "true" ] || [ "${NJ_FUZZ:-0}" = "1" ]; then
  # libFuzzer under ASan + UBSan, NJ_FUZZ_SECONDS (default 45) per target, from the committed seeds
  # (copied, so the tree stays clean); any crash fails the run and leaves its input in build-fuzz/.
  echo "== fuzzing (${NJ_FUZZ_SECONDS:-45} s per target)"
  CC=clang cmake -S . -B build-fuzz "${gen[@]}" -DCMAKE_BUILD_TYPE=Debug -DNJ_FUZZ=ON >/dev/null
  targets=(problem_text manifest plan cache_entry archive)
  cmake --build build-fuzz -j "$jobs" --target "${targets[@]/#/fuzz_}"
  for t in "${targets[@]}"; do
    work="build-fuzz/corpus-$t"; mkdir -p "$work"; cp -r tests/fuzz/corpus/"$t"/. "$work"/
    # a frame or entry claiming more than 1 GiB is allocated before being checked: a crash here
    ASAN_OPTIONS=allocator_may_return_null=0:detect_leaks=1 \
      build-fuzz/tests/fuzz/fuzz_"$t" -max_total_time="${NJ_FUZZ_SECONDS:-45}" -malloc_limit_mb=1024 \
      -rss_limit_mb=3072 -print_final_stats=1 -artifact_prefix="build-fuzz/crash-$t-" "$work" \
      >"build-fuzz/fuzz-$t.log" 2>&1 || { tail -40 "build-fuzz/fuzz-$t.log"; exit 1; }
    echo "fuzz_$t: $(grep -E '^Done [0-9]+ runs' "build-fuzz/fuzz-$t.log"), 0 crashes"
  done

  # ThreadSanitizer over the suites that run threads (plans and launches on one context, single-flight
  # compiles, parallel NVRTC, the emulator's blocks, eviction while readers load). test_codegen's one
  # threaded test (concurrent renders) is left out: Lua under TSan took 276 s of its 282 (clean then).
  echo "== thread suites under ThreadSanitizer"
  tsan=(test_context test_cache test_concurrency test_compile test_backend_emu test_serve)
  cmake -S . -B build-tsan "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNJ_TSAN=ON >/dev/null
  cmake --build build-tsan -j "$jobs" --target "${tsan[@]}"
  TSAN_OPTIONS=halt_on_error=1:exitcode=66 \
    ctest --test-dir build-tsan --output-on-failure -j "$jobs" -R "^($(IFS='|'; echo "${tsan[*]}"))\$"
fi

echo "== build (-Werror)"
cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNJ_WERROR=ON >/dev/null
cmake --build build -j "$jobs"
echo "== install into a temporary prefix; consumers via find_package and pkg-config (scripts/check-install.sh)"
bash scripts/check-install.sh build

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
