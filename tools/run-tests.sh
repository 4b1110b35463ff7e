#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite. With
# TIERGEN_FULL_CHECKS=1 (as CI sets) it then runs the runtime tests under
# ThreadSanitizer (tests/run_tsan.sh) and every fuzz target for a bounded time
# (tests/fuzz/run_fuzzers.sh), and builds the project against LibTorch 2.6 in a Debian
# trixie root with AddressSanitizer + UndefinedBehaviorSanitizer and runs the whole
# suite there (tools/check-libtorch2.sh; needs root): both LibTorch lines are tested,
# and the sanitized run costs one build instead of two. (tests/run_asan.sh is the same
# sanitized run against the host's LibTorch.)
#
# The GoogleTest suite runs as one process per core (tests/run_gtest_shards.sh; each
# test alone: `ctest --test-dir build -R NAME`), then ctest runs the script tests
# (`ctest -LE gtest`). With TIERGEN_FULL_CHECKS=1 every build compiles the library as
# unity batches (TIERGEN_UNITY), which costs incremental rebuilds and saves whole ones.
# Each stage is announced with the time since the start and ends with its duration,
# so a run cut short by an outer time limit shows where the time went. A stage that
# hangs fails at its own limit (TIERGEN_STAGE_LIMIT_MINUTES, default 30) instead of
# taking the whole run with it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TIERGEN_BUILD:-$root/build}
stage_limit=$((${TIERGEN_STAGE_LIMIT_MINUTES:-30} * 60))
durations=()

# stage NAME COMMAND...: runs COMMAND (and what it starts) under the stage limit.
stage() {
  run_stage "$1" timeout --kill-after=30 "$stage_limit" "${@:2}"
}

# run_stage NAME COMMAND...: announces, times and checks one stage.
run_stage() {
  local name=$1
  shift
  local began=$SECONDS status=0
  echo "== [$(date -u +%H:%M:%S), +$((SECONDS / 60)) min] $name"
  "$@" || status=$?
  durations+=("$name $((SECONDS - began)) s")
  echo "== $name: $((SECONDS - began)) s, exit $status"
  if [ "$status" = 124 ] || [ "$status" = 137 ]; then
    echo "== $name did not finish within ${stage_limit} s (TIERGEN_STAGE_LIMIT_MINUTES)" >&2
  fi
  if [ "$status" != 0 ]; then
    summary
    exit "$status"
  fi
}

summary() {
  echo "== stages: $(IFS=';'; echo "${durations[*]}"); total $SECONDS s"
}

if [ "${TIERGEN_FULL_CHECKS:-0}" = 1 ]; then
  export TIERGEN_CMAKE_ARGS="-DTIERGEN_UNITY=ON ${TIERGEN_CMAKE_ARGS:-}"
fi
# Not under a time limit: it may ask for a sudo password.
run_stage install-deps bash "$root/tools/install-deps.sh"
stage build bash "$root/tools/build.sh"
# The tokenizer reference tests must not skip where CI has node and the npm registry.
export TIERGEN_REQUIRE_REFERENCE=${TIERGEN_REQUIRE_REFERENCE:-${TIERGEN_FULL_CHECKS:-0}}
# From the build folder, where ctest runs them too.
stage gtest bash -c "cd '$build' && bash '$root/tests/run_gtest_shards.sh' '$build/tiergen_tests'"
stage ctest ctest --test-dir "$build" --output-on-failure -j2 --timeout 300 -LE gtest
if [ "${TIERGEN_FULL_CHECKS:-0}" = 1 ]; then
  stage tsan bash "$root/tests/run_tsan.sh"
  # Two libFuzzer workers per target on the two cores CI has: as many runs as one worker
  # for 60 s, in half the time.
  stage fuzz env FUZZ_SECONDS="${FUZZ_SECONDS:-30}" FUZZ_JOBS="${FUZZ_JOBS:-2}" bash "$root/tests/fuzz/run_fuzzers.sh"
  # The longest stage (a root to make, a sanitized build of everything, the suite under
  # ASan): its own limit, so that a slow machine does not cut it a few minutes short.
  stage_limit=$((${TIERGEN_ASAN_STAGE_LIMIT_MINUTES:-40} * 60))
  stage libtorch2-asan env TIERGEN_TRIXIE_ASAN=1 bash "$root/tools/check-libtorch2.sh"
fi
summary
