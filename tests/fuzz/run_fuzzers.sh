#!/usr/bin/env bash
# Builds the libFuzzer targets with clang in build-fuzz (or $FUZZ_BUILD) and runs each
# for a bounded time from its seed corpus under tests/fuzz/corpus/<target>.
#
#   tests/fuzz/run_fuzzers.sh [target ...]     (default: every tests/fuzz/fuzz_*.cpp)
#   FUZZ_SECONDS=60   seconds per target (libFuzzer -max_total_time)
#   FUZZ_JOBS=1       parallel fuzzing processes per target (-fork)
#   FUZZ_BUILD=build-fuzz
#
# New inputs that libFuzzer finds go to $FUZZ_BUILD/corpus/<target> (the seed
# directories in the tree are only read). Any crash, leak, timeout, out-of-memory or
# sanitizer report makes the script exit non-zero; the reproducer is kept as
# $FUZZ_BUILD/artifacts/<target>/crash-* (rerun it: $FUZZ_BUILD/<target> FILE).
# One summary line per target is printed at the end.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build="${FUZZ_BUILD:-$root/build-fuzz}"
seconds="${FUZZ_SECONDS:-60}"
jobs="${FUZZ_JOBS:-1}"
cxx="${FUZZ_CXX:-clang++}"

if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for f in "$here"/fuzz_*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi

mkdir -p "$build"
echo "== configuring and building ${targets[*]} in $build (clang: $("$cxx" --version | head -1))"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" \
  -DTIERGEN_BUILD_FUZZERS=ON -DTIERGEN_BUILD_TESTS=OFF -DTIERGEN_ENABLE_CUDA=OFF >"$build/configure.log" 2>&1 \
  || { cat "$build/configure.log"; echo "run_fuzzers: configure failed" >&2; exit 2; }
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" || { echo "run_fuzzers: build failed" >&2; exit 2; }

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

status=0
summary=()
for t in "${targets[@]}"; do
  seeds="$here/corpus/${t#fuzz_}"
  work="$build/corpus/$t"
  artifacts="$build/artifacts/$t"
  log="$build/$t.log"
  mkdir -p "$work" "$artifacts"
  [ -d "$seeds" ] || { echo "run_fuzzers: no seed corpus $seeds" >&2; status=1; continue; }
  echo "== $t: ${seconds}s from $seeds (log: $log)"
  fork=()
  [ "$jobs" -gt 1 ] && fork=(-fork="$jobs" -ignore_crashes=0)
  start=$(date +%s)
  "$build/$t" "${fork[@]}" -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=25 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$work" "$seeds" >"$log" 2>&1
  rc=$?
  elapsed=$(( $(date +%s) - start ))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
  # Fork mode (FUZZ_JOBS > 1) prints no final stats: its progress lines start with the
  # runs so far ("#464721: cov: ...").
  [ -n "$execs" ] || execs=$(grep -o '#[0-9]*: cov:' "$log" | tail -1 | grep -o '[0-9]*')
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
  crashes=$(find "$artifacts" -type f | wc -l)
  if [ $rc -ne 0 ] || [ "$crashes" -gt 0 ] || grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$log"; then
    status=1
    result="FAIL (exit $rc, $crashes reproducer(s) in $artifacts)"
    echo "---- $t: last lines of $log"
    grep -nE 'ERROR|runtime error|SUMMARY|contract broken|==[0-9]+==' "$log" | head -20
    tail -40 "$log"
  else
    result="ok"
  fi
  summary+=("$(printf '%-18s %-5s %6ss  %10s execs  cov %s  %s' "$t" "$([ "$result" = ok ] && echo PASS || echo FAIL)" \
    "$elapsed" "${execs:-?}" "${cov:-?}" "$result")")
done

echo "== fuzz summary (${seconds}s per target)"
printf '%s\n' "${summary[@]}"
exit $status
