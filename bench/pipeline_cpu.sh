#!/usr/bin/env bash
# A pipeline of processes against one process on the same machine: OPT-125M-shaped
# dummy weights (the opt-125m preset), --device cpu, 48 prompts of 128 token ids, 32
# new tokens each (EOS ignored), gpu batch 8 x 1. One process uses every core; the
# pipeline's RANKS processes (file store) get cores / RANKS threads each, so both
# share the same cores: this measures the pipeline's overhead and overlap on one
# host, not the scaling of one machine per stage. Interleaved rounds; one line per run
# with the wall seconds of the whole job (launch to the last rank's exit) and whether
# the results equal the one-process run's.
# Usage: bench/pipeline_cpu.sh TIERGEN [ROUNDS] [RANKS]
set -euo pipefail
usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in -h|--help|"") usage; exit 0 ;; esac
tiergen=$1 rounds=${2:-2} ranks=${3:-2}
cores=$(nproc)
work=$(mktemp -d /tmp/tiergen-pipeline-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 - "$work/prompts.jsonl" <<'PY'
import json, random, sys
rng = random.Random(16)
with open(sys.argv[1], "w") as f:
    for i in range(48):
        f.write(json.dumps({"prompt_token_ids": [rng.randrange(3, 50000) for _ in range(128)]}) + "\n")
PY
common=(generate --model opt-125m --dummy --device cpu -p "$work/prompts.jsonl" -n 32 --ignore-eos -b 8 --num-gpu-batches 1
        --overwrite --offload-dir "$work/offload" --quiet)
now() { date +%s.%N; }
single() {
  local t0; t0=$(now)
  OMP_NUM_THREADS=$cores "$tiergen" "${common[@]}" -o "$work/single.jsonl" 2> "$work/single.log"
  echo "$(now) - $t0" | bc
}
pipeline() {
  local t0 r; t0=$(now)
  rm -f "$work/store"
  for r in $(seq 0 $((ranks - 1))); do
    OMP_NUM_THREADS=$((cores / ranks > 0 ? cores / ranks : 1)) "$tiergen" "${common[@]}" -o "$work/pipeline.jsonl" \
      --rank "$r" --world-size "$ranks" --dist-init "file:$work/store" 2> "$work/rank$r.log" &
  done
  wait
  echo "$(now) - $t0" | bc
}
for round in $(seq 1 "$rounds"); do
  s=$(single)
  p=$(pipeline)
  same=$(cmp -s "$work/single.jsonl" "$work/pipeline.jsonl" && echo identical || echo DIFFERENT)
  printf 'round %d: one process %.2f s, %d ranks %.2f s (ratio %.2f), results %s\n' "$round" "$s" "$ranks" "$p" \
    "$(echo "$s / $p" | bc -l)" "$same"
done
grep -h "stage_wait\|task times" "$work"/rank*.log | head -"$ranks" || true
