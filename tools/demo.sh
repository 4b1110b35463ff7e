#!/usr/bin/env bash
# The main job on an embedded default: install what is missing, build, write a tiny
# LLaMA-style model paired with a small byte-level BPE tokenizer, and run
# `tiergen generate` over the shipped example prompts with part of the weights and
# the KV cache offloaded to CPU memory and disk. Prints the results and throughput.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/tools/install-deps.sh"
# Only what the demo runs, as one unity build (the fewest compiler runs on a small
# machine); tools/build.sh with no TIERGEN_TARGETS builds everything, tests included.
TIERGEN_TARGETS="tiergen make-tiny-model" TIERGEN_CMAKE_ARGS=${TIERGEN_CMAKE_ARGS:--DTIERGEN_UNITY=ON} \
  bash "$root/tools/build.sh"
build=${TIERGEN_BUILD:-$root/build}
work=$(mktemp -d /tmp/tiergen-demo.XXXXXX)
"$build/make-tiny-model" --arch llama --out "$work/model" --seed 7 \
  --tokenizer "$root/tests/fixtures/tokenizers/byte_level" --hidden 128 --layers 4 --heads 8 --kv-heads 2 --intermediate 256
"$build/tiergen" generate --model "$work/model" --prompts "$root/tools/examples/prompts.txt" \
  --out "$work/results.jsonl" --max-new-tokens 16 --device cpu \
  --percent 40 40 0 50 100 0 --cpu-attention --gpu-batch-size 2 --num-gpu-batches 2 \
  --offload-dir "$work/offload" --stats-json "$work/stats.json"
echo "--- results ($work/results.jsonl)"
cat "$work/results.jsonl"
