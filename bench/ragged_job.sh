#!/usr/bin/env bash
# A ragged job: 200 prompts of 8-512 token ids with max_tokens 4-128 each
# (bench/make_ragged_prompts.py, seed 14), on a small random OPT model written by
# make-tiny-model (4 layers, hidden 256, 4 heads, MLP 1024, vocab 8192, 1024
# positions), --device cpu. Runs an older binary (BEFORE) and this build (AFTER), each
# with --policy auto (this host's quick profile cached first) and with one fixed
# policy, interleaved in rounds so both see the same conditions. Prints one line per
# run: variant, round, wall seconds, the engine's generation, prefill and decode
# seconds, and the policy line; then whether each pair's tokens are identical.
# Usage: bench/ragged_job.sh BEFORE_BINARY AFTER_BINARY [ROUNDS] [FIXED_POLICY_FLAGS...]
# (make-tiny-model is taken from AFTER's folder; the fixed policy defaults to
# --gpu-batch-size 8 --num-gpu-batches 4).
set -euo pipefail
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
[ $# -ge 2 ] || { usage >&2; exit 2; }
before=$1 after=$2 rounds=${3:-2}
shift $(($# < 3 ? $# : 3))
fixed=("$@")
[ ${#fixed[@]} -gt 0 ] || fixed=(--gpu-batch-size 8 --num-gpu-batches 4)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/tiergen-ragged-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 "$here/make_ragged_prompts.py" --count 200 --min-len 8 --max-len 512 --min-tokens 4 --max-tokens 128 \
  --vocab 8192 --seed 14 > "$work/prompts.jsonl"
"$(dirname "$after")/make-tiny-model" --arch opt --out "$work/model" --seed 14 --hidden 256 --layers 4 --heads 4 \
  --intermediate 1024 --vocab 8192 --max-positions 1024 > /dev/null
common=(--model "$work/model" --device cpu -p "$work/prompts.jsonl" --overwrite --offload-dir "$work/offload")
export XDG_CACHE_HOME=$work/cache
"$after" profile --quick --cache 2> "$work/profile.log" || { cat "$work/profile.log"; exit 1; }
declare -A variants=(
  [before-auto]="$before generate --policy auto"
  [after-auto]="$after generate --policy auto"
  [before-fixed]="$before generate ${fixed[*]}"
  [after-fixed]="$after generate ${fixed[*]}"
)
order=(before-auto after-auto before-fixed after-fixed)
seconds_of() {  # stats-json field
  python3 -c "import json,sys; print('%.2f' % json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"
}
for r in $(seq 1 "$rounds"); do
  for v in "${order[@]}"; do
    read -r -a cmd <<< "${variants[$v]}"
    t0=$(date +%s.%N)
    "${cmd[@]}" "${common[@]}" -o "$work/$v.jsonl" --stats-json "$work/$v.stats.json" 2> "$work/$v.log"
    wall=$(echo "$(date +%s.%N) - $t0" | bc)
    gen=$(grep -o 'generated tokens in [0-9.]* s' "$work/$v.log" | grep -o '[0-9.]* s' | head -1)
    pol=$(grep -o 'policy: gpu batch [0-9]* x [0-9]* batches' "$work/$v.log" | head -1)
    printf '%-13s round %d  wall %7.2f s  generate %9s  prefill %7s s  decode %7s s  %s\n' "$v" "$r" "$wall" "$gen" \
      "$(seconds_of "$work/$v.stats.json" prefill_latency_s)" "$(seconds_of "$work/$v.stats.json" decode_latency_s)" "$pol"
  done
done
grep -h 'compute steps' "$work/after-auto.log" "$work/after-fixed.log" | sed 's/^.*compute steps/after: compute steps/'
tokens() { grep -o '"token_ids":\[[0-9,]*\]' "$1"; }
for p in auto fixed; do
  echo "$p: tokens identical before/after: $(cmp -s <(tokens "$work/before-$p.jsonl") <(tokens "$work/after-$p.jsonl") \
    && echo yes || echo NO); results in input order: $(python3 -c "
import json, sys
ids = [json.loads(l).get('id') for l in open(sys.argv[1]) if '\"tiergen_job\"' not in l]
print('yes' if len(ids) == 200 and ids == sorted(ids, key=int) else 'NO')" "$work/after-$p.jsonl")"
done
