#!/usr/bin/env bash
# The planner against a sweep of hand policies on the CPU stand-in (--device cpu): for
# each model shape and job shape, `tiergen bench` runs `--policy auto` (and, to show what
# its margin rule does, `--policy auto --no-guardrails`: auto-lp) and every policy of a
# grid on the same job (same prompts, same budgets, one profile), one after another in
# one run of this script; bench/planner_sweep.py then reports auto's measured throughput
# over the best policy's for each (model, job), and per plan class the predicted/measured
# ratios against the class's error band.
#
#   bench/planner_sweep.sh [-o OUTDIR] [--models LIST] [--jobs LIST] [--hw PROFILE]
#                          [-r REPS] [--warmup N] [--rounds K] [--confirm K [--confirm-top N]
#                          [--confirm-also NAMES]] [--grid FILE] [--dry-run]
#
# --models: comma-separated MODEL@GPU_BUDGET (a preset or a model directory; the gpu
#   tier's budget, below the model so that placement matters). --jobs: comma-separated
#   PROMPT_LEN:GEN_LEN:PROMPTS. --hw: the profile every run plans and predicts with
#   (default: `tiergen profile`, measured once into OUTDIR/profile.json). --rounds: run
#   the whole sweep K times (records under OUTDIR/rROUND/), each round starting a case's
#   runs at another policy, so that a host whose speed wanders between minutes is
#   compared on medians and on runs minutes apart, not on one cold run each. --confirm:
#   then, for each case, run auto and the sweep's best grid policy (its N best with
#   --confirm-top N, and the grid policies named in --confirm-also, comma-separated) one
#   after the other K times (records under OUTDIR/confirm/, replaced), each set starting
#   one place further along; the best of 21 noisy medians is partly the luckiest, and run
#   beside auto it is measured without that luck. With --rounds 0, confirm the sweep
#   already in OUTDIR: pass its --models, --jobs and --grid; its profile
#   (OUTDIR/profile.json, or the --hw it ran with) plans again.
# The grid has one exact policy per line ("name|flags", the flags read as shell words: a
# grid file is trusted like a script); lossy ones are left out because auto never
# compresses unless asked. Dummy weights: throughput only.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out="$root/bench/out/planner-sweep-$(date +%Y%m%d-%H%M%S)"
models="opt-125m@560MiB,$root/bench/suites/llama-sweep-768@400MiB,opt-350m@800MiB"
jobs="96:4:32,32:16:32,8:32:32"
hw="" reps=1 warmup=1 rounds=1 confirm=0 confirm_top=1 confirm_also="" grid="" dry=0
while [ $# -gt 0 ]; do
  case $1 in
    -o|--out) out=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --hw) hw=$2; shift 2 ;;
    -r|--repetitions) reps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --confirm) confirm=$2; shift 2 ;;
    --confirm-top) confirm_top=$2; shift 2 ;;
    --confirm-also) confirm_also=$2; shift 2 ;;
    --grid) grid=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    -h|--help) sed -n '2,/^set -euo pipefail/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "planner_sweep.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
tiergen=${TIERGEN:-$root/build/tiergen}
[ -z "$grid" ] || [ -r "$grid" ] || { echo "planner_sweep.sh: cannot read the grid $grid" >&2; exit 2; }
[[ $rounds =~ ^[0-9]+$ ]] || { echo "planner_sweep.sh: --rounds wants a whole number, not '$rounds'" >&2; exit 2; }
[[ $confirm =~ ^[0-9]+$ ]] || { echo "planner_sweep.sh: --confirm wants a whole number, not '$confirm'" >&2; exit 2; }
[[ $confirm_top =~ ^[1-9][0-9]*$ ]] ||
  { echo "planner_sweep.sh: --confirm-top wants a positive whole number, not '$confirm_top'" >&2; exit 2; }
[ "$rounds" -gt 0 ] || [ "$confirm" -gt 0 ] ||
  { echo "planner_sweep.sh: --rounds 0 runs nothing without --confirm K" >&2; exit 2; }
if [ "$rounds" -eq 0 ] && [ $dry -eq 0 ] && [ ! -d "$out/r1" ]; then
  echo "planner_sweep.sh: --rounds 0 confirms a sweep already in -o OUTDIR; $out has no r1/" >&2; exit 2
fi

# Every policy multiplies on the CPU standing in for the GPU; they differ in where the
# weights, cache and activations live (copies between the tiers are real memcpys and
# disk reads), in where attention and weight products run, and in the block's shape.
default_grid() {
  cat <<'GRID'
host-4x1|--percent 0 100 0 100 0 100 --gpu-batch-size 4 --num-gpu-batches 1
host-8x4|--percent 0 100 0 100 0 100 --gpu-batch-size 8 --num-gpu-batches 4
host-16x2|--percent 0 100 0 100 0 100 --gpu-batch-size 16 --num-gpu-batches 2
host-32x1|--percent 0 100 0 100 0 100 --gpu-batch-size 32 --num-gpu-batches 1
host-8x4-cpuattn|--percent 0 100 0 100 0 100 --gpu-batch-size 8 --num-gpu-batches 4 --cpu-attention
host-32x1-cpuattn|--percent 0 100 0 100 0 100 --gpu-batch-size 32 --num-gpu-batches 1 --cpu-attention
host-2x16-cwc|--percent 0 100 0 100 0 100 --gpu-batch-size 2 --num-gpu-batches 16 --cpu-attention --cpu-weight-compute all
host-4x2-cwc|--percent 0 100 0 100 0 100 --gpu-batch-size 4 --num-gpu-batches 2 --cpu-attention --cpu-weight-compute all
host-8x4-cwc|--percent 0 100 0 100 0 100 --gpu-batch-size 8 --num-gpu-batches 4 --cpu-attention --cpu-weight-compute all
host-16x1-cwc|--percent 0 100 0 100 0 100 --gpu-batch-size 16 --num-gpu-batches 1 --cpu-attention --cpu-weight-compute all
host-32x1-cwc|--percent 0 100 0 100 0 100 --gpu-batch-size 32 --num-gpu-batches 1 --cpu-attention --cpu-weight-compute all
host-16x2-cwc-decode|--percent 0 100 0 100 0 100 --gpu-batch-size 16 --num-gpu-batches 2 --cpu-attention --cpu-weight-compute decode
host-8x4-cwc-overlap-off|--percent 0 100 0 100 0 100 --gpu-batch-size 8 --num-gpu-batches 4 --cpu-attention --cpu-weight-compute all --overlap off
w30-8x4-cpuattn|--percent 30 70 0 100 0 100 --gpu-batch-size 8 --num-gpu-batches 4 --cpu-attention
w30-act-gpu-32x1-cpuattn|--percent 30 70 0 100 100 0 --gpu-batch-size 32 --num-gpu-batches 1 --cpu-attention
w30-16x2-cwc|--percent 30 70 0 100 0 100 --gpu-batch-size 16 --num-gpu-batches 2 --cpu-attention --cpu-weight-compute all
w30-kv-gpu-8x2|--percent 30 70 100 0 100 0 --gpu-batch-size 8 --num-gpu-batches 2
kv-gpu-16x2|--percent 0 100 100 0 100 0 --gpu-batch-size 16 --num-gpu-batches 2
wdisk30-8x4-cwc|--percent 0 70 0 100 0 100 --gpu-batch-size 8 --num-gpu-batches 4 --cpu-attention --cpu-weight-compute all
wdisk30-32x1-cpuattn|--percent 0 70 0 100 0 100 --gpu-batch-size 32 --num-gpu-batches 1 --cpu-attention
kvdisk50-8x4-cpuattn|--percent 0 100 0 50 0 100 --gpu-batch-size 8 --num-gpu-batches 4 --cpu-attention
GRID
}

# Every run of a case, searched ones first: "name|flags". A grid line's flags are read
# here once, so that a malformed grid stops the sweep before its profile is measured.
runs=("auto|--policy auto"
      # The LP's own plan, not weighed against the guardrails: what the margin rule costs or saves.
      "auto-lp|--policy auto --no-guardrails")
while IFS= read -r line || [ -n "$line" ]; do
  [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
  [[ $line == *"|"* ]] && (eval "flags=(${line#*|})") 2>/dev/null ||
    { echo "planner_sweep.sh: grid line '$line' is not name|flags read as shell words" >&2; exit 2; }
  # A name is a file name of its records and a word of the confirmation's lists.
  name=${line%%|*}
  [[ $name =~ ^[A-Za-z0-9._+-]+$ && $name != auto && $name != auto-lp && $name != BEST ]] ||
    { echo "planner_sweep.sh: grid policy name '$name' is not letters, digits and ._+- or is reserved" >&2; exit 2; }
  runs+=("$line")
done < <(if [ -n "$grid" ]; then cat "$grid"; else default_grid; fi)

IFS=, read -r -a model_list <<< "$models"
IFS=, read -r -a job_list <<< "$jobs"
offload=$(mktemp -d "${TMPDIR:-/tmp}/tiergen-planner-sweep.XXXXXX")
trap 'rm -rf "$offload"' EXIT
[ $dry -eq 1 ] || mkdir -p "$out"
if [ -z "$hw" ] && [ "$rounds" -eq 0 ] && [ -f "$out/profile.json" ]; then
  hw="$out/profile.json"  # the sweep's own: auto plans as it did there
elif [ -z "$hw" ]; then
  hw="$out/profile.json"
  if [ $dry -eq 1 ]; then echo "$tiergen profile --out $hw --offload-dir $offload"
  else "$tiergen" profile --out "$hw" --offload-dir "$offload" 2> "$out/profile.log"; fi
fi

# One bench run; its record goes to DIR/NAME.json, its log beside it. A policy that does
# not fit the budgets (or fails) is noted in DIR/failed.txt and the sweep goes on.
run_one() {
  local dir=$1 name=$2; shift 2
  local cmd=("$tiergen" bench "$@" --hw "$hw" -r "$reps" --warmup "$warmup" --offload-dir "$offload/disk" -q
             --json "$dir/$name.json")
  if [ $dry -eq 1 ]; then echo "${cmd[*]}"; return 0; fi
  if ! "${cmd[@]}" < /dev/null > "$dir/$name.log" 2>&1; then
    echo "$name: $(grep -m1 -E '\[error\]|error:' "$dir/$name.log" || tail -1 "$dir/$name.log")" >> "$dir/failed.txt"
    rm -f "$dir/$name.json"
  fi
}

# The bench flags every run of a case shares: base=(...) for MODEL@BUDGET and
# PROMPT_LEN:GEN_LEN:PROMPTS.
set_base() {
  local prompt_len gen_len prompts
  IFS=: read -r prompt_len gen_len prompts <<< "$2"
  base=(--model "${1%@*}" --device cpu --dummy -s "$prompt_len" -n "$gen_len" --num-prompts "$prompts"
        --gpu-mem "${1##*@}")
}

for ((round = 1; round <= rounds; round++)); do
  # Round r starts each case (r - 1) / rounds of the way through its runs: no policy is
  # always the first after a model switch, and each is timed at rounds places in a case.
  start=$(( (round - 1) * ${#runs[@]} / rounds ))
  for model_budget in "${model_list[@]}"; do
    model=${model_budget%@*} budget=${model_budget##*@}
    for job in "${job_list[@]}"; do
      IFS=: read -r prompt_len gen_len prompts <<< "$job"
      dir="$out/r$round/$(basename "$model")/s${prompt_len}-n${gen_len}-p${prompts}"
      [ $dry -eq 1 ] || mkdir -p "$dir"
      set_base "$model_budget" "$job"
      echo "== round $round/$rounds: $(basename "$model") (gpu $budget), s=$prompt_len n=$gen_len prompts=$prompts" >&2
      for ((i = 0; i < ${#runs[@]}; i++)); do
        line=${runs[(start + i) % ${#runs[@]}]}
        eval "flags=(${line#*|})"
        run_one "$dir" "${line%%|*}" "${base[@]}" ${flags[@]+"${flags[@]}"}
      done
    done
  done
done
# The flags of a run of this sweep by its name ("auto" or a grid policy).
flags_of() {
  local line
  for line in "${runs[@]}"; do
    [ "${line%%|*}" = "$1" ] && { echo "${line#*|}"; return 0; }
  done
  return 1
}

# Confirmation: auto and, per case, the sweep's best --confirm-top grid policies (by the
# rounds' medians) and the --confirm-also ones, in K sets. Every case's policies are found
# and checked against the grid before any folder is touched; a case with none (not swept,
# or no grid policy ran in every round) is not confirmed, and the summary says so.
confirm_dirs=() confirm_policies=() confirm_cases=() stale_dirs=()
IFS=, read -r -a also_list <<< "$confirm_also"
for name in ${also_list[@]+"${also_list[@]}"}; do
  [ "$name" != auto ] && [ "$name" != auto-lp ] && flags_of "$name" > /dev/null ||
    { echo "planner_sweep.sh: --confirm-also $name is not a grid policy of this sweep" >&2; exit 2; }
done
for model_budget in "${model_list[@]}"; do
  (( confirm > 0 )) || break
  model=${model_budget%@*}
  for job in "${job_list[@]}"; do
    IFS=: read -r prompt_len gen_len prompts <<< "$job"
    case_name="s${prompt_len}-n${gen_len}-p${prompts}"
    dir="$out/confirm/$(basename "$model")/$case_name"
    stale_dirs+=("$dir")
    if [ $dry -eq 1 ] && (( rounds > 0 )); then
      best=(BEST)  # the sweep this dry run prints has not run
    elif best_text=$(python3 "$here/planner_sweep.py" --best "$out" "$(basename "$model")" "$case_name" "$confirm_top"); then
      mapfile -t best <<< "$best_text"
    else
      echo "planner_sweep.sh: $case_name of $(basename "$model") is not confirmed" >&2
      continue
    fi
    policies=()
    for name in "${best[@]}" ${also_list[@]+"${also_list[@]}"}; do
      seen=0
      for p in ${policies[@]+"${policies[@]}"}; do [ "$p" = "$name" ] && seen=1; done
      (( seen )) || policies+=("$name")
    done
    for name in "${policies[@]}"; do
      [ "$name" = BEST ] || flags_of "$name" > /dev/null ||
        { echo "planner_sweep.sh: $name, of $case_name's best, is not in this grid (pass the sweep's --grid)" >&2; exit 2; }
    done
    confirm_dirs+=("$dir") confirm_policies+=("${policies[*]}") confirm_cases+=("$model_budget|$job")
  done
done
# A confirmation replaces the last one's sets whole (the dry run touches nothing).
if [ $dry -eq 0 ]; then
  for dir in ${stale_dirs[@]+"${stale_dirs[@]}"}; do rm -rf "$dir"; done
  for ((c = 0; c < ${#confirm_dirs[@]}; c++)); do
    mkdir -p "${confirm_dirs[c]}"
    tr ' ' '\n' <<< "${confirm_policies[c]}" > "${confirm_dirs[c]}/policies.txt"
  done
fi
# Set I runs auto and the case's policies in turn, starting I - 1 places further along:
# none is always first.
for ((set_number = 1; set_number <= confirm; set_number++)); do
  for ((c = 0; c < ${#confirm_dirs[@]}; c++)); do
    dir=${confirm_dirs[c]}
    read -r -a members <<< "auto ${confirm_policies[c]}"
    order=()
    for ((m = 0; m < ${#members[@]}; m++)); do order+=("${members[(set_number - 1 + m) % ${#members[@]}]}"); done
    set_base "${confirm_cases[c]%|*}" "${confirm_cases[c]#*|}"
    echo "== confirm set $set_number/$confirm: ${dir#"$out/confirm/"}: ${order[*]}" >&2
    for name in "${order[@]}"; do
      if [ "$name" = auto ]; then flags=(--policy auto)
      elif [ "$name" = BEST ]; then flags=(FLAGS-OF-THE-BEST)
      else eval "flags=($(flags_of "$name"))"; fi
      run_one "$dir" "$name-p$set_number" "${base[@]}" ${flags[@]+"${flags[@]}"}
    done
  done
done
[ $dry -eq 1 ] || python3 "$here/planner_sweep.py" "$out"
