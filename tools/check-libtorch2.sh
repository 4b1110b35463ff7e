#!/usr/bin/env bash
# Builds tiergen against LibTorch 2.6 (Debian trixie's CPU libtorch-dev) in a trixie
# root and runs the whole ctest suite there, so that both LibTorch lines (1.13 on the
# host, 2.6 here) are tested. Needs root. The root lives in .cache/trixie-cpu (git-
# ignored) and is reused, with its build folder, by later runs.
#
# Usage: tools/check-libtorch2.sh [--prepare-only]
#   --prepare-only  make the root and install its packages, then stop (no build)
# Environment: TIERGEN_TRIXIE_CPU_ROOT (default .cache/trixie-cpu),
#   TIERGEN_DEBIAN_MIRROR (default: this machine's apt archive),
#   TIERGEN_TRIXIE_ASAN=1 (the build and run of tests/run_asan.sh, as CI runs it),
#   TIERGEN_CMAKE_ARGS (extra configure arguments, e.g. -DTIERGEN_UNITY=ON).
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
# Lean build: no fuzzers (clang) and no benchmarks; the test suite is complete. With
# TIERGEN_TRIXIE_ASAN=1 the build and the run are the sanitized ones of tests/run_asan.sh
# (one compute thread per shard, as there).
if [ "${TIERGEN_TRIXIE_ASAN:-0}" = 1 ]; then
  source "$repo/tests/asan_settings.sh"
  build_type=("${asan_cmake_args[@]}")
  test_env=("ASAN_OPTIONS=$asan_options" "UBSAN_OPTIONS=$ubsan_options" OMP_NUM_THREADS=1)
  gtest_filter=$asan_gtest_filter
else
  build_type=(-DCMAKE_BUILD_TYPE=Release)
  test_env=()
  gtest_filter='*'
fi
# Called as `build_and_test || status=$?`, where set -e does not apply inside: each
# step returns on failure itself, so that a failing step is never hidden by the next.
build_and_test() {
  # shellcheck disable=SC2086  # TIERGEN_CMAKE_ARGS holds several words
  trixie_run "$root" cmake -S /src/tiergen -B /build -G Ninja "${build_type[@]}" \
    -DTIERGEN_BUILD_FUZZERS=OFF -DTIERGEN_BUILD_BENCHES=OFF ${TIERGEN_CMAKE_ARGS:-} >/dev/null || return
  trixie_time build trixie_run "$root" cmake --build /build -j"$(nproc)" || return
  # The GoogleTest suite as one process per core, then the script tests (as run-tests.sh).
  trixie_time gtest trixie_run "$root" env "${test_env[@]}" SHARD_LOG_DIR=/build GTEST_SUITE_FILTER="$gtest_filter" \
    bash -c 'cd /build && bash /src/tiergen/tests/run_gtest_shards.sh /build/tiergen_tests "$GTEST_SUITE_FILTER"' || return
  trixie_time ctest trixie_run "$root" ctest --test-dir /build --output-on-failure -j"$(nproc)" --timeout 300 -LE 'gtest|isa_levels'
}
status=0
build_and_test || status=$?
echo "check-libtorch2: LibTorch $(trixie_run "$root" dpkg-query -W -f='${Version}' libtorch-dev), total $((SECONDS - start))s"
cat "$TRIXIE_TIMINGS"
exit $status
