#!/usr/bin/env bash
# Builds the runtime tests with ThreadSanitizer in build-tsan (or $TSAN_BUILD) and runs
# them. The runtime is where threads meet: load/store workers beside the compute
# thread, disk I/O requests served in parallel, tier accounts shared by all of them.
# Any report fails the run (halt_on_error=1, exit code 66).
#
#   tests/run_tsan.sh                  every test in the runtime test files
#   tests/run_tsan.sh 'PolicyTest*'    a gtest filter
#   TSAN_JOBS=2                        build parallelism (default 2)
#   TIERGEN_CMAKE_ARGS=-DTIERGEN_UNITY=ON  extra configure arguments (as CI gives)
#
# Only the test_runtime*.cpp files are compiled into this binary. OpenMP (libgomp)
# and LibTorch are not built with TSan, so their internal synchronization is invisible
# to it; OMP_NUM_THREADS=1 / MKL_NUM_THREADS=1 keep ATen's intra-op work on the calling
# thread so that reports concern our threads. tests/tsan.supp explains each
# suppression; none matches tiergen code.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="${TSAN_BUILD:-$root/build-tsan}"
jobs="${TSAN_JOBS:-2}"
filter="${1:-*}"

mkdir -p "$build"
start=$(date +%s)
echo "== configuring $build (thread, RelWithDebInfo, test_runtime*.cpp)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" -DTIERGEN_SANITIZE=thread \
  -DTIERGEN_BUILD_TESTS=ON '-DTIERGEN_TEST_GLOB=test_runtime*.cpp' ${TIERGEN_CMAKE_ARGS:-} >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 2; }
echo "== building tiergen_tests (with tiergen and make-tiny-model, which it depends on)"
cmake --build "$build" -j"$jobs" --target tiergen_tests
built=$(date +%s)

export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1 exitcode=66 second_deadlock_stack=1 history_size=4 suppressions=$root/tests/tsan.supp}"
echo "== running tiergen_tests --gtest_filter='$filter' (TSAN_OPTIONS=$TSAN_OPTIONS)"
status=0
"$build/tiergen_tests" --gtest_filter="$filter" --gtest_brief=1 || status=$?
end=$(date +%s)
echo "== run_tsan: build $((built - start)) s, tests $((end - built)) s, exit $status"
exit $status
