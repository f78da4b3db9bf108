#!/usr/bin/env bash
# Installs the Debian packages pagellm needs (when missing) and builds it into build/.
# Usage: bash scripts/setup.sh [--asan]   (--asan also builds build-asan/ with ASan+UBSan)
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS="build-essential cmake ninja-build pkg-config libpcre2-dev libxxhash-dev libjansson-dev
      libcmocka-dev libmicrohttpd-dev libcurl4-openssl-dev curl python3
      clang libclang-rt-14-dev
      gnuplot-nox
      chromium
      openmpi-bin libopenmpi-dev
      qemu-user"  # clang + its runtimes: tests/fuzz (libFuzzer); gnuplot:
                 # bench/plot.sh only; chromium: the web page's browser test
                 # (tests/e2e/test_webui_browser.sh); Open MPI: tensor parallelism (src/dist);
                 # qemu-user: the tests on an emulated AVX2-only CPU (scripts/emu_cpu.sh)
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing$missing" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

# The end-to-end tests drive the server with the official OpenAI Node client, and the web page
# with puppeteer-core and the chromium above (the tests run `npm ci` in tests/e2e; puppeteer
# must never download a browser of its own).
export PUPPETEER_SKIP_DOWNLOAD=1
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "setup: installing nodejs npm" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
fi

jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
if [ "${1:-}" = "--asan" ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPL_SANITIZE=ON \
        -DCMAKE_C_FLAGS_DEBUG="-O1 -g1" >/dev/null
  cmake --build build-asan -j "$jobs"
fi
