#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (GoogleTest via
# ctest). With TIERGEN_FULL_CHECKS=1 (as CI sets) it also runs the sanitizer and
# fuzzing scripts under tests/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/tools/install-deps.sh"
bash "$root/tools/build.sh"
build=${TIERGEN_BUILD:-$root/build}
ctest --test-dir "$build" --output-on-failure -j2 --timeout 900
