#!/usr/bin/env bash
# tools/gpu-window.sh --dry-run (its steps, budgets and the rotation's case) and
# tools/gpu-evidence-add.py (rows from a bench record and from compare.py's table, the
# next case, refusals), without a GPU.
# Usage: tests/tools/test_gpu_window.sh SOURCE_DIR
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
add="$src/tools/gpu-evidence-add.py"

# The dry run: seven steps in order; the first five fit one 9-minute call (540 s).
out=$(bash "$src/tools/gpu-window.sh" "$tmp/w" --dry-run)
steps=$(grep -o '^== [a-z]*' <<<"$out" | cut -c4- | tr '\n' ' ')
[ "$steps" = "check profile same auto calibrate flexgen calibrated " ] || fail "steps: $steps"
first=$(grep -o '^== calibrate (budget [0-9]* s, [0-9]* s so far' <<<"$out" | grep -o '[0-9]* s so far' | grep -o '^[0-9]*')
[ "$first" -le 540 ] || fail "the first call's steps need $first s"
# The case is the rotation's: the suite case with the fewest tiergen rows.
next=$(python3 "$add" next-case)
grep -q "gpu-window: case $next " <<<"$out" || fail "not the rotation's case $next: $(head -1 <<<"$out")"
# FlexGen's spellings become tiergen's flags for the same-policy run.
out=$(TIERGEN_WINDOW_CASE=opt-30b-16g bash "$src/tools/gpu-window.sh" "$tmp/w" --dry-run)
grep -q -- "--gpu-mem 16GiB --percent 20 80 0 100 0 100 --gpu-batch-size 24 --num-gpu-batches 2 --cpu-attention" <<<"$out" ||
  fail "same-policy flags: $out"
if TIERGEN_WINDOW_CASE=opt-99b bash "$src/tools/gpu-window.sh" "$tmp/w" --dry-run 2>"$tmp/err"; then fail "an unknown case ran"; fi
grep -q "no case opt-99b" "$tmp/err" || fail "unknown case message: $(cat "$tmp/err")"

# Rows: a CUDA bench record, then compare.py's table; the table tool pairs them.
csv=$tmp/sbs.csv
head -1 "$src/bench/gpu-evidence/side-by-side.csv" > "$csv"
cat > "$tmp/auto.json" <<'JSON'
{"tool": "tiergen", "device": "cuda", "model": "opt-13b", "prompt_len": 512, "gen_len": 32, "date": "2026-12-01T10:00:00Z",
 "total_throughput": 90.5, "decode_throughput": 92.25, "prefill_throughput": 20000.4, "peak_gpu_mem_bytes": 21474836480,
 "policy_description": "gpu batch 96 x 2 batches; weights gpu/cpu/disk 70/30/0%, cache 0/100/0%"}
JSON
cat > "$tmp/comparison.csv" <<'CSV'
system,status,model,prompt_len,gen_len,num_prompts,policy,prefill_throughput,decode_throughput,total_throughput,prefill_vs_flexgen,decode_vs_flexgen,total_vs_flexgen,peak_gpu_mem_gb,total_latency_s
flexgen,ok,facebook/opt-13b,512,32,48,24x2 70/30,3000,30,30.0,,,,14.5,50
tiergen,ok,opt-13b,512,32,48,24x2 70/30,6000,60,60.0,,,,14.7,25
hf,failed,opt-13b,512,32,48,,,,,,,,,
CSV
run=(--csv "$csv" --machine-run m1 --gpu H100 --cpu Xeon --gpu-cap-gib 24)
python3 "$add" add "${run[@]}" --policy-kind auto "$tmp/auto.json" > /dev/null
python3 "$add" add "${run[@]}" --comparison "$tmp/comparison.csv" > /dev/null
[ "$(wc -l < "$csv")" = 4 ] || fail "rows: $(cat "$csv")"
table=$(python3 "$src/tools/gpu-evidence-table.py" "$csv")
grep -qF "opt-13b at 24 GiB: tiergen, FlexGen's policy / FlexGen = 2.00x" <<<"$table" || fail "table: $table"
grep -qF "opt-13b at 24 GiB: tiergen auto / FlexGen = 3.02x" <<<"$table" || fail "table: $table"
# A record with the policy's JSON gives the rows' short form of it.
python3 - "$tmp/auto.json" "$tmp/full.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["policy"] = {"gpu_batch_size": 8, "num_gpu_batches": 8, "w_gpu_percent": 20.0, "w_cpu_percent": 70.0,
               "cache_gpu_percent": 0.0, "cache_cpu_percent": 100.0, "act_gpu_percent": 0.0, "act_cpu_percent": 100.0,
               "cpu_cache_compute": True, "compress_weight": True, "overlap": False}
d["model"] = "opt-30b"
json.dump(d, open(sys.argv[2], "w"))
PY
python3 "$add" add "${run[@]}" --policy-kind auto "$tmp/full.json" > /dev/null
grep -q ",opt-30b,24,512,32,tiergen,auto,8x8 w20/70/10 c0/100 a0/100 cpu-attention compress-weight overlap-off,90.50," "$csv" ||
  fail "short policy: $(tail -1 "$csv")"
sed -i '$d' "$csv"
# With opt-13b-24g measured, the rotation moves on.
[ "$(python3 "$add" next-case --csv "$csv")" = opt-6.7b-16g ] || fail "next case after 13b-24g"

# Refusals: a CPU run, a record without throughput; nothing written.
sed 's/"cuda"/"cpu"/' "$tmp/auto.json" > "$tmp/cpu.json"
if python3 "$add" add "${run[@]}" --policy-kind auto "$tmp/cpu.json" 2>"$tmp/err"; then fail "a CPU run was added"; fi
grep -q "cpu.json: the run was on device cpu" "$tmp/err" || fail "CPU run message: $(cat "$tmp/err")"
sed 's/"total_throughput": 90.5, //' "$tmp/auto.json" > "$tmp/none.json"
if python3 "$add" add "${run[@]}" --policy-kind auto "$tmp/none.json" 2>"$tmp/err"; then fail "no throughput added"; fi
grep -q "none.json: the record has no total_throughput" "$tmp/err" || fail "no-throughput message: $(cat "$tmp/err")"
[ "$(wc -l < "$csv")" = 4 ] || fail "a refused record wrote rows"
echo "gpu-window: ok"
