#!/usr/bin/env bash
# Policy sweep: runs `tiergen bench` once per policy of a grid and writes one CSV row
# per policy (its fields, the cost model's predicted throughputs and the measured ones),
# the input of bench/plot.py's throughput-per-policy and predicted-vs-measured figures.
#
#   bench/sweep_policies.sh [-o OUT.csv] [--grid FILE] [--build DIR] [-r REPS] [--dry-run] [-- BENCH FLAGS...]
#
# BENCH FLAGS name the model, workload and budgets (default: the CPU-only setting,
# opt-125m on --device cpu, s=16 n=4). The grid has one policy per line ("name|flags");
# the default grid moves weights and KV cache across gpu/cpu/disk, toggles CPU
# attention, overlap and compression, and varies the batch shape. Records go beside
# the CSV in OUT.d/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out="$root/bench/out/sweep-$(date +%Y%m%d-%H%M%S).csv" grid="" build="$root/build" reps=2 dry=0
bench=()
while [ $# -gt 0 ]; do
  case $1 in
    -o|--out) out=$2; shift 2 ;;
    --grid) grid=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -r|--repetitions) reps=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; bench=("$@"); break ;;
    *) echo "sweep_policies.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ ${#bench[@]} -gt 0 ] || bench=(--model opt-125m --device cpu --dummy -s 16 -n 4 --gpu-mem 512MiB --cpu-mem 2GiB
                                  --disk-mem 4GiB)
default_grid() {
  cat <<'GRID'
w100-kv-gpu|--percent 100 0 100 0 100 0 --gpu-batch-size 2 --num-gpu-batches 2
w50cpu-kv-gpu|--percent 50 50 100 0 100 0 --gpu-batch-size 2 --num-gpu-batches 2
w0-all-cpu|--percent 0 100 100 0 100 0 --gpu-batch-size 2 --num-gpu-batches 2
w30disk|--percent 30 40 100 0 100 0 --gpu-batch-size 2 --num-gpu-batches 2
kv-cpu|--percent 100 0 0 100 100 0 --gpu-batch-size 2 --num-gpu-batches 2
kv-cpu-cpuattn|--percent 100 0 0 100 100 0 --gpu-batch-size 2 --num-gpu-batches 2 --cpu-attention
kv-disk-cpuattn|--percent 100 0 0 50 100 0 --gpu-batch-size 2 --num-gpu-batches 2 --cpu-attention
w30disk-kv-cpu-cpuattn|--percent 30 40 0 100 100 0 --gpu-batch-size 2 --num-gpu-batches 2 --cpu-attention
w30disk-overlap-off|--percent 30 40 0 100 100 0 --gpu-batch-size 2 --num-gpu-batches 2 --cpu-attention --overlap off
w30disk-ngb1|--percent 30 40 0 100 100 0 --gpu-batch-size 4 --num-gpu-batches 1 --cpu-attention
w30disk-ngb4|--percent 30 40 0 100 100 0 --gpu-batch-size 1 --num-gpu-batches 4 --cpu-attention
compress-w|--percent 30 40 100 0 100 0 --gpu-batch-size 2 --num-gpu-batches 2 --compress-weight
compress-kv|--percent 100 0 0 100 100 0 --gpu-batch-size 2 --num-gpu-batches 2 --compress-cache
auto-placement|--policy auto --gpu-batch-size 2 --num-gpu-batches 2
# auto|--policy auto    (the searched batch too: hundreds of prompts, too slow on a CPU)
GRID
}
tiergen=${TIERGEN:-$build/tiergen}
records="${out%.csv}.d"
mkdir -p "$records" "$(dirname "$out")"
cd "$root"
offload=$(mktemp -d "${TMPDIR:-/tmp}/tiergen-sweep.XXXXXX")
trap 'rm -rf "$offload"' EXIT

header_written=0
while IFS= read -r line; do
  [ -n "$line" ] && [ "${line#\#}" = "$line" ] || continue
  name=${line%%|*}
  eval "flags=(${line#*|})"
  cmd=("$tiergen" bench "${bench[@]}" "${flags[@]}" -r "$reps" --offload-dir "$offload/disk" --json "$records/$name.json")
  if [ $dry -eq 1 ]; then echo "${cmd[*]}"; continue; fi
  echo "== $name (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  if ! "${cmd[@]}" > "$records/$name.log" 2>&1; then
    echo "   FAILED: $records/$name.log ($(tail -1 "$records/$name.log"))" >&2
    continue
  fi
  if [ $header_written -eq 0 ]; then
    python3 "$here/bench_records.py" csv "$records/$name.json" > "$out"
    header_written=1
  else
    python3 "$here/bench_records.py" csv-rows "$records/$name.json" >> "$out"
  fi
  grep -E '^total latency' "$records/$name.log" >&2 || true
done < <(if [ -n "$grid" ]; then cat "$grid"; else default_grid; fi)
[ $dry -eq 1 ] || echo "sweep: $out (records in $records)" >&2
