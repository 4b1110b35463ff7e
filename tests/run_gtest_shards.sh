#!/usr/bin/env bash
# Runs a GoogleTest binary as shards (GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX), JOBS
# of them side by side, each one process, and fails if any shard fails; a failing
# shard's log ends the output. One process per shard rather than one per test (as
# ctest runs them): a process that loads LibTorch takes about a second to start and
# exit, which over 700+ tests is a quarter of a ctest run on 2 cores (several times
# more under sanitizers). Four shards per job, each started as a job frees up: a few
# long tests then no longer leave one core idle while the other finishes its half.
# The slowest tests are listed at the end (from each shard's JSON report).
#
#   tests/run_gtest_shards.sh BINARY [GTEST_FILTER]
#   SHARD_JOBS=2          shards run at once (default: the usable cores)
#   SHARDS=8              shards in all (default: 4 per job)
#   SHARD_LOG_DIR=DIR     where shard-K.log and shard-K.json go (default: BINARY's folder)
set -euo pipefail
binary=$1
filter=${2:-*}
# (nproc alone would answer OMP_NUM_THREADS, which sanitized runs set to 1 per shard.)
jobs=${SHARD_JOBS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}
shards=${SHARDS:-$((jobs * 4))}
logs=${SHARD_LOG_DIR:-$(dirname "$binary")}
mkdir -p "$logs"

run_shard() {
  local shard=$1
  rm -f "$logs/shard-$shard.json"
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$shard "$binary" --gtest_filter="$filter" --gtest_brief=1 \
    --gtest_output="json:$logs/shard-$shard.json" >"$logs/shard-$shard.log" 2>&1
}

declare -A pid_of_shard=()
running=0
for ((shard = 0; shard < shards; shard++)); do
  if ((running == jobs)); then
    wait -n || true  # each shard's status is read below, from its own pid
    running=$((running - 1))
  fi
  run_shard "$shard" &
  pid_of_shard[$shard]=$!
  running=$((running + 1))
done

status=0
for ((shard = 0; shard < shards; shard++)); do
  shard_status=0
  wait "${pid_of_shard[$shard]}" || shard_status=$?
  echo "-- shard $((shard + 1))/$shards (exit $shard_status): $(grep -E '^\[==========\]' "$logs/shard-$shard.log" | tail -n 1)"
  grep -E '^\[  FAILED  \]' "$logs/shard-$shard.log" | sort -u || true
  if [ "$shard_status" != 0 ]; then
    status=$shard_status
    echo "---- $logs/shard-$shard.log (last 200 lines):"
    tail -n 200 "$logs/shard-$shard.log"
  fi
done

if command -v python3 >/dev/null; then
  python3 - "$logs" "$shards" <<'PY' || true
import json, sys
logs, shards = sys.argv[1], int(sys.argv[2])
times = []
for shard in range(shards):
    try:
        report = json.load(open(f"{logs}/shard-{shard}.json"))
    except (OSError, ValueError):
        continue
    for suite in report.get("testsuites", []):
        for test in suite.get("testsuite", []):
            times.append((float(test.get("time", "0s").rstrip("s")), f"{suite['name']}.{test['name']}"))
times.sort(reverse=True)
print("-- slowest tests: " + "; ".join(f"{name} {seconds:.1f} s" for seconds, name in times[:10]))
PY
fi
exit $status
