#!/usr/bin/env bash
# CPU decode throughput of two tiergen binaries side by side, in interleaved rounds.
#
#   bench/cpu_decode_ab.sh BEFORE AFTER BF16_MODEL_DIR F32_MODEL_DIR [ROUNDS]
#
# For bf16 and fp32 at batch 16 (32 tokens) and batch 1 (16 tokens), prompt 16, all
# weights in the gpu stand-in (--device cpu), each round runs BEFORE, AFTER with
# TIERGEN_SMALL_MATMUL_MAX_ROWS=0 (small-row kernel off) and AFTER, and prints decode
# throughput. Models: e.g. TinyLlama-1.1B-shaped checkpoints from
#   make-tiny-model --arch llama --hidden 2048 --layers 22 --heads 32 --kv-heads 4 \
#     --intermediate 5632 --vocab 32000 --dtype bfloat16|float32 --out DIR
set -euo pipefail
usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
[ $# -ge 4 ] || { usage >&2; exit 2; }
before=$1 after=$2 bf16_model=$3 f32_model=$4 rounds=${5:-2}

run() {  # label binary env dtype batch gen model
  local out
  out=$(env "$3" "$2" bench -m "$7" --device cpu --dtype "$4" -s 16 -n "$6" --gpu-batch-size "$5" \
        --percent 100 0 100 0 100 0 -r 1 --warmup 0 --hw t4-flexgen 2>/dev/null | grep -E "^decode latency" | head -1)
  echo "$4 batch $5 $1: $out"
}

for round in $(seq 1 "$rounds"); do
  for cfg in "bfloat16 16 32 $bf16_model" "bfloat16 1 16 $bf16_model" "float32 16 32 $f32_model" "float32 1 16 $f32_model"; do
    read -r dtype batch gen model <<< "$cfg"
    run before "$before" "TIERGEN_BENCH_ROUND=$round" "$dtype" "$batch" "$gen" "$model"
    run after-gemm "$after" "TIERGEN_SMALL_MATMUL_MAX_ROWS=0" "$dtype" "$batch" "$gen" "$model"
    run after "$after" "TIERGEN_BENCH_ROUND=$round" "$dtype" "$batch" "$gen" "$model"
  done
done
