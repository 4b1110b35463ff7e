#!/usr/bin/env bash
# Runs one benchmark suite (bench/suites/NAME.sh) through `tiergen bench` and collects
# the JSON records, logs, a CSV and a markdown table in one output directory.
#
#   bench/run_suite.sh NAME|FILE [-o OUTDIR] [-r REPS] [--build DIR] [--only CASE] [--dry-run] [-- EXTRA...]
#
# A suite file sets SUITE_DESC, COMMON (bench flags shared by every case) and CASES, an
# array of "name|flags". EXTRA flags go to every case (e.g. -- --device cuda
# --offload-dir /nvme/tiergen). Environment: TIERGEN (the binary; default BUILD/tiergen),
# and any variable a suite's flags mention (cpu.sh uses $TINY_LLAMA).
# Output: OUTDIR/<case>.json, <case>.log, commands.txt, env.txt, summary.csv, summary.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
[ $# -ge 1 ] || usage
case $1 in -h|--help) usage 0 ;; esac
suite=$1; shift
out="" reps=3 build="$root/build" only="" dry=0 extra=()
while [ $# -gt 0 ]; do
  case $1 in
    -o|--out) out=$2; shift 2 ;;
    -r|--repetitions) reps=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    -h|--help) usage 0 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "run_suite.sh: unknown argument '$1'" >&2; usage ;;
  esac
done

suite_file=$suite
[ -f "$suite_file" ] || suite_file="$here/suites/$suite.sh"
[ -f "$suite_file" ] || { echo "run_suite.sh: no suite '$suite' (see bench/suites/)" >&2; exit 2; }
SUITE_DESC="" COMMON="" CASES=()
# shellcheck source=/dev/null
source "$suite_file"
name=$(basename "$suite_file" .sh)
[ -n "$out" ] || out="$root/bench/out/$name-$(date +%Y%m%d-%H%M%S)"
tiergen=${TIERGEN:-$build/tiergen}
if [ $dry -eq 0 ]; then
  [ -x "$tiergen" ] || { echo "run_suite.sh: $tiergen not built (cmake --build $build --target tiergen)" >&2; exit 1; }
fi
mkdir -p "$out"
cd "$root"  # suites name configs/... relative to the repository

{
  echo "suite: $name ($SUITE_DESC)"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -n) $(uname -srm); cores: $(nproc)"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "binary: $tiergen"
} > "$out/env.txt"
: > "$out/commands.txt"

failed=0
for entry in "${CASES[@]}"; do
  case_name=${entry%%|*}
  flags=${entry#*|}
  [ -z "$only" ] || [ "$only" = "$case_name" ] || continue
  # Expand variables in the suite's flags ($TINY_LLAMA), then split into words.
  eval "args=($COMMON $flags)"
  cmd=("$tiergen" bench "${args[@]}" -r "$reps" --json "$out/$case_name.json" "${extra[@]}")
  printf '%s\n' "${cmd[*]}" >> "$out/commands.txt"
  if [ $dry -eq 1 ]; then echo "${cmd[*]}"; continue; fi
  echo "== $name/$case_name (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  start=$(date +%s)
  if "${cmd[@]}" > "$out/$case_name.log" 2>&1; then
    grep -E '^total latency' "$out/$case_name.log" >&2 || true
  else
    echo "   FAILED (exit $?): see $out/$case_name.log" >&2
    tail -3 "$out/$case_name.log" >&2
    rm -f "$out/$case_name.json"
    failed=$((failed + 1))
  fi
  echo "   $(( $(date +%s) - start )) s" >&2
done
[ $dry -eq 1 ] && exit 0

echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/env.txt"
shopt -s nullglob
records=("$out"/*.json)
if [ ${#records[@]} -gt 0 ]; then
  python3 "$here/bench_records.py" csv "${records[@]}" > "$out/summary.csv"
  python3 "$here/bench_records.py" table "${records[@]}" > "$out/summary.md"
  cat "$out/summary.md"
fi
echo "results in $out ($failed failed)" >&2
[ $failed -eq 0 ]
