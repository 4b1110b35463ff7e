#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (GoogleTest via
# ctest). With TIERGEN_FULL_CHECKS=1 (as CI sets) it then runs the runtime tests under
# ThreadSanitizer, every fuzz target for a bounded time, and the whole suite under
# AddressSanitizer + UndefinedBehaviorSanitizer (scripts in tests/), and builds and tests
# the project against LibTorch 2.6 in a Debian trixie root (tools/check-libtorch2.sh;
# needs root), so both LibTorch lines are tested.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/tools/install-deps.sh"
bash "$root/tools/build.sh"
build=${TIERGEN_BUILD:-$root/build}
# The tokenizer reference tests must not skip where CI has node and the npm registry.
export TIERGEN_REQUIRE_REFERENCE=${TIERGEN_REQUIRE_REFERENCE:-${TIERGEN_FULL_CHECKS:-0}}
ctest --test-dir "$build" --output-on-failure -j2 --timeout 900
if [ "${TIERGEN_FULL_CHECKS:-0}" = 1 ]; then
  bash "$root/tests/run_tsan.sh"
  FUZZ_SECONDS=${FUZZ_SECONDS:-45} bash "$root/tests/fuzz/run_fuzzers.sh"
  bash "$root/tests/run_asan.sh"
  bash "$root/tools/check-libtorch2.sh"
fi
