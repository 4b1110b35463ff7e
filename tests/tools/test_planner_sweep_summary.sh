#!/usr/bin/env bash
# bench/planner_sweep.py over a sweep of two rounds written by hand: each policy judged
# by its median over the rounds, the best only among policies that ran in every round,
# auto also against each round's best ("-" for a round it failed in), a policy that
# failed in any round counted as failed, one class error per policy, every run a CSV
# row; a folder without rounds refused; --best names a case's best ones; the confirming sets of auto, the best and an added
# policy, read per set (a case counts when auto holds against every one); the script's
# confirmation, dry: the sets' order, the flags from the grid, names outside the grid and
# --rounds 0 misuse refused.
# Usage: tests/tools/test_planner_sweep_summary.sh SOURCE_DIR
set -euo pipefail
src=$1
tool="$src/bench/planner_sweep.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# record ROUND JOB NAME MEASURED PREDICTED: one bench record of opt-125m.
record() {
  local dir="$tmp/sweep/r$1/opt-125m/$2"
  mkdir -p "$dir"
  cat > "$dir/$3.json" <<JSON
{"model": "opt-125m", "total_throughput": $4, "gpu_batch_size": 32, "num_gpu_batches": 1,
 "policy_description": "weights 0/100/0%", "policy": {},
 "predicted_vs_measured": {"throughput": {"predicted": {"total": $5}}},
 "plan_class": {"name": "link-bound", "band": 0.1}}
JSON
}
failed() { mkdir -p "$tmp/sweep/r$1/opt-125m/$2"; echo "$3: error: does not fit" >> "$tmp/sweep/r$1/opt-125m/$2/failed.txt"; }
job=s8-n32-p32
record 1 $job host-a 100 120; record 2 $job host-a 120 120   # median 110: the best
record 1 $job host-b 130 140; record 2 $job host-b 80 140    # median 105, the best of round 1
record 1 $job auto 99 100;    record 2 $job auto 118 100     # median 108.5
record 1 $job auto-lp 55 90;  record 2 $job auto-lp 55 90
failed 1 $job host-c; failed 2 $job host-c                   # never fitted
failed 1 $job lucky; record 2 $job lucky 150 150             # one run: the best of round 2 only
# A second job whose auto failed in round 1.
record 1 s32-n16-p32 host-a 100 100; record 2 s32-n16-p32 host-a 100 100
failed 1 s32-n16-p32 auto; record 2 s32-n16-p32 auto 90 90

out=$(python3 "$tool" "$tmp/sweep")
# auto 108.5 / host-a 110 over the rounds (lucky's one run is not weighed against
# medians of two); 99 / 130 in round 1, 118 / 150 in round 2.
grep -qF "| opt-125m | s8-n32-p32 | 2 / 2 | host-a | 110.0 | 32x1: weights 0/100/0% | 108.5 | 0.99 | r1 0.76, r2 0.79 | 0.92 | 0.50 |" \
  <<<"$out" || fail "auto's row: $out"
grep -qF "| opt-125m | s32-n16-p32 | 1 / 0 | host-a | 100.0 | 32x1: weights 0/100/0% (ran in 1 of 2 rounds) | 90.0 | 0.90 | r1 -, r2 0.90 | 1.00 | - |" \
  <<<"$out" || fail "the row of an auto that failed in round 1: $out"
grep -qF "auto at least 0.95x the best policy (medians over the rounds): 1 of 2 cases" <<<"$out" || fail "the count: $out"
# host-a 120 / 110 and lucky 150 / 150 within ±10%, host-b 140 / 105 not, host-a 100 / 100
# of the second job within; auto's runs are not counted.
grep -qF "| link-bound | ±10% | 4 | 3 | 1.05 | 1.00-1.33 |" <<<"$out" || fail "the class row: $out"
[ "$(wc -l < "$tmp/sweep/sweep.csv")" -eq 13 ] || fail "sweep.csv: not a header and twelve runs"
head -1 "$tmp/sweep/sweep.csv" | grep -q "^round,model_shape,job,plan_class" || fail "sweep.csv's header"

[ "$(python3 "$tool" --best "$tmp/sweep" opt-125m s8-n32-p32)" = host-a ] || fail "--best of s8-n32-p32"
if python3 "$tool" --best "$tmp/sweep" opt-125m s1-n1-p1 2>/dev/null; then fail "--best of a case not swept"; fi
grep -q "confirm" <<<"$out" && fail "a sweep without confirm/ printed a confirmation: $out"

[ "$(python3 "$tool" --best "$tmp/sweep" opt-125m s8-n32-p32 2 | tr '\n' ' ')" = "host-a host-b " ] ||
  fail "--best of s8-n32-p32, two"

# confirm SET NAME MEASURED: a confirming run of s8-n32-p32 (auto, host-a: the sweep's
# best, or host-b: added).
cdir="$tmp/sweep/confirm/opt-125m/$job"
mkdir -p "$cdir"
printf '%s\n' host-a host-b > "$cdir/policies.txt"
confirm() {
  cat > "$cdir/$2-p$1.json" <<JSON
{"model": "opt-125m", "total_throughput": $3, "gpu_batch_size": 32, "num_gpu_batches": 1, "policy": {}}
JSON
}
confirm 1 auto 100; confirm 1 host-a 110; confirm 1 host-b 120   # 0.91, 0.83
confirm 2 host-a 100; confirm 2 host-b 110; confirm 2 auto 104   # 1.04, 0.95
confirm 3 auto 99; confirm 3 host-b 100                          # host-a failed; 0.99
confirm 4 auto 96; confirm 4 host-a 100; confirm 4 host-b 104    # 0.96 (host-a's median; the mean would be 0.97), 0.92
confirm 5 host-b 50                                              # auto and host-a failed
printf '%s\n' "host-a-p3: error: out of memory" "auto-p5: error: x" "host-a-p5: error: y" \
  "host-a-p2: error: a line from an earlier confirmation" > "$cdir/failed.txt"
out=$(python3 "$tool" "$tmp/sweep")
grep -qF "| opt-125m | s8-n32-p32 | host-a | 5 (3) | 0.91, 1.04, policy failed, 0.96, both failed | 0.96 |" <<<"$out" ||
  fail "host-a's confirmed row: $out"
grep -qF "| opt-125m | s8-n32-p32 | host-b | 5 (4) | 0.83, 0.95, 0.99, 0.92, auto failed | 0.93 |" <<<"$out" ||
  fail "host-b's confirmed row: $out"
grep -qF "| opt-125m | s32-n16-p32 | (not confirmed) | 0 (0) | - | - |" <<<"$out" || fail "an unconfirmed case's row: $out"
# auto holds against host-a, not against host-b: the case does not count.
grep -qF "auto at least 0.95x every confirmed policy, in interleaved sets (median of the sets): 0 of 2 cases" \
  <<<"$out" || fail "the confirmed count: $out"
[ "$(wc -l < "$tmp/sweep/confirm.csv")" -eq 13 ] || fail "confirm.csv: not a header and twelve runs"
# Set 3 ran host-b, auto, host-a; set 2 host-a, host-b, auto.
grep -q "^3,2,opt-125m,s8-n32-p32,auto," "$tmp/sweep/confirm.csv" || fail "confirm.csv's row of set 3's auto"
grep -q "^2,3,opt-125m,s8-n32-p32,auto," "$tmp/sweep/confirm.csv" || fail "confirm.csv's row of set 2's auto"
grep -q "^2,1,opt-125m,s8-n32-p32,policy,host-a," "$tmp/sweep/confirm.csv" || fail "confirm.csv's row of set 2's host-a"

# The script's side, dry: each case's policies found before any run and their flags read
# from the grid, set I starting I - 1 places along (auto, host-a, host-b; then host-a,
# host-b, auto); nothing written over the confirmation already there.
sweep="$src/bench/planner_sweep.sh"
printf '%s\n' "host-a|--percent 0 100 0 100 0 100 --gpu-batch-size 8" "host-b|--gpu-batch-size 4" > "$tmp/grid"
before=$(find "$tmp/sweep" | sort)
dry=$(bash "$sweep" -o "$tmp/sweep" --rounds 0 --confirm 2 --confirm-also host-b,host-a --dry-run --hw P \
      --models opt-125m@560MiB --jobs 8:32:32 --grid "$tmp/grid" 2>&1) || fail "the dry confirmation: $dry"
order=$(grep -o "s8-n32-p32/[a-z-]*-p[0-9]*.json" <<<"$dry" | sed 's|.*/||' | tr '\n' ' ')
[ "$order" = "auto-p1.json host-a-p1.json host-b-p1.json host-a-p2.json host-b-p2.json auto-p2.json " ] ||
  fail "the sets' order: $order"
grep -q -- "--percent 0 100 0 100 0 100 --gpu-batch-size 8 --hw P .*host-a-p1.json" <<<"$dry" || fail "the best's flags: $dry"
[ "$(find "$tmp/sweep" | sort)" = "$before" ] && [ "$(tr '\n' ' ' < "$cdir/policies.txt")" = "host-a host-b " ] ||
  fail "the dry run changed the sweep's folder"
for reserved in auto auto-lp; do
  if msg=$(bash "$sweep" -o "$tmp/sweep" --rounds 0 --confirm 1 --confirm-also $reserved --dry-run --hw P \
           --models opt-125m@560MiB --jobs 8:32:32 --grid "$tmp/grid" 2>&1); then fail "--confirm-also $reserved ran"; fi
done
printf '%s\n' "auto|--gpu-batch-size 4" > "$tmp/grid-auto"
if msg=$(bash "$sweep" -o "$tmp/x" --dry-run --hw P --grid "$tmp/grid-auto" 2>&1); then fail "a grid policy named auto"; fi
grep -q "is reserved" <<<"$msg" || fail "the message for a grid policy named auto: $msg"
if msg=$(bash "$sweep" -o "$tmp/sweep" --rounds 0 --confirm 1 --confirm-also host-c --dry-run --hw P \
         --models opt-125m@560MiB --jobs 8:32:32 --grid "$tmp/grid" 2>&1); then fail "--confirm-also outside the grid ran"; fi
grep -q "host-c is not a grid policy of this sweep" <<<"$msg" || fail "the message for --confirm-also outside the grid: $msg"
if msg=$(bash "$sweep" -o "$tmp/sweep" --rounds 0 --confirm 1 --dry-run --hw P --models opt-125m@560MiB \
         --jobs 8:32:32 2>&1); then fail "a best outside the grid was accepted"; fi
grep -q "host-a, of s8-n32-p32.s best, is not in this grid" <<<"$msg" || fail "the message for a best outside the grid: $msg"
if msg=$(bash "$sweep" -o "$tmp/sweep" --rounds 0 --hw P 2>&1); then fail "--rounds 0 without --confirm ran"; fi
grep -q "runs nothing without --confirm" <<<"$msg" || fail "the message for --rounds 0 alone: $msg"
if msg=$(bash "$sweep" -o "$tmp/none" --rounds 0 --confirm 2 --hw P 2>&1); then fail "a confirmation without a sweep ran"; fi
grep -q "has no r1/" <<<"$msg" || fail "the message for a confirmation without a sweep: $msg"
bash "$sweep" --help | grep -q "compresses unless asked. Dummy weights: throughput only" || fail "--help stops before the header's end"

mkdir -p "$tmp/flat/opt-125m/s8-n32-p32"
if msg=$(python3 "$tool" "$tmp/flat" 2>&1); then fail "a folder without rounds was accepted"; fi
grep -q "no round folders" <<<"$msg" || fail "the message for a folder without rounds: $msg"
echo "planner-sweep summary: ok"
