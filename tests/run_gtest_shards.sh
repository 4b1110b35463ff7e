#!/usr/bin/env bash
# Runs a GoogleTest binary as JOBS shards side by side (GTEST_TOTAL_SHARDS /
# GTEST_SHARD_INDEX), each one process, and fails if any shard fails; a failing
# shard's log ends the output. One process per shard rather than one per test (as
# ctest runs them): a process that loads LibTorch takes about a second to start and
# exit, which over 700+ tests is a quarter of a ctest run on 2 cores (several times
# more under sanitizers).
#
#   tests/run_gtest_shards.sh BINARY [GTEST_FILTER]
#   SHARD_JOBS=2          shards (default: the usable cores)
#   SHARD_LOG_DIR=DIR     where shard-K.log go (default: BINARY's folder)
set -euo pipefail
binary=$1
filter=${2:-*}
# (nproc alone would answer OMP_NUM_THREADS, which sanitized runs set to 1 per shard.)
jobs=${SHARD_JOBS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}
logs=${SHARD_LOG_DIR:-$(dirname "$binary")}
mkdir -p "$logs"

status=0
pids=()
for ((shard = 0; shard < jobs; shard++)); do
  GTEST_TOTAL_SHARDS=$jobs GTEST_SHARD_INDEX=$shard \
    "$binary" --gtest_filter="$filter" --gtest_brief=1 >"$logs/shard-$shard.log" 2>&1 &
  pids+=($!)
done
for ((shard = 0; shard < jobs; shard++)); do
  shard_status=0
  wait "${pids[$shard]}" || shard_status=$?
  echo "-- shard $((shard + 1))/$jobs (exit $shard_status): $(grep -E '^\[==========\]' "$logs/shard-$shard.log" | tail -n 1)"
  grep -E '^\[  FAILED  \]' "$logs/shard-$shard.log" | sort -u || true
  if [ "$shard_status" != 0 ]; then
    status=$shard_status
    echo "---- $logs/shard-$shard.log (last 200 lines):"
    tail -n 200 "$logs/shard-$shard.log"
  fi
done
exit $status
