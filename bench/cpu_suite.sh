#!/usr/bin/env bash
# The CPU-only benchmark: runs on a 2-core machine with no GPU in a few minutes.
#
#   bench/cpu_suite.sh [--build DIR] [-o OUTDIR] [-r REPS] [--pairs K]
#
# 1. The suite bench/suites/cpu.sh (OPT-125M preset and a small LLaMA with grouped-query
#    attention, --device cpu, budgets that force weights/KV cache onto cpu and disk).
# 2. Overlap on versus off, side by side: OPT-125M with 40% of the weights on the disk
#    tier, K alternating pairs (on, off, on, off, ...) so that load changes on a shared
#    machine hit both alike; reports each pair's ratio and the median.
# Needs BUILD/tiergen and BUILD/make-tiny-model (default build/).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build" out="" reps=2 pairs=2
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    -o|--out) out=$2; shift 2 ;;
    -r|--repetitions) reps=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cpu_suite.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
[ -n "$out" ] || out="$root/bench/out/cpu-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
for exe in tiergen make-tiny-model; do
  [ -x "$build/$exe" ] || { echo "cpu_suite.sh: $build/$exe not built" >&2; exit 1; }
done
export TIERGEN="$build/tiergen"
offload=$(mktemp -d "${TMPDIR:-/tmp}/tiergen-cpu-suite.XXXXXX")
trap 'rm -rf "$offload"' EXIT

# A LLaMA-style model with GQA: 8 layers, hidden 512, 8 heads / 2 kv heads, vocab 8000
# (~23M parameters).
export TINY_LLAMA="$offload/tiny-llama"
"$build/make-tiny-model" --arch llama --out "$TINY_LLAMA" --hidden 512 --layers 8 --heads 8 --kv-heads 2 \
  --intermediate 1408 --vocab 8000 --max-positions 512 --seed 1 > /dev/null

start=$(date +%s)
status=0
"$here/run_suite.sh" cpu -o "$out/suite" -r "$reps" -- --offload-dir "$offload/disk" || status=$?

# Overlap on vs off, alternating pairs.
model_flags=(--model opt-125m --device cpu --dummy -s 16 -n 8 --gpu-batch-size 2 --num-gpu-batches 2
             --percent 20 40 0 100 100 0 --cpu-attention --gpu-mem 512MiB --cpu-mem 2GiB --disk-mem 4GiB
             --offload-dir "$offload/disk" -r "$reps")
mkdir -p "$out/overlap"
echo "overlap on vs off: ${model_flags[*]}" > "$out/overlap/command.txt"
for k in $(seq 1 "$pairs"); do
  for mode in on off; do
    echo "== overlap $mode, pair $k/$pairs (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    "$TIERGEN" bench "${model_flags[@]}" --overlap "$mode" --json "$out/overlap/$mode-$k.json" \
      > "$out/overlap/$mode-$k.log" 2>&1 || { echo "   FAILED: $out/overlap/$mode-$k.log" >&2; status=1; }
  done
done
python3 - "$out/overlap" "$pairs" <<'PY' | tee "$out/overlap/summary.txt"
import json, statistics, sys
d, pairs = sys.argv[1], int(sys.argv[2])
rows = []
for k in range(1, pairs + 1):
    try:
        on = json.load(open(f"{d}/on-{k}.json"))
        off = json.load(open(f"{d}/off-{k}.json"))
    except FileNotFoundError:
        continue
    rows.append((k, on["total_throughput"], off["total_throughput"], on["decode_throughput"], off["decode_throughput"]))
print("pair  on tok/s  off tok/s  ratio  decode on  decode off  decode ratio")
for k, a, b, da, db in rows:
    print(f"{k:>4}  {a:8.3f}  {b:9.3f}  {a / b:5.3f}  {da:9.3f}  {db:10.3f}  {da / db:12.3f}")
if rows:
    print(f"median total ratio (on/off): {statistics.median(a / b for _, a, b, _, _ in rows):.3f}; "
          f"median decode ratio: {statistics.median(da / db for *_, da, db in rows):.3f}")
PY
echo "cpu suite: $(( $(date +%s) - start )) s; results in $out" >&2
exit $status
