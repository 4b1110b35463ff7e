#!/usr/bin/env bash
# FlexGen against tiergen on one GPU host, FlexGen's workload (prompt 512, gen 32,
# dummy OPT weights), three columns per case: FlexGen with its published (or best
# hand) policy, tiergen with the same policy, tiergen with --policy auto searched on
# this host's profile. Every command is logged; OUTDIR/suite.md collects the tables.
#
# Usage: bench/compare/gpu_suite.sh OUTDIR [CASE...]   (default: every case below)
# Environment: TIERGEN (default build-gpu/tiergen), FLEXGEN_DIR (a FlexGen checkout,
#   default baselines/flexgen), HF_HOME (an offline cache holding facebook/opt-30b's
#   tokenizer for FlexGen; default baselines/hf-cache where it exists). Both defaults
#   are what bench/compare/prepare_flexgen.sh makes from a FlexGen checkout.
#   HW (a `tiergen profile` JSON; measured with --quick into OUTDIR when absent), CASE_TIMEOUT (seconds per system and case, default 240),
#   PYTHON (default python3), SYSTEMS ("compare auto" by default: compare runs FlexGen
#   and tiergen with FlexGen's policy, auto runs tiergen --policy auto).
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: gpu_suite.sh OUTDIR [CASE...]}
shift
mkdir -p "$out"
out=$(cd "$out" && pwd)
tg=${TIERGEN:-$repo/build-gpu/tiergen}
flexgen=${FLEXGEN_DIR:-$repo/baselines/flexgen}
py=${PYTHON:-python3}
limit=${CASE_TIMEOUT:-240}
systems=" ${SYSTEMS:-compare auto} "
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if [ -z "${HF_HOME:-}" ] && [ -d "$repo/baselines/hf-cache" ]; then export HF_HOME=$repo/baselines/hf-cache; fi

# name | model | gpu cap | FlexGen's policy flags (--percent, batches, options)
cases=(
  "opt-6.7b-16g|opt-6.7b|16GiB|--percent 100 0 100 0 100 0 --gbs 2 --ngb 1 --overlap off"
  "opt-13b-16g|opt-13b|16GiB|--percent 40 60 0 100 0 100 --gbs 24 --ngb 2 --cpu-attention"
  "opt-6.7b-24g|opt-6.7b|24GiB|--percent 100 0 100 0 100 0 --gbs 24 --ngb 1"
  "opt-13b-24g|opt-13b|24GiB|--percent 70 30 0 100 0 100 --gbs 24 --ngb 2 --cpu-attention"
  "opt-30b-16g|opt-30b|16GiB|--percent 20 80 0 100 0 100 --gbs 24 --ngb 2 --cpu-attention"
)

hw=${HW:-}
if [ -z "$hw" ]; then
  hw=$out/hw-profile.json
  echo "\$ $tg profile --quick --out $hw"
  "$tg" profile --quick --out "$hw" > "$out/profile.log" 2>&1 || echo "profile failed (see $out/profile.log)"
fi

selected=("$@")
for c in "${cases[@]}"; do
  IFS='|' read -r name model cap flags <<< "$c"
  if [ ${#selected[@]} -gt 0 ] && [[ " ${selected[*]} " != *" $name "* ]]; then continue; fi
  dir=$out/$name
  mkdir -p "$dir"
  if [[ $systems == *" compare "* ]]; then
    echo "== $name: FlexGen and tiergen, same policy ($flags)"
    # shellcheck disable=SC2086  # flags are words
    timeout $((2 * limit)) "$py" "$repo/bench/compare/compare.py" --flexgen-dir "$flexgen" --python "$py" \
      --tiergen "$tg" --model "$model" --prompt-len 512 --gen-len 32 --gpu-mem "$cap" --hw "$hw" -r 1 \
      --hf off $flags -o "$dir" 2>&1 | tee "$dir/compare.log" | grep -vE '^\s*$' | tail -n 8
  fi
  if [[ $systems == *" auto "* ]]; then
    echo "== $name: tiergen --policy auto"
    cmd=("$tg" bench --model "$model" --dummy --device cuda --prompt-len 512 --gen-len 32 -r 1 --gpu-mem "$cap"
         --policy auto --hw "$hw" --offload-dir "$out/offload" --json "$dir/tiergen-auto.json")
    echo "\$ ${cmd[*]}" | tee "$dir/tiergen-auto.log"
    timeout "$limit" "${cmd[@]}" >> "$dir/tiergen-auto.log" 2>&1 || echo "   exit $? (see $dir/tiergen-auto.log)"
    grep -E 'policy|total throughput|peak gpu' "$dir/tiergen-auto.log" | head -n 6
  fi
  {
    echo "### $name"
    cat "$dir/comparison.md" 2>/dev/null
    echo
    echo "tiergen --policy auto: $(grep -E 'total throughput' "$dir/tiergen-auto.log" | tail -n 1)"
    echo
  } >> "$out/suite.md"
done
echo "tables: $out/suite.md"
