#!/usr/bin/env bash
# Builds tiergen against LibTorch 2.6 (Debian trixie's CPU libtorch-dev) in a trixie
# root and runs the whole ctest suite there, so that both LibTorch lines (1.13 on the
# host, 2.6 here) are tested. Needs root. The root lives in .cache/trixie-cpu (git-
# ignored) and is reused, with its build folder, by later runs.
#
# Usage: tools/check-libtorch2.sh [--prepare-only]
#   --prepare-only  make the root and install its packages, then stop (no build)
# Environment: TIERGEN_TRIXIE_CPU_ROOT (default .cache/trixie-cpu),
#   TIERGEN_DEBIAN_MIRROR (default: this machine's apt archive).
# Inside the root the tokenizer reference tests skip (no node there).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
source "$repo/tools/trixie-root.sh"
trixie_need_root "$0"
root=${TIERGEN_TRIXIE_CPU_ROOT:-$repo/.cache/trixie-cpu}
prepare_only=0
[ "${1:-}" = --prepare-only ] && prepare_only=1

packages=(g++ cmake ninja-build libtorch-dev libglpk-dev libcli11-dev libspdlog-dev libgtest-dev
  nlohmann-json3-dev libpcre2-dev libgloo-dev python3
  # LibTorch's BLAS through libblas.so.3; without it, netlib's reference sgemm.
  libopenblas0-openmp)

export TRIXIE_TIMINGS
TRIXIE_TIMINGS=$(mktemp)
trap 'trixie_unmount "$root"; rm -f "$TRIXIE_TIMINGS"' EXIT
start=$SECONDS

trixie_time debootstrap trixie_make_root "$root" main
trixie_mount "$root"
trixie_time apt trixie_install "$root" "${packages[@]}"
if [ "$prepare_only" = 1 ]; then cat "$TRIXIE_TIMINGS"; exit 0; fi

trixie_copy_sources "$repo" "$root" src/tiergen
# Lean build: no fuzzers (clang) and no benchmarks; the test suite is complete.
build_and_test() {
  trixie_run "$root" cmake -S /src/tiergen -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DTIERGEN_BUILD_FUZZERS=OFF -DTIERGEN_BUILD_BENCHES=OFF >/dev/null
  trixie_time build trixie_run "$root" cmake --build /build -j"$(nproc)"
  trixie_time ctest trixie_run "$root" ctest --test-dir /build --output-on-failure -j"$(nproc)" --timeout 900
}
status=0
build_and_test || status=$?
echo "check-libtorch2: LibTorch $(trixie_run "$root" dpkg-query -W -f='${Version}' libtorch-dev), total $((SECONDS - start))s"
cat "$TRIXIE_TIMINGS"
exit $status
