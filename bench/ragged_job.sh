#!/usr/bin/env bash
# A ragged job: 200 prompts of 8-512 token ids with max_tokens 4-128 each
# (bench/make_ragged_prompts.py, seed 14), on a small random OPT model written by
# make-tiny-model (4 layers, hidden 256, 4 heads, MLP 1024, vocab 8192, 1024
# positions), --device cpu. Runs each binary with --policy auto (this host's quick
# profile cached first) and with each fixed policy, interleaved in rounds so all see
# the same conditions. Prints one line per run: label, policy, round, wall seconds, the
# engine's generation, prefill and decode seconds, passes, and the policy line; then
# whether each binary's tokens equal the last one's, and the last one's compute steps.
# Usage: bench/ragged_job.sh [-r ROUNDS] [-n RANKS] [-f "FIXED POLICY FLAGS"]... LABEL=BINARY...
# (default: 2 rounds, the fixed policy --gpu-batch-size 8 --num-gpu-batches 4;
# make-tiny-model is taken from the last binary's folder, else from build/). With
# -n RANKS > 1 every run is a pipeline of RANKS processes on this host (a file store,
# the cores split between them); times and passes are the last rank's.
set -euo pipefail
usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; }
rounds=2
ranks=1
fixed=()
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    -r) rounds=$2; shift 2 ;;
    -n) ranks=$2; shift 2 ;;
    -f) fixed+=("$2"); shift 2 ;;
    *=*) break ;;
    *) usage >&2; exit 2 ;;
  esac
done
[ $# -ge 1 ] || { usage >&2; exit 2; }
[ ${#fixed[@]} -gt 0 ] || fixed=("--gpu-batch-size 8 --num-gpu-batches 4")
labels=() binaries=()
for spec in "$@"; do
  labels+=("${spec%%=*}")
  binaries+=("${spec#*=}")
done
last=${binaries[-1]}
here=$(cd "$(dirname "$0")" && pwd)
make_model=$(dirname "$last")/make-tiny-model
[ -x "$make_model" ] || make_model=$here/../build/make-tiny-model
work=$(mktemp -d /tmp/tiergen-ragged-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 "$here/make_ragged_prompts.py" --count 200 --min-len 8 --max-len 512 --min-tokens 4 --max-tokens 128 \
  --vocab 8192 --seed 14 > "$work/prompts.jsonl"
"$make_model" --arch opt --out "$work/model" --seed 14 --hidden 256 --layers 4 --heads 4 \
  --intermediate 1024 --vocab 8192 --max-positions 1024 > /dev/null
common=(--model "$work/model" --device cpu -p "$work/prompts.jsonl" --overwrite)
export XDG_CACHE_HOME=$work/cache
"$last" profile --quick --cache 2> "$work/profile.log" || { cat "$work/profile.log"; exit 1; }
policies=("--policy auto" "${fixed[@]}")
field() {  # a --stats-json field, formatted; "-" where the binary does not write it
  python3 -c "import json,sys; v=json.load(open(sys.argv[1])).get(sys.argv[2]); print('-' if v is None else sys.argv[3] % v)" \
    "$1" "$2" "$3"
}
for r in $(seq 1 "$rounds"); do
  for p in "${!policies[@]}"; do
    for b in "${!binaries[@]}"; do
      read -r -a flags <<< "${policies[$p]}"
      out=$work/${labels[$b]}.p$p
      t0=$(date +%s.%N)
      if [ "$ranks" -le 1 ]; then
        "${binaries[$b]}" generate "${flags[@]}" "${common[@]}" --offload-dir "$work/offload" -o "$out.jsonl" \
          --stats-json "$out.stats.json" 2> "$out.log"
      else
        pids=()
        for ((k = 0; k < ranks; k++)); do
          log=$out.log
          [ "$k" = $((ranks - 1)) ] || log=$out.rank$k.log
          OMP_NUM_THREADS=$(( $(nproc) / ranks > 0 ? $(nproc) / ranks : 1 )) "${binaries[$b]}" generate "${flags[@]}" \
            "${common[@]}" --offload-dir "$work/offload$k" --rank "$k" --world-size "$ranks" \
            --dist-init "file:$work/store" -o "$out.jsonl" --stats-json "$out.stats.json" 2> "$log" &
          pids+=($!)
        done
        for pid in "${pids[@]}"; do wait "$pid"; done
      fi
      wall=$(echo "$(date +%s.%N) - $t0" | bc)
      gen=$(grep -o 'generated tokens in [0-9.]* s' "$out.log" | grep -o '[0-9.]* s' | head -1)
      pol=$(grep -o 'policy: gpu batch [0-9]* x [0-9]* batches' "$out.log" | head -1)
      printf '%-8s policy %d round %d  wall %7.2f s  generate %9s  prefill %7s s  decode %7s s  passes %5s  %s\n' \
        "${labels[$b]}" "$p" "$r" "$wall" "$gen" "$(field "$out.stats.json" prefill_latency_s %.2f)" \
        "$(field "$out.stats.json" decode_latency_s %.2f)" "$(field "$out.stats.json" passes %d)" "$pol"
    done
  done
done
for p in "${!policies[@]}"; do echo "policy $p: ${policies[$p]}"; done
tokens() { grep -o '"token_ids":\[[0-9,]*\]' "$1"; }
for p in "${!policies[@]}"; do
  reference=$work/${labels[-1]}.p$p.jsonl
  for b in "${!binaries[@]}"; do
    same=$(cmp -s <(tokens "$work/${labels[$b]}.p$p.jsonl") <(tokens "$reference") && echo yes || echo NO)
    echo "policy $p: ${labels[$b]} tokens equal ${labels[-1]}'s: $same"
  done
  grep -h 'compute steps' "$work/${labels[-1]}.p$p.log" | sed "s/^.*compute steps/policy $p, ${labels[-1]}: compute steps/"
  echo "policy $p, ${labels[-1]}: results in input order: $(python3 -c "
import json, sys
ids = [json.loads(l).get('id') for l in open(sys.argv[1]) if '\"tiergen_job\"' not in l]
print('yes' if len(ids) == 200 and ids == sorted(ids, key=int) else 'NO')" "$reference")"
done
