#!/usr/bin/env bash
# Configure-time fmt selection (tools/cmake/fmt_consistency.cmake) against a fake
# LibTorch include folder that holds an fmt of its own (as pip torch wheels do).
# Usage: check_fmt_shadowing.sh CMAKE TIERGEN_ROOT WORKDIR [CMAKE_ARGS...]
#   CMAKE_ARGS: the generator, make program and compiler of the calling build
set -uo pipefail
cmake=${1:?cmake}; root=${2:?tiergen root}; work=${3:?work dir}
shift 3
cmake_args=("$@")
src=$root/tests/cmake/fmt_shadowing
rm -rf "$work"; mkdir -p "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# configure NAME ARGS...: output in $work/NAME.log, status in $?
configure() {
  local name=$1; shift
  "$cmake" -S "$src" -B "$work/$name" "${cmake_args[@]}" -DTIERGEN_ROOT="$root" "$@" > "$work/$name.log" 2>&1
}
build() { "$cmake" --build "$work/$1" >> "$work/$1.log" 2>&1; }
# CMake wraps long messages at a width that depends on the paths in them: compare
# with runs of spaces and newlines folded into one space.
expect_log() {
  tr -s ' \n' '  ' < "$work/$1.log" | grep -q -- "$2" || { fail "$1: no '$2' in its output:"; cat "$work/$1.log"; }
}

# 1. The fix on: configure says what it found and did, the program builds and runs.
if configure fixed -DFAKE_TORCH_FMT=ON -DAPPLY_FIX=ON; then
  expect_log fixed "LibTorch ships fmt 12.0.0 in .*fake_torch/include/fmt; spdlog was built against fmt"
  expect_log fixed "is searched before LibTorch's include folders for every target"
  expect_log fixed "a probe with spdlog and error.h builds and links"
  build fixed || fail "fixed: the probe does not build: $(tail -20 "$work/fixed.log")"
  "$work/fixed/probe" > /dev/null || fail "fixed: the probe does not run"
else
  fail "fixed: configure failed:"; cat "$work/fixed.log"
fi

# 2. The same tree without the fix: the fake fmt shadows spdlog's (the failure the fix prevents).
configure unfixed -DFAKE_TORCH_FMT=ON -DAPPLY_FIX=OFF || fail "unfixed: configure failed"
if build unfixed; then fail "unfixed: the probe built although the fake fmt comes first"; fi
expect_log unfixed "fake LibTorch fmt 12.0.0 was included"

# 3. A wrong TIERGEN_FMT_INCLUDE_DIR: configure stops with an actionable message.
mkdir -p "$work/empty"
if configure wrong_dir -DFAKE_TORCH_FMT=ON -DAPPLY_FIX=ON -DTIERGEN_FMT_INCLUDE_DIR="$work/empty"; then
  fail "wrong_dir: configure succeeded with an fmt folder that holds no fmt"
fi
expect_log wrong_dir "holds no fmt headers"
expect_log wrong_dir "Point -DTIERGEN_FMT_INCLUDE_DIR"

# 4. No fmt in the LibTorch folders: nothing to do, and it says so.
configure no_torch_fmt -DFAKE_TORCH_FMT=OFF -DAPPLY_FIX=ON || fail "no_torch_fmt: configure failed"
expect_log no_torch_fmt "LibTorch's include folders hold no fmt"

[ "$failures" = 0 ] && echo "fmt shadowing: 4 cases passed"
exit $((failures > 0))
