#!/usr/bin/env bash
# Builds tiergen, make-tiny-model and the test binary with AddressSanitizer +
# UndefinedBehaviorSanitizer in build-asan (or $ASAN_BUILD) and runs the test suite
# there. Any sanitizer report fails the run: UBSan halts on the first error, ASan
# aborts on any memory error. The CLI tests spawn the sanitized tiergen too, which
# inherits the options below.
#
#   tests/run_asan.sh                 whole suite
#   tests/run_asan.sh 'Cli*:Io*'      a gtest filter
#   ASAN_JOBS=2                       parallel shards (default: nproc)
#   TIERGEN_CMAKE_ARGS=-DTIERGEN_UNITY=ON  extra configure arguments (as CI gives)
#
# The suite runs as ASAN_JOBS GoogleTest shards in parallel (tests/run_gtest_shards.sh),
# each one process, rather than one process per test under ctest: a sanitized process
# that loads LibTorch takes about 1.4 s to start and exit, which for 300+ tests was
# most of the run (295 s under ctest, 81 s as two shards, on 2 cores).
#
# Leak detection is on (detect_leaks=1). Evidence: a program built with
# -fsanitize=address,undefined that loads Debian's LibTorch 1.13 and runs an ATen
# matmul exits with no LeakSanitizer report, so LibTorch's process-lifetime state is
# not reported as leaks here. If a report names only LibTorch/OpenMP frames, set
# ASAN_OPTIONS=detect_leaks=0 and record why.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="${ASAN_BUILD:-$root/build-asan}"
jobs="${ASAN_JOBS:-$(nproc)}"
filter="${1:-}"
source "$root/tests/asan_settings.sh"

mkdir -p "$build"
start=$(date +%s)
echo "== configuring $build (address,undefined, RelWithDebInfo)"
cmake -S "$root" -B "$build" -G Ninja "${asan_cmake_args[@]}" -DTIERGEN_BUILD_TESTS=ON ${TIERGEN_CMAKE_ARGS:-} >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 2; }
echo "== building tiergen_tests, tiergen, make-tiny-model"
cmake --build "$build" -j"$(nproc)" --target tiergen_tests tiergen make-tiny-model
built=$(date +%s)

export ASAN_OPTIONS="${ASAN_OPTIONS:-$asan_options}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-$ubsan_options}"
# The shards run side by side, one per core: one compute thread each keeps them from
# oversubscribing the cores (the plain run covers the multi-threaded kernels).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

echo "== running tests (ASAN_OPTIONS=$ASAN_OPTIONS UBSAN_OPTIONS=$UBSAN_OPTIONS)"
status=0
SHARD_JOBS=$jobs bash "$root/tests/run_gtest_shards.sh" "$build/tiergen_tests" "${filter:-$asan_gtest_filter}" || status=$?
end=$(date +%s)
echo "== run_asan: build $((built - start)) s, tests $((end - built)) s, exit $status"
exit $status
