#!/usr/bin/env bash
# Installs what a new machine lacks (Debian packages) and checks for the CUDA toolkit.
# Idempotent: packages already present are not reinstalled, apt is only touched when needed.
set -euo pipefail
pkgs=(cmake make gcc g++ pkg-config liblua5.4-dev libcmocka-dev libxxhash-dev libssl-dev libhiredis-dev
      redis-server clang libclang-rt-14-dev
      python3 python3-venv python3-pip python3-setuptools python3-numpy python3-torch python3-pytest)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
cuda="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -f "$cuda/include/nvrtc.h" ] || ! ls "$cuda"/lib64/libnvrtc.so* >/dev/null 2>&1; then
  echo "setup: the CUDA toolkit (NVRTC) was not found at $cuda." >&2
  echo "       Install it there or set CUDA_HOME to its location." >&2
  exit 1
fi
echo "setup: ok (CUDA toolkit at $cuda)"
