#!/usr/bin/env bash
# Installs a built tree into a temporary prefix and uses it the way a project outside this tree would:
#   bash scripts/check-install.sh [BUILD_DIR]        (default: build; scripts/test.sh runs it in CI)
# 1. `cmake --install BUILD --prefix TMP`, then the prefix is moved: nothing in it may name where it was
#    installed, the source tree or the build tree; the expected files must be there.
# 2. The installed libnormjit.so exports only the header's NJ_API functions, has the ABI soname and no
#    run path (cmake/check_exports.cmake).
# 3. With the source and build trees hidden under an empty mount (a private mount namespace), the
#    consumer example installed under share/doc/normjit/examples/consumer is configured twice, with
#    find_package(normjit) and with pkg-config, built against the shared and the static library, and
#    run (a LayerNorm forward pass on the emulator backend checked against the host), and the installed
#    `normjit` command checks a problem on the emulator and compiles one with NVRTC (compile-only).
set -euo pipefail

# Step 3, run inside the private mount namespace: PREFIX LIBDIR WORK
use_prefix() {
  local P=$1 libdir=$2 work=$3 gen=()
  if [ ! -d "$P" ] || [ -z "$libdir" ] || [ ! -d "$work" ]; then
    echo "check-install: use_prefix '$*'" >&2
    return 1
  fi
  command -v ninja >/dev/null && gen=(-G Ninja)
  export NORMJIT_CACHE_DIR=$work/cache
  unset NORMJIT_TEMPLATE_DIR NORMJIT_BACKEND
  echo '#include <normjit.h>' | c++ -std=c++11 -Wall -Wextra -Werror -fsyntax-only -I"$P/include" -x c++ -
  printf '#define NJ_OPERATOR_API\n#include <normjit_ops.h>\n' |
    c++ -std=c++11 -Wall -Wextra -Werror -fsyntax-only -I"$P/include" -x c++ -
  local how
  for how in find_package pkg-config; do
    local b=$work/consumer-$how
    local args=(-DCMAKE_PREFIX_PATH="$P")
    [ "$how" = pkg-config ] && args=(-DNJ_USE_PKG_CONFIG=ON)
    PKG_CONFIG_PATH=$P/$libdir/pkgconfig cmake -S "$P/share/doc/normjit/examples/consumer" -B "$b" "${gen[@]}" \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" "${args[@]}" >"$work/configure-$how.log" \
      || { cat "$work/configure-$how.log"; return 1; }
    cmake --build "$b" >"$work/build-$how.log" || { cat "$work/build-$how.log"; return 1; }
    echo "-- $how: $(readelf -d "$b/consumer" | grep -o 'libnormjit[^]]*') and libnormjit.a"
    # A cache root each, so that every run compiles its kernel with the host compiler.
    NORMJIT_CACHE_DIR=$work/cache-$how-shared "$b/consumer"
    NORMJIT_CACHE_DIR=$work/cache-$how-static "$b/consumer_static"
  done
  # The README's two pkg-config commands, as written there (app.c being the consumer, which also needs -lm).
  local app=$P/share/doc/normjit/examples/consumer/consumer.c
  export PKG_CONFIG_PATH=$P/$libdir/pkgconfig
  # shellcheck disable=SC2046
  cc "$app" $(pkg-config --cflags --libs normjit) -Wl,-rpath,$(pkg-config --variable=libdir normjit) -lm -o "$work/app"
  # shellcheck disable=SC2046
  cc "$app" $(pkg-config --cflags normjit) $(pkg-config --variable=libdir normjit)/libnormjit.a \
    $(pkg-config --static --libs-only-l normjit | sed 's/-lnormjit//') -o "$work/app_static"
  unset PKG_CONFIG_PATH
  readelf -d "$work/app" | grep -q 'NEEDED.*libnormjit\.so\.' || { echo "check-install: app lacks libnormjit.so" >&2; return 1; }
  for f in "$work/app_static" "$work/consumer-find_package/consumer_static" "$work/consumer-pkg-config/consumer_static"; do
    ! readelf -d "$f" | grep 'NEEDED.*libnormjit' || { echo "check-install: $f needs libnormjit.so" >&2; return 1; }
  done
  echo "-- the README's pkg-config commands (shared, static):"
  NORMJIT_CACHE_DIR=$work/cache-app "$work/app"
  NORMJIT_CACHE_DIR=$work/cache-app-static "$work/app_static"
  "$P/bin/normjit" check --backend emulator --pass fwd,bwd 'layernorm f32 *x300 flags=scale,bias'
  printf 'rmsnorm f16 *x4096 flags=scale\n' >"$work/one.txt"
  "$P/bin/normjit" warmup --arch sm_90 --passes fwd --quiet "$work/one.txt"
  echo "-- installed normjit warmup compiled for sm_90 with NVRTC: $("$P/bin/normjit" cache ls | grep -c sm_90) cache entries"
}
if [ "${1:-}" = "--use-prefix" ]; then
  shift
  use_prefix "$@"
  exit
fi

cd "$(dirname "$0")/.."
src=$PWD
build=$(cd "${1:-build}" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/normjit-install-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
case "$tmp/" in "$src/"* | "$build/"*) echo "check-install: TMPDIR is inside the tree ($tmp)" >&2; exit 1 ;; esac
fail() { echo "check-install: $*" >&2; exit 1; }

version=$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$build/CMakeCache.txt")
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$build/CMakeCache.txt")
if [ -z "$version" ] || [ -z "$libdir" ]; then fail "no version or libdir in $build/CMakeCache.txt"; fi
major=${version%%.*}

cmake --install "$build" --prefix "$tmp/staged" >"$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }
mv "$tmp/staged" "$tmp/prefix"
P=$tmp/prefix
for f in include/normjit.h include/normjit_ops.h bin/normjit "$libdir/libnormjit.so" "$libdir/libnormjit.so.$major" \
  "$libdir/libnormjit.so.$version" "$libdir/libnormjit.a" "$libdir/pkgconfig/normjit.pc" \
  "$libdir/cmake/normjit/normjitConfig.cmake" "$libdir/cmake/normjit/normjitConfigVersion.cmake" \
  "$libdir/cmake/normjit/normjitTargets.cmake" share/doc/normjit/examples/manifests/llm.txt \
  share/doc/normjit/examples/consumer/consumer.c share/doc/normjit/examples/consumer/CMakeLists.txt; do
  [ -e "$P/$f" ] || fail "$f was not installed"
done
[ "$(readlink "$P/$libdir/libnormjit.so.$major")" = "libnormjit.so.$version" ] || fail "libnormjit.so.$major link"
refs=$(grep -rIl -e "$src" -e "$build" -e "$tmp/staged" "$P" || true)
[ -z "$refs" ] || fail "installed text files name the source, build or install path: $refs"
for f in "$P/bin/normjit" "$P/$libdir/libnormjit.so.$version"; do
  ! readelf -d "$f" | grep -E '\((RPATH|RUNPATH)\)' || fail "$f carries a run path"
done
cmake -DLIB="$P/$libdir/libnormjit.so.$version" -DHEADER="$P/include/normjit.h" -DSONAME="libnormjit.so.$major" \
  -DNM=nm -DREADELF=readelf -DNO_RUNPATH=ON -DOPS_HEADER="$P/include/normjit_ops.h" -P "$src/cmake/check_exports.cmake"
echo "-- installed $(find "$P" -type f | wc -l) files, $(du -sh "$P" | cut -f1); moved prefix, no paths back"

# Hide the source tree (and the build tree, when outside it) while the prefix is used.
cp "$0" "$tmp/check-install.sh"
hidden=("$src")
case "$build/" in "$src/"*) ;; *) hidden+=("$build") ;; esac
if unshare -rm true 2>/dev/null; then
  # shellcheck disable=SC2016
  unshare -rm bash -c 'for d in "${@:5}"; do mount -t tmpfs none "$d"; done
    [ -z "$(ls -A "$5")" ] || { echo "check-install: $5 not hidden" >&2; exit 1; }
    exec bash "$1" --use-prefix "$2" "$3" "$4"' _ "$tmp/check-install.sh" "$P" "$libdir" "$tmp" "${hidden[@]}"
  echo "-- consumers and the normjit command ran with ${hidden[*]} hidden"
else
  echo "-- no private mount namespace here (unshare -rm failed): the consumers ran with the source tree present"
  bash "$tmp/check-install.sh" --use-prefix "$P" "$libdir" "$tmp"
fi
