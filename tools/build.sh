#!/usr/bin/env bash
# Configures and builds tiergen into ${TIERGEN_BUILD:-build} (Release). Arguments, and
# TIERGEN_CMAKE_ARGS (e.g. -DTIERGEN_UNITY=ON), go to the configure step;
# TIERGEN_TARGETS (e.g. "tiergen make-tiny-model") builds only those targets.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TIERGEN_BUILD:-$root/build}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${TIERGEN_CMAKE_ARGS:-} "$@" >/dev/null
targets=()
for t in ${TIERGEN_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j"$(nproc)" ${targets[@]+"${targets[@]}"}
