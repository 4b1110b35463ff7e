#!/usr/bin/env bash
# One GPU window's evidence in one call of at most 9 minutes (tools/gpu-check.sh stays
# the full correctness run). Steps, in the order that cuts what matters least last, each
# under its own time budget; each leaves its files in OUTDIR/digest (small: host facts,
# the profile, policies, bench records, trace summaries) and its CSV rows in
# OUTDIR/rows.csv as it finishes, so a run cut short keeps what it did:
#   check      gpu-check.sh's facts, deps, configure, a build of tiergen and make-tiny-model
#              only, and CPU-vs-CUDA fp32 equality on tiny OPT and LLaMA over its placements
#   profile    tiergen profile --quick on this host
#   same       tiergen with FlexGen's policy on CASE (traced)
#   auto       tiergen --policy auto on CASE with that profile (traced), and the plan
#   calibrate  the profile rescaled to the two runs' per-task seconds (profile
#              --calibrate-from), and CASE's plan under it
#   flexgen    FlexGen on CASE (bench/compare/gpu_suite.sh SYSTEMS=compare), where its
#              prepared copy exists (bench/compare/prepare_flexgen.sh)
#   calibrated tiergen with the calibrated profile's plan (traced), where it differs from
#              the auto step's: whether calibration finds a faster plan
# CASE is a bench/compare/gpu_suite.sh case: the one with the fewest tiergen rows in
# bench/gpu-evidence/side-by-side.csv (tools/gpu-evidence-add.py next-case), so that
# consecutive windows cover different cases, or TIERGEN_WINDOW_CASE. Afterwards, on the
# development machine: copy OUTDIR/digest to bench/gpu-evidence/MACHINE_RUN-CASE/ and
# append OUTDIR/rows.csv's rows (all but its header) to side-by-side.csv; OUTDIR/window.tgz
# holds both and the step logs in one file.
#
# The first five steps' budgets add up to 535 s, within one 9-minute call with the
# machine's start; FlexGen and the calibrated plan need a second call
# (TIERGEN_WINDOW_STEPS="flexgen calibrated", the same OUTDIR) unless the first finished early.
#
# Usage: tools/gpu-window.sh OUTDIR [--dry-run]
#   --dry-run  print each step's budget and commands, and the budgets' total, run nothing
# Environment: as tools/gpu-check.sh (TIERGEN_GPU_BUILD, TIERGEN_DEPS, PYTHON), plus
#   TIERGEN_WINDOW_CASE, TIERGEN_WINDOW_STEPS (step names to run; default all),
#   FLEXGEN_DIR (default baselines/flexgen).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: tools/gpu-window.sh OUTDIR [--dry-run]}
dry_run=0
[ "${2:-}" = --dry-run ] && dry_run=1
mkdir -p "$out/digest" "$out/work/offload"
out=$(cd "$out" && pwd)
cd "$repo" || exit 1
py=${PYTHON:-python3}
build=${TIERGEN_GPU_BUILD:-build-gpu}
tg=$build/tiergen
flexgen=${FLEXGEN_DIR:-baselines/flexgen}
digest=$out/digest
rows=$out/rows.csv
[ -f "$rows" ] || head -n 1 bench/gpu-evidence/side-by-side.csv > "$rows"

# The case and FlexGen's flags for it, from gpu_suite.sh's table.
case_name=${TIERGEN_WINDOW_CASE:-$("$py" tools/gpu-evidence-add.py next-case)}
case_line=$(grep -F "\"$case_name|" bench/compare/gpu_suite.sh | head -n 1 | tr -d '"' | sed 's/^ *//')
[ -n "$case_line" ] || { echo "gpu-window: no case $case_name in bench/compare/gpu_suite.sh" >&2; exit 2; }
IFS='|' read -r _ model cap flags <<< "$case_line"
cap_gib=${cap%GiB}
# FlexGen's spellings in gpu_suite.sh's table, as tiergen bench takes them.
tiergen_flags=$(sed -e 's/--gbs /--gpu-batch-size /' -e 's/--ngb /--num-gpu-batches /' <<< "$flags")
bench="$tg bench --model $model --dummy --device cuda --prompt-len 512 --gen-len 32 -r 1 --warmup 0 --gpu-mem $cap"

gpu_name() { nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1; }
cpu_name() { lscpu | sed -n 's/^Model name: *//p' | head -n 1; }
# One id for the whole window (a second call on the same machine keeps it: OUTDIR/machine_run).
[ -s "$out/machine_run" ] || [ "$dry_run" = 1 ] ||
  echo "$(date -u +%F)-$(gpu_name | tr 'A-Z ' 'a-z-' | cut -c1-24)-$(hostname | cut -c1-8)" > "$out/machine_run"
machine_run() { cat "$out/machine_run"; }
# add_rows ARGS...: tools/gpu-evidence-add.py add into rows.csv, for this machine.
add_rows() {
  "$py" tools/gpu-evidence-add.py add --csv "$rows" --machine-run "$(machine_run)" --gpu "$(gpu_name)" \
    --cpu "$(cpu_name)" --gpu-cap-gib "$cap_gib" "$@"
}
# summarize TRACE NAME: the middle decode token's summary into the digest, not the trace.
summarize() { "$py" tools/trace-summary.py "$1" --json "$digest/$2-token.json" > "$digest/$2-token.txt"; }

declare -a names=() results=() seconds=()
planned=0
gate_failed=0
# step NAME BUDGET_SECONDS COMMAND
step() {
  local name=$1 budget=$2 cmd=$3
  if [ -n "${TIERGEN_WINDOW_STEPS:-}" ] && [[ " $TIERGEN_WINDOW_STEPS " != *" $name "* ]]; then return; fi
  if [ "$gate_failed" = 1 ]; then
    names+=("$name"); results+=(SKIP); seconds+=(0)
    return
  fi
  planned=$((planned + budget))
  if [ "$dry_run" = 1 ]; then
    printf '== %s (budget %d s, %d s so far)\n%s\n\n' "$name" "$budget" "$planned" "$cmd"
    return
  fi
  echo "== $name (budget $budget s, log $out/work/$name.log)"
  local start=$SECONDS rc
  timeout --kill-after=10 "$budget" bash -c "$(declare -f gpu_name cpu_name machine_run add_rows summarize); \
    py='$py' rows='$rows' cap_gib='$cap_gib' digest='$digest' out='$out'; $cmd" > "$out/work/$name.log" 2>&1
  rc=$?
  local result=PASS
  [ "$rc" = 0 ] || result=FAIL
  [ "$rc" = 77 ] && result=SKIP
  [ "$rc" = 124 ] && result=TIMEOUT
  names+=("$name"); results+=("$result"); seconds+=($((SECONDS - start)))
  echo "   $result ($((SECONDS - start)) s)"
  [ "$result" = PASS ] || tail -n 8 "$out/work/$name.log" | sed 's/^/   | /'
}

echo "gpu-window: case $case_name ($model, GPU cap $cap, FlexGen's policy: $flags)"
step check 200 "TIERGEN_GPU_STEPS='facts deps configure build linkage tiny-models equality-opt-float32 equality-llama-float32' \
TIERGEN_GPU_TARGETS='tiergen make-tiny-model' bash tools/gpu-check.sh $out/work/check; rc=\$?; \
cp $out/work/check/summary.txt $digest/check.txt; exit \$rc"
# A build that fails the CPU-vs-CUDA gate measures nothing worth keeping: fix it first.
if [ "$dry_run" = 0 ] && [[ " ${results[*]} " == *" FAIL "* || " ${results[*]} " == *" TIMEOUT "* ]]; then
  echo "gpu-window: the check failed ($out/work/check.log): no measurements from this build" >&2
  gate_failed=1
fi
# The build links the unpacked .debs (spdlog, fmt, GLPK): every later step's tiergen
# finds them through the environment gpu-check wrote (also in a second call that skips
# the check, on the same machine).
check_env=$out/work/check/work/deps.env
if [ -s "$check_env" ]; then eval "$(cat "$check_env")"; fi
step profile 45 "$tg profile --quick --out $digest/hw-profile.json --offload-dir $out/work/offload"
# The record's prediction is under this host's profile where the profile step made one.
step same 120 "hw=$digest/hw-profile.json; [ -s \$hw ] || hw=h100-spr; $bench $tiergen_flags --hw \$hw --offload-dir $out/work/offload --json $digest/tiergen-same.json \
--trace $out/work/same.trace.json && add_rows --policy-kind same-as-flexgen $digest/tiergen-same.json && \
summarize $out/work/same.trace.json same"
# Without this host's profile (its step failed) the search plans on the built-in H100 one.
step auto 150 "hw=$digest/hw-profile.json; [ -s \$hw ] || { hw=h100-spr; echo 'no profile of this host: planning on h100-spr'; }; \
$tg policy --model $model --prompt-len 512 --gen-len 32 --device cuda --gpu-mem $cap --hw \$hw \
--json $digest/auto-policy.json > $digest/auto-policy.txt && \
$bench --policy auto --hw \$hw --offload-dir $out/work/offload --json $digest/tiergen-auto.json \
--trace $out/work/auto.trace.json && add_rows --policy-kind auto $digest/tiergen-auto.json && \
summarize $out/work/auto.trace.json auto"
# The profile rescaled until the model predicts both runs' per-task seconds, and the
# case's plan under it (no GPU work: seconds). The next window can run that plan.
step calibrate 20 "hw=$digest/hw-profile.json; [ -s \$hw ] || hw=h100-spr; \
$tg profile --calibrate-from $digest/tiergen-same.json $digest/tiergen-auto.json \
--hw \$hw --out $digest/hw-profile-calibrated.json > $digest/calibration.txt 2>&1 && \
$tg policy --model $model --prompt-len 512 --gen-len 32 --device cuda --gpu-mem $cap --hw $digest/hw-profile-calibrated.json \
--json $digest/calibrated-policy.json > $digest/calibrated-policy.txt"
step flexgen 300 "[ -d $flexgen ] || { echo 'no FlexGen copy at $flexgen (bench/compare/prepare_flexgen.sh)'; exit 77; }
[ -x $tg ] && [ -s $digest/hw-profile.json ] || { echo 'needs the check and profile steps of this OUTDIR on this machine'; exit 77; }
CASE_TIMEOUT=140 TIERGEN=$tg SYSTEMS=compare HW=$digest/hw-profile.json bash bench/compare/gpu_suite.sh $out/work/suite $case_name && \
cp $out/work/suite/$case_name/comparison.csv $digest/comparison.csv && add_rows --comparison $digest/comparison.csv"

step calibrated 150 "[ -s $digest/calibrated-policy.json ] && [ -s $digest/auto-policy.json ] ||
  { echo 'needs the auto and calibrate steps of this OUTDIR'; exit 77; }
if \"\$py\" -c 'import json,sys; a,b=(json.load(open(f))[\"policy\"] for f in sys.argv[1:]); sys.exit(a!=b)' \
   $digest/auto-policy.json $digest/calibrated-policy.json; then echo 'the calibrated plan is the auto plan: measured already'; exit 77; fi
$bench --policy $digest/calibrated-policy.json --hw $digest/hw-profile-calibrated.json --offload-dir $out/work/offload \
--json $digest/tiergen-calibrated.json --trace $out/work/calibrated.trace.json && \
add_rows --policy-kind auto-calibrated $digest/tiergen-calibrated.json && summarize $out/work/calibrated.trace.json calibrated"

if [ "$dry_run" = 0 ]; then
  # Appended: a second call (FlexGen) adds its steps to the first call's.
  [ -f "$digest/steps.txt" ] || printf '%-10s %-8s %s\n' step result seconds > "$digest/steps.txt"
  for i in "${!names[@]}"; do printf '%-10s %-8s %s\n' "${names[$i]}" "${results[$i]}" "${seconds[$i]}"; done >> "$digest/steps.txt"
  cat "$digest/steps.txt"
  if [ "$gate_failed" = 1 ]; then
    tar czf "$out/window.tgz" -C "$out" digest rows.csv machine_run $(cd "$out" && ls work/*.log work/check/*.log 2>/dev/null)
    exit 1
  fi
  # One small archive to copy off the host: the digest, the rows and the step logs
  # (traces, offload files and the build stay behind).
  tar czf "$out/window.tgz" -C "$out" digest rows.csv machine_run $(cd "$out" && ls work/*.log 2>/dev/null)
  echo "rows: $rows ($(($(wc -l < "$rows") - 1))); digest: $digest; archive: $out/window.tgz"
  grep -qE 'FAIL|TIMEOUT' "$digest/steps.txt" && exit 1
fi
exit 0
