#!/usr/bin/env bash
# Weights multiplied where they live (--cpu-weight-compute) against loading them, in
# interleaved rounds on the CPU stand-in (--device cpu): the weights on the cpu tier
# loaded every layer (off), multiplied at home in decode only and in both phases
# (decode, all) and in decode for half the layers, and the same weights resident in the
# gpu stand-in as the ceiling.
# OPT-1.3B dummy weights, fp32, prompt 64, generate 16, gpu batch 4. Prints each run's
# prefill and decode lines.
# Usage: bench/cpu_weight_compute.sh TIERGEN_BINARY [ROUNDS] [MODEL]
set -euo pipefail
usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
[ $# -ge 1 ] || { usage >&2; exit 2; }
bin=$1 rounds=${2:-3} model=${3:-opt-1.3b}

run() {  # label percent-of-weights-on-gpu [flags...]
  local label=$1 wg=$2
  shift 2
  local out
  out=$("$bin" bench -m "$model" --device cpu --dtype float32 -s 64 -n 16 --gpu-batch-size 4 \
        --percent "$wg" $((100 - wg)) 100 0 100 0 --gpu-mem 8GiB --cpu-mem 10GiB -r 1 --warmup 0 --hw t4-flexgen "$@" 2>/dev/null |
        grep -E "^(prefill|decode) throughput|^(prefill|decode) latency" | tr '\n' ' ') || out="FAILED (rerun without 2>/dev/null to see why)"
  echo "$label: $out"
}

for round in $(seq 1 "$rounds"); do
  echo "== round $round"
  run "weights cpu, loaded      " 0 --cpu-weight-compute off
  run "weights cpu, decode home " 0 --cpu-weight-compute decode
  run "weights cpu, decode home in half the layers" 0 --cpu-weight-compute decode --cpu-weight-compute-layers 50
  run "weights cpu, all at home " 0 --cpu-weight-compute all
  run "weights in gpu stand-in  " 100
done
