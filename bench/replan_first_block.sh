#!/usr/bin/env bash
# The re-plan after a job's first block, measured against a plan that starts wrong.
#
#   bench/replan_first_block.sh [--build DIR] [--hw PROFILE] [--link-factor F] [-r ROUNDS] [--prompts N]
#                               [-- GENERATE FLAGS...]
#
# PROFILE is this host's profile (default: `tiergen profile --quick`, measured once
# here); the "wrong" profile is the same with its weight link F times too fast (default
# 100: bandwidth.cpu_to_gpu and cpu_to_gpu_cache), so that the plan searched on it
# streams weights it should not. Each round runs,
# interleaved, the same job three ways:
#   wrong-kept      the wrong profile's plan for every block (--no-replan)
#   wrong-replanned the wrong profile's plan for the first block, then the re-plan
#   right           this host's profile's plan for every block (--no-replan)
# and prints the wall seconds and generated tokens/s of each (median over rounds) with
# the ratios to wrong-kept, and checks that the three results files are identical.
# GENERATE FLAGS set the job (default: opt-125m dummy weights on --device cpu, N (96)
# prompts of 32 token ids, 32 new tokens, gpu budget 350MiB, no CPU weight compute;
# --prompts applies to that default job only).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build" hw="" factor=100 rounds=2 prompts=96
job=()
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --hw) hw=$2; shift 2 ;;
    --link-factor) factor=$2; shift 2 ;;
    -r|--rounds) rounds=$2; shift 2 ;;
    --prompts) prompts=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; job=("$@"); break ;;
    *) echo "replan_first_block.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
tiergen=${TIERGEN:-$build/tiergen}
work=$(mktemp -d "${TMPDIR:-/tmp}/tiergen-replan.XXXXXX")
trap 'rm -rf "$work"' EXIT
if [ -z "$hw" ]; then
  hw="$work/host.json"
  "$tiergen" profile --quick --out "$hw" 2>"$work/profile.log" ||
    { cat "$work/profile.log" >&2; echo "replan_first_block.sh: tiergen profile failed" >&2; exit 1; }
fi
python3 - "$hw" "$factor" "$work/wrong.json" <<'EOF'
import json, sys
hw = json.load(open(sys.argv[1]))
for key in ("cpu_to_gpu", "cpu_to_gpu_cache"):
    hw["bandwidth"][key] *= float(sys.argv[2])
hw["name"] = f"{hw.get('name', 'profile')} with a weight link {sys.argv[2]}x too fast"
json.dump(hw, open(sys.argv[3], "w"), indent=1)
EOF
if [ ${#job[@]} -eq 0 ]; then
  python3 - "$work/prompts.jsonl" "$prompts" <<'EOF'
import json, random, sys
r = random.Random(1)
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        ids = [r.randrange(4, 50000) for _ in range(32)]
        f.write(json.dumps({"id": str(i), "prompt_token_ids": ids, "max_tokens": 32, "ignore_eos": True}) + "\n")
EOF
  job=(-m opt-125m --dummy --device cpu -p "$work/prompts.jsonl" --gpu-mem 350MiB --cpu-mem 4GiB
       --cpu-weight-compute off)
fi

run() {  # name profile flags...
  local name=$1 profile=$2
  shift 2
  local start end
  start=$(date +%s.%N)
  "$tiergen" generate "${job[@]}" --hw "$profile" -o "$work/$name.jsonl" --overwrite -q \
    --stats-json "$work/$name.stats.json" "$@" 2>"$work/$name.log" ||
    { tail -20 "$work/$name.log" >&2; echo "replan_first_block.sh: the $name run failed" >&2; exit 1; }
  end=$(date +%s.%N)
  python3 - "$work/$name.stats.json" "$start" "$end" "$name" >>"$work/rows.txt" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
wall = float(sys.argv[3]) - float(sys.argv[2])
print(sys.argv[4], wall, s["generated_tokens"] / wall, json.dumps(s["policy"]["gpu_batch_size"]),
      s["policy"]["num_gpu_batches"], s["policy"]["w_gpu_percent"], int(s.get("replan", {}).get("replanned", False)))
EOF
}
for ((round = 1; round <= rounds; ++round)); do
  run wrong-kept "$work/wrong.json" --no-replan
  run wrong-replanned "$work/wrong.json"
  run right "$hw" --no-replan
  cmp -s "$work/wrong-kept.jsonl" "$work/wrong-replanned.jsonl" && cmp -s "$work/wrong-kept.jsonl" "$work/right.jsonl" ||
    { echo "replan_first_block.sh: the three runs' results differ (round $round)" >&2; exit 1; }
done
{ grep -h -E "re-planned|plan kept|policy for the remaining" "$work/wrong-replanned.log" ||
    echo "(no re-plan: a job of one block, or a given policy)"; } | sed 's/^\[[^]]*\] \[info\] //'
python3 - "$work/rows.txt" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, wall, tps, gbs, ngb, wg, replanned = line.split()
    rows.setdefault(name, []).append((float(wall), float(tps), f"{gbs}x{ngb}, weights {wg}% gpu"))
base = statistics.median(t for _, t, _ in rows["wrong-kept"])
print(f"{'run':<16}{'wall s':>9}{'gen tok/s':>11}{'ratio':>8}  last plan")
for name in ("wrong-kept", "wrong-replanned", "right"):
    wall = statistics.median(w for w, _, _ in rows[name])
    tps = statistics.median(t for _, t, _ in rows[name])
    print(f"{name:<16}{wall:>9.2f}{tps:>11.2f}{tps / base:>7.2f}x  {rows[name][-1][2]}")
print("results files identical in every round")
EOF
