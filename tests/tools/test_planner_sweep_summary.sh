#!/usr/bin/env bash
# bench/planner_sweep.py over a sweep of two rounds written by hand: each policy judged
# by its median over the rounds, auto also against each round's best, a policy that
# failed in every round counted as failed, one class error per policy, every run a CSV
# row; a folder without rounds refused.
# Usage: tests/tools/test_planner_sweep_summary.sh SOURCE_DIR
set -euo pipefail
src=$1
tool="$src/bench/planner_sweep.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# record ROUND NAME MEASURED PREDICTED: one bench record of opt-125m, job s8-n32-p32.
record() {
  local dir="$tmp/sweep/r$1/opt-125m/s8-n32-p32"
  mkdir -p "$dir"
  cat > "$dir/$2.json" <<JSON
{"model": "opt-125m", "total_throughput": $3, "gpu_batch_size": 32, "num_gpu_batches": 1,
 "policy_description": "weights 0/100/0%", "policy": {},
 "predicted_vs_measured": {"throughput": {"predicted": {"total": $4}}},
 "plan_class": {"name": "link-bound", "band": 0.1}}
JSON
}
record 1 host-a 100 120; record 2 host-a 120 120   # median 110: the best
record 1 host-b 130 140; record 2 host-b 80 140    # median 105, the best of round 1
record 1 auto 99 100;    record 2 auto 118 100     # median 108.5
record 1 auto-lp 55 90;  record 2 auto-lp 55 90
for r in 1 2; do echo "host-c: error: does not fit" > "$tmp/sweep/r$r/opt-125m/s8-n32-p32/failed.txt"; done

out=$(python3 "$tool" "$tmp/sweep")
# auto 108.5 / host-a 110 over the rounds; 99 / 130 in round 1, 118 / 120 in round 2.
grep -qF "| opt-125m | s8-n32-p32 | 2 / 1 | host-a | 110.0 | 32x1: weights 0/100/0% | 108.5 | 0.99 | 0.76, 0.98 | 0.92 | 0.50 |" \
  <<<"$out" || fail "auto's row: $out"
grep -qF "auto at least 0.95x the best policy (medians over the rounds): 1 of 1 cases" <<<"$out" || fail "the count: $out"
# host-a 120 / 110 within ±10%, host-b 140 / 105 not; auto's runs are not counted.
grep -qF "| link-bound | ±10% | 2 | 1 | 1.21 | 1.09-1.33 |" <<<"$out" || fail "the class row: $out"
[ "$(wc -l < "$tmp/sweep/sweep.csv")" -eq 9 ] || fail "sweep.csv: not a header and eight runs"
head -1 "$tmp/sweep/sweep.csv" | grep -q "^round,model_shape,job,plan_class" || fail "sweep.csv's header"

mkdir -p "$tmp/flat/opt-125m/s8-n32-p32"
if msg=$(python3 "$tool" "$tmp/flat" 2>&1); then fail "a folder without rounds was accepted"; fi
grep -q "no round folders" <<<"$msg" || fail "the message for a folder without rounds: $msg"
echo "planner-sweep summary: ok"
