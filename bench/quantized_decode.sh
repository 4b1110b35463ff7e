#!/usr/bin/env bash
# CPU decode with group-wise quantized weights against 16-bit weights, in interleaved
# rounds: AFTER with bf16 weights, AFTER with 8- and 4-bit weights (--compress-weight,
# groups of 64), and BEFORE with 4-bit weights (an older build that dequantizes each
# layer to a dense copy per token). Batch 1 and batch 16, prompt 16, all weights in
# the gpu stand-in (--device cpu). Prints each run's decode line. BATCHES picks the
# batch sizes (default "1 16"); every run generates 32 tokens.
# Usage: bench/quantized_decode.sh BEFORE AFTER BF16_MODEL_DIR [ROUNDS] [BATCHES]
# (model: e.g. make-tiny-model --arch llama --hidden 2048 --layers 22 --heads 32
#  --kv-heads 4 --intermediate 5632 --vocab 32000 --dtype bfloat16 --out DIR)
set -euo pipefail
usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
[ $# -ge 3 ] || { usage >&2; exit 2; }
before=$1 after=$2 model=$3 rounds=${4:-2} batches=${5:-"1 16"}

run() {  # label binary batch gen [flags...]
  local label=$1 bin=$2 batch=$3 gen=$4
  shift 4
  local out
  out=$("$bin" bench -m "$model" --device cpu --dtype bfloat16 -s 16 -n "$gen" --gpu-batch-size "$batch" \
        --percent 100 0 100 0 100 0 -r 1 --warmup 0 --hw t4-flexgen "$@" 2>/dev/null | grep -E "^decode latency" | head -1)
  echo "batch $batch $label: $out"
}

for round in $(seq 1 "$rounds"); do
  echo "== round $round"
  for batch in $batches; do
    gen=32
    run "bf16        " "$after" "$batch" "$gen"
    run "8-bit       " "$after" "$batch" "$gen" --compress-weight --compress-bits 8
    run "4-bit       " "$after" "$batch" "$gen" --compress-weight --compress-bits 4
    run "4-bit before" "$before" "$batch" "$gen" --compress-weight --compress-bits 4
  done
done
