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
#
# The suite runs as ASAN_JOBS GoogleTest shards in parallel, each one process, rather
# than one process per test under ctest: a sanitized process that loads LibTorch
# takes about 1.4 s to start and exit, which for 300+ tests was most of the run
# (295 s under ctest, 81 s as two shards, on 2 cores).
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

mkdir -p "$build"
start=$(date +%s)
echo "== configuring $build (address,undefined, RelWithDebInfo)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" -DTIERGEN_SANITIZE=address,undefined \
  -DTIERGEN_BUILD_TESTS=ON >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 2; }
echo "== building tiergen_tests, tiergen, make-tiny-model"
cmake --build "$build" -j"$(nproc)" --target tiergen_tests tiergen make-tiny-model
built=$(date +%s)

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=0:check_initialization_order=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
# The shards run side by side, one per core: one compute thread each keeps them from
# oversubscribing the cores (the plain ctest run covers the multi-threaded kernels).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

echo "== running tests (ASAN_OPTIONS=$ASAN_OPTIONS UBSAN_OPTIONS=$UBSAN_OPTIONS)"
status=0
pids=()
for ((shard = 0; shard < jobs; shard++)); do
  GTEST_TOTAL_SHARDS=$jobs GTEST_SHARD_INDEX=$shard \
    "$build/tiergen_tests" --gtest_filter="${filter:-*}" --gtest_brief=1 >"$build/shard-$shard.log" 2>&1 &
  pids+=($!)
done
for ((shard = 0; shard < jobs; shard++)); do
  shard_status=0
  wait "${pids[$shard]}" || shard_status=$?
  echo "-- shard $((shard + 1))/$jobs (exit $shard_status): $(grep -E '^\[==========\]' "$build/shard-$shard.log" | tail -n 1)"
  if [ "$shard_status" != 0 ]; then
    status=$shard_status
    echo "---- $build/shard-$shard.log (last 200 lines):"
    tail -n 200 "$build/shard-$shard.log"
  fi
done
end=$(date +%s)
echo "== run_asan: build $((built - start)) s, tests $((end - built)) s, exit $status"
exit $status
