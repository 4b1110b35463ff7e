#!/usr/bin/env bash
# A small job planned by `--policy auto`: 4 prompts of 16 tokens, 32 new tokens each,
# OPT-125M preset (dummy weights), --device cpu. Runs, interleaved in rounds so every
# variant sees the same conditions: an older binary's --policy auto (BEFORE), this
# build's --policy auto (AFTER, with a quick profile of this host cached first), and
# hand-written policies on AFTER. Prints one line per run: variant, round, wall seconds,
# generation seconds (the engine's own figure) and the policy line.
# Usage: bench/plans_small_job.sh BEFORE_BINARY AFTER_BINARY [ROUNDS]
set -euo pipefail
usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; }
case ${1:-} in
  -h|--help) usage; exit 0 ;;
esac
[ $# -ge 2 ] || { usage >&2; exit 2; }
before=$1 after=$2 rounds=${3:-3}
work=$(mktemp -d /tmp/tiergen-plans-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
for i in 0 1 2 3; do
  ids=$(seq -s, $((100 + i * 16)) $((115 + i * 16)))
  echo "{\"prompt_token_ids\": [$ids]}"
done > "$work/prompts.jsonl"
common=(--model opt-125m --device cpu -p "$work/prompts.jsonl" -n 32 --overwrite --offload-dir "$work/offload")
export XDG_CACHE_HOME=$work/cache
start=$(date +%s.%N)
"$after" profile --quick --cache 2> "$work/profile.log" || { cat "$work/profile.log"; exit 1; }
echo "quick host profile: $(echo "$(date +%s.%N) - $start" | bc) s"
declare -A variants=(
  [before-auto]="$before generate --policy auto"
  [after-auto]="$after generate --policy auto"
  [hand-4x1]="$after generate --gpu-batch-size 4 --num-gpu-batches 1"
  [hand-2x2]="$after generate --gpu-batch-size 2 --num-gpu-batches 2"
  [hand-1x4]="$after generate --gpu-batch-size 1 --num-gpu-batches 4"
  [hand-4x1-cpu-attn]="$after generate --gpu-batch-size 4 --num-gpu-batches 1 --percent 100 0 0 100 100 0 --cpu-attention"
)
order=(before-auto after-auto hand-4x1 hand-2x2 hand-1x4 hand-4x1-cpu-attn)
for r in $(seq 1 "$rounds"); do
  for v in "${order[@]}"; do
    read -r -a cmd <<< "${variants[$v]}"
    t0=$(date +%s.%N)
    "${cmd[@]}" "${common[@]}" -o "$work/$v.jsonl" 2> "$work/$v.log"
    wall=$(echo "$(date +%s.%N) - $t0" | bc)
    gen=$(grep -o 'generated tokens in [0-9.]* s' "$work/$v.log" | grep -o '[0-9.]* s' | head -1)
    pol=$(grep -o 'policy: gpu batch [0-9]* x [0-9]* batches' "$work/$v.log" | head -1)
    printf '%-18s round %d  wall %7.2f s  generate %8s  %s\n' "$v" "$r" "$wall" "$gen" "$pol"
  done
done
echo "tokens identical to hand-4x1: $(for v in "${order[@]}"; do cmp -s <(grep -o '"token_ids":\[[0-9,]*\]' "$work/$v.jsonl") <(grep -o '"token_ids":\[[0-9,]*\]' "$work/hand-4x1.jsonl") && echo -n "$v=yes " || echo -n "$v=NO "; done)"
