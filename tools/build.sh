#!/usr/bin/env bash
# Configures and builds tiergen into ${TIERGEN_BUILD:-build} (Release).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TIERGEN_BUILD:-$root/build}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
