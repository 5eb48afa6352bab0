#!/usr/bin/env bash
# Install what zero needs from Debian (only what is missing) and build it into build/.
# Idempotent and quick when everything is present. Run as root on Debian 12 (or with sudo).
#   ZERO_BUILD_DIR   build directory (default: build)
#   ZERO_CMAKE_ARGS  extra CMake arguments
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake pkg-config python3 python3-venv clang clang-format
          openmpi-bin libopenmpi-dev libopenblas-dev libdnnl-dev libcjson-dev liburing-dev libcairo2-dev
          libpcre2-dev iproute2)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

build=${ZERO_BUILD_DIR:-build}
werror=OFF; [ "${CI:-}" = "true" ] && werror=ON
# shellcheck disable=SC2086
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DZERO_WERROR=$werror ${ZERO_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$(nproc)"
echo "setup: built $build/zero"
