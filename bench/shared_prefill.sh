#!/usr/bin/env bash
# The prefill shared by the n samples of a prompt: one binary, two jobs of the same
# shape, interleaved in rounds. "shared": P prompts of LEN random token ids with
# n = N samples each; "distinct": P x N different prompts of the same length, n = 1.
# Both run P x N sequences in one gpu batch of P x N (one block), greedy, max_tokens
# 8, on a small random LLaMA written by make-tiny-model (4 layers, hidden 512,
# 8 heads, MLP 1376, vocab 8192, 2048 positions), --device cpu. Prints per run: job,
# round, the engine's prefill and decode seconds, and the prefill rows it computed.
# Usage: bench/shared_prefill.sh TIERGEN_BINARY [ROUNDS] [P] [N] [LEN]
# (defaults: 3 rounds, P 4, N 4, LEN 512; make-tiny-model is taken from the binary's folder)
set -euo pipefail
usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
[ $# -ge 1 ] || { usage >&2; exit 2; }
bin=$1 rounds=${2:-3} prompts=${3:-4} samples=${4:-4} length=${5:-512}
work=$(mktemp -d /tmp/tiergen-shared-prefill.XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 - "$work" "$prompts" "$samples" "$length" <<'PY'
import json, random, sys
work, p, n, length = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(5)
ids = lambda: [rng.randrange(3, 8192) for _ in range(length)]
with open(f"{work}/shared.jsonl", "w") as f:
    for i in range(p):
        f.write(json.dumps({"id": f"s{i}", "prompt_token_ids": ids(), "n": n}) + "\n")
with open(f"{work}/distinct.jsonl", "w") as f:
    for i in range(p * n):
        f.write(json.dumps({"id": f"d{i}", "prompt_token_ids": ids()}) + "\n")
PY
"$(dirname "$bin")/make-tiny-model" --arch llama --out "$work/model" --seed 5 --hidden 512 --layers 4 --heads 8 \
  --intermediate 1376 --vocab 8192 --max-positions 2048 > /dev/null
rows=$((prompts * samples))
for round in $(seq 1 "$rounds"); do
  for job in shared distinct; do
    "$bin" generate --model "$work/model" --device cpu -p "$work/$job.jsonl" -o "$work/$job.out" --overwrite -q \
      --offload-dir "$work/offload" -n 8 --gpu-batch-size "$rows" --num-gpu-batches 1 --stats-json "$work/stats.json" \
      2> "$work/log" || { cat "$work/log"; exit 1; }
    python3 - "$work/stats.json" "$job" "$round" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:9s} round {sys.argv[3]}: prefill {s['prefill_latency_s']:.3f} s, decode {s['decode_latency_s']:.3f} s, "
      f"prefill rows computed {s.get('computed_rows', {}).get('prefill', 'n/a')}")
PY
  done
done
