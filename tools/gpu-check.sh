#!/usr/bin/env bash
# Everything a GPU host should check, in one command (about 10 minutes on an H100
# with 16 cores), logging each step to OUTDIR/NN-step.log:
#   toolchain facts, build (pip torch's LibTorch + the .debs in .deps/), the ctest
#   suite, CPU-vs-CUDA token equality on tiny OPT and LLaMA models over 12 placements
#   (fp32 must be identical; fp16's agreement rate is reported), overlap on/off
#   equality at num_gpu_batches 1, 2 and 3 with activations on the GPU, no decoder
#   layer of a decode token far slower than the others (a traced all-GPU OPT-6.7B run),
#   no gpu batch's CPU attention far slower than another's (a traced offloaded OPT-30B),
#   compute-sanitizer memcheck of a short compressed offloaded run, the default gpu
#   budget's reserve against what the allocator held beyond the tier, the CPU's products
#   over host-resident weights (bench_matmul), `tiergen profile`,
#   and an nsys summary where nsys exists.
# Every step runs even when an earlier one failed; the summary table (OUTDIR/summary.txt)
# lists PASS/FAIL/SKIP per step, and the exit status is non-zero when any step failed.
#
# Usage: tools/gpu-check.sh OUTDIR [--dry-run]
#   --dry-run  print the steps and their commands without running anything
# Environment: TIERGEN_DEPS (default .deps, from tools/fetch-build-deps.sh),
#   TIERGEN_GPU_BUILD (default build-gpu), TIERGEN_JOBS (default nproc),
#   PYTHON (default python3, with torch installed),
#   TIERGEN_GPU_STEPS (space-separated step names to run, in the script's order;
#   default all), TIERGEN_OVERLAP_NGB (gpu batch counts of the overlap step,
#   default "1 2 3 2 2"), TIERGEN_GPU_TARGETS (what the build step builds, default
#   everything; "tiergen" alone for a run that only benchmarks, about half the
#   compile: pair it with TIERGEN_GPU_STEPS="facts deps configure build", since the
#   test steps need the test binaries).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: tools/gpu-check.sh OUTDIR [--dry-run]}
dry_run=0
[ "${2:-}" = --dry-run ] && dry_run=1
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$repo" || exit 1
build=${TIERGEN_GPU_BUILD:-build-gpu}
deps=${TIERGEN_DEPS:-.deps}
jobs=${TIERGEN_JOBS:-$(nproc)}
py=${PYTHON:-python3}
tg=$build/tiergen
work=$out/work
export TORCH_CUDA_ARCH_LIST=9.0

# ---- Step runner: NAME, then the command (a bash string, shown verbatim by --dry-run).
declare -a step_names=() step_results=() step_seconds=()
step_index=0
step() {
  local name=$1 cmd=$2
  step_index=$((step_index + 1))
  if [ -n "${TIERGEN_GPU_STEPS:-}" ] && [[ " $TIERGEN_GPU_STEPS " != *" $name "* ]]; then return; fi
  local log
  log=$(printf '%s/%02d-%s.log' "$out" "$step_index" "$name")
  if [ "$dry_run" = 1 ]; then
    printf '== step %02d %s\n%s\n\n' "$step_index" "$name" "$cmd"
    return
  fi
  echo "== step $(printf %02d "$step_index") $name (log: $log)"
  local start=$SECONDS rc
  { echo "\$ $cmd"; echo; } > "$log"
  (eval "$cmd") >> "$log" 2>&1
  rc=$?
  local result=PASS
  [ "$rc" = 0 ] || result=FAIL
  [ "$rc" = 77 ] && result=SKIP
  step_names+=("$name"); step_results+=("$result"); step_seconds+=($((SECONDS - start)))
  echo "   $result ($((SECONDS - start)) s)"
  [ "$result" = FAIL ] && tail -n 15 "$log" | sed 's/^/   | /'
}

# ---- Helpers the step commands call (defined here so --dry-run can show the calls).

# records FILE: every result record (text, token ids, finish reason, counts), keys
# sorted; the job header line is left out (it names the dtype each run asked for).
records() {
  "$py" -c 'import json,sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "tiergen_job" not in r: print(json.dumps(r, sort_keys=True))' "$1"
}

# agreement A B: fraction of token positions equal between two results files.
agreement() {
  "$py" -c 'import json,sys
a=[json.loads(l).get("token_ids") or [] for l in open(sys.argv[1])]
b=[json.loads(l).get("token_ids") or [] for l in open(sys.argv[2])]
same=sum(x==y for ra,rb in zip(a,b) for x,y in zip(ra,rb)); total=sum(max(len(ra),len(rb)) for ra,rb in zip(a,b))
print(f"{same}/{total} tokens agree ({100.0*same/max(total,1):.1f}%)")' "$1" "$2"
}

# The placements (wg wc cg cc hg hc, plus flags) the CPU-vs-CUDA comparison runs.
placements=(
  "100 0 100 0 100 0"
  "0 100 100 0 100 0"
  "100 0 0 100 100 0"
  "100 0 0 100 100 0 --cpu-attention"
  "50 50 50 50 100 0"
  "40 40 0 50 100 0 --cpu-attention --compress-cache"
  "0 100 0 100 0 100"
  "30 30 30 30 0 100"
  "100 0 100 0 100 0 --compress-weight"
  "20 30 20 30 100 0 --compress-weight --compress-cache"
  "100 0 100 0 0 100"
  "0 0 0 0 100 0"
)

# compare_devices ARCH DTYPE: runs every placement on cpu (float32, the reference) and
# on cuda (DTYPE); float32 must give identical result records, float16 reports the
# agreement of token ids.
compare_devices() {
  local arch=$1 dtype=$2 failures=0 i=0 p
  for p in "${placements[@]}"; do
    i=$((i + 1))
    local percent=${p%% --*} flags=""
    [[ $p == *--* ]] && flags="--${p#* --}"
    local base=(generate -m "$work/tiny-$arch" -p tools/examples/prompts.txt -n 16 --percent $percent $flags
      --gpu-batch-size 2 --num-gpu-batches 2 --offload-dir "$work/offload" -q --overwrite)
    local ref=$work/$arch-p$i-cpu.jsonl got=$work/$arch-p$i-cuda-$dtype.jsonl
    [ -s "$ref" ] || "$tg" "${base[@]}" --device cpu --dtype float32 -o "$ref" || { echo "p$i [$p]: cpu run failed"; failures=$((failures + 1)); continue; }
    "$tg" "${base[@]}" --device cuda --dtype "$dtype" -o "$got" || { echo "p$i [$p]: cuda run failed"; failures=$((failures + 1)); continue; }
    if [ "$dtype" = float32 ]; then
      if diff <(records "$ref") <(records "$got") > /dev/null; then echo "p$i [$p]: identical"
      else echo "p$i [$p]: DIFFERENT ($(agreement "$ref" "$got"))"; failures=$((failures + 1)); fi
    else
      echo "p$i [$p]: $(agreement "$ref" "$got")"
    fi
  done
  return $((failures > 0))
}

# overlap_equality: greedy results with --overlap on and off must be byte-identical,
# activations on the GPU, at num_gpu_batches 1, 2 and 3 (2 repeated: the race it
# guards against depends on timing).
overlap_equality() {
  local failures=0 ngb ov rep
  "$py" -c 'import json,random;r=random.Random(0);[print(json.dumps({"prompt_token_ids":[r.randrange(3,50000) for _ in range(1024)]})) for _ in range(24)]' > "$work/long.jsonl"
  for ngb in ${TIERGEN_OVERLAP_NGB:-1 2 3 2 2}; do
    for ov in on off; do
      "$tg" generate -m opt-1.3b --dummy -p "$work/long.jsonl" -n 8 --device cuda --gpu-mem 60GiB --percent 100 0 100 0 100 0 \
        --gpu-batch-size 8 --num-gpu-batches $ngb --overlap $ov -q --overwrite -o "$work/ov-$ngb-$ov.jsonl" || failures=$((failures + 1))
    done
    if cmp -s "$work/ov-$ngb-on.jsonl" "$work/ov-$ngb-off.jsonl"; then echo "ngb=$ngb: on == off"
    else echo "ngb=$ngb: on and off DIFFER"; failures=$((failures + 1)); fi
  done
  return $((failures > 0))
}

# hw_profile_name: configs/hw/<gpu>.json name from nvidia-smi's GPU name.
hw_profile_name() {
  nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | tr 'A-Z' 'a-z' | sed 's/nvidia //; s/[^a-z0-9]\+/-/g; s/-$//'
}

torch_prefix='$("$py" -c "import torch;print(torch.utils.cmake_prefix_path)")'
torch_dir='$("$py" -c "import torch,os;print(os.path.dirname(torch.__file__))")'

# ---- The steps.
[ "$dry_run" = 1 ] && echo "tools/gpu-check.sh $out --dry-run: the steps it runs, in order"
[ "$dry_run" = 1 ] || mkdir -p "$work"

step facts "nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
nvcc --version | tail -n 2
\"\$py\" -c 'import torch;print(\"torch\",torch.__version__,\"cuda\",torch.version.cuda,\"available\",torch.cuda.is_available(),\"cxx11abi\",torch._C._GLIBCXX_USE_CXX11_ABI)'
lscpu | grep -E 'Model name|^CPU\\(s\\)|Flags'
ls -d $torch_dir/include/fmt && echo 'torch bundles fmt: the configure step must say it put spdlog'\"'\"'s fmt first' || echo 'torch/include/fmt: none'
if dpkg -s libtorch-dev > /dev/null 2>&1; then echo 'libtorch-dev is installed: its /usr/include headers can mix with pip torch (remove it)'; exit 1; fi"

# The .debs are unpacked under OUTDIR/work, never into /; the environment it prints is
# kept for the steps that follow.
deps_env=$work/deps.env
step deps "if [ ! -d $deps ]; then echo 'no $deps folder (tools/fetch-build-deps.sh): the system packages are used'; exit 77; fi
bash tools/unpack-build-deps.sh $deps $work/deps > $deps_env && cat $deps_env"
[ -s "$deps_env" ] && eval "$(cat "$deps_env")"
generator="Unix Makefiles"
command -v ninja > /dev/null 2>&1 && generator=Ninja

step configure "TORCH_CUDA_ARCH_LIST=9.0 cmake -S . -B $build -G '$generator' -DCMAKE_BUILD_TYPE=Release -DTIERGEN_ENABLE_CUDA=ON \\
  -DCMAKE_CUDA_COMPILER=\$(command -v nvcc) -DTIERGEN_CUDA_ARCHITECTURES=90 -DTIERGEN_BUILD_BENCHES=OFF \\
  -DCMAKE_PREFIX_PATH=\"$torch_prefix\"  # the unpacked .debs come through the CMAKE_PREFIX_PATH environment variable"

targets=${TIERGEN_GPU_TARGETS:+--target $TIERGEN_GPU_TARGETS}
step build "cmake --build $build -j$jobs $targets"

step linkage "ldd $tg | grep -E 'torch_cuda|c10_cuda|cudart|cublas|gomp|fmt|spdlog'
if ldd $tg | grep -q 'cublas.*/usr/local/cuda'; then echo 'the toolkit cuBLAS is linked'; exit 1; fi
cuobjdump --list-elf $tg | head -n 5"

step ctest "ctest --test-dir $build --output-on-failure -j8 --timeout 600"

step cuda-tests "$build/tiergen_tests --gtest_filter='*Cuda*:*Compression*'"

# Golden fixtures from transformers on this GPU (tools/make-golden.py writes them into
# tests/fixtures/golden), then the engine against them on the CPU and the GPU.
step golden "\"\$py\" tools/make-golden.py tests/fixtures/golden && $build/tiergen_tests --gtest_filter='*Golden*'"

step tiny-models "$build/make-tiny-model --arch opt --out $work/tiny-opt --seed 7 --tokenizer tests/fixtures/tokenizers/byte_level --hidden 128 --layers 4 --heads 8 --intermediate 256
$build/make-tiny-model --arch llama --out $work/tiny-llama --seed 7 --tokenizer tests/fixtures/tokenizers/byte_level --hidden 128 --layers 4 --heads 8 --kv-heads 2 --intermediate 256"

for arch in opt llama; do
  for dtype in float32 float16; do
    if [ "$dry_run" = 1 ]; then
      cmds="for each of the ${#placements[@]} placements P (--percent ... [flags]):"
      for p in "${placements[@]}"; do cmds+=$'\n'"  [$p]"; done
      cmds+=$'\n'"$tg generate -m $work/tiny-$arch -p tools/examples/prompts.txt -n 16 --percent P --gpu-batch-size 2 --num-gpu-batches 2 --offload-dir $work/offload -q --overwrite --device cpu --dtype float32 -o REF"
      cmds+=$'\n'"$tg generate ... (same) --device cuda --dtype $dtype -o GOT"
      [ "$dtype" = float32 ] && cmds+=$'\n'"token ids of REF and GOT must be identical" || cmds+=$'\n'"report the share of equal token ids"
      step "equality-$arch-$dtype" "$cmds"
    else
      step "equality-$arch-$dtype" "compare_devices $arch $dtype"
    fi
  done
done

if [ "$dry_run" = 1 ]; then
  step overlap "for ngb in 1 2 3 2 2; for ov in on off:
$tg generate -m opt-1.3b --dummy -p $work/long.jsonl -n 8 --device cuda --gpu-mem 60GiB --percent 100 0 100 0 100 0 --gpu-batch-size 8 --num-gpu-batches \$ngb --overlap \$ov -q --overwrite -o $work/ov-\$ngb-\$ov.jsonl
cmp the on and off results (24 prompts of 1024 random token ids)"
else
  step overlap "overlap_equality"
fi

# Decode on the GPU, weights and cache there: no decoder layer of a decode token may
# take far longer than the others (a per-shape set-up, such as cuDNN attention's graph
# build for every new key length, shows as one slow layer per token). OPT-6.7B, 24 x 1.
step decode-layers "timeout 150 $tg bench -m opt-6.7b -s 512 -n 32 -r 1 --warmup 0 --device cuda --gpu-mem 24GiB \\
  --percent 100 0 100 0 100 0 --gpu-batch-size 24 --num-gpu-batches 1 --trace $work/decode-layers.json \\
  | grep -E 'throughput|peak memory' || exit 1
$py tools/trace-summary.py $work/decode-layers.json --json $work/decode-layers-summary.json | tail -n 3
$py - $work/decode-layers-summary.json <<'PY'
import json, statistics, sys
layers = json.load(open(sys.argv[1]))['layers']
decoder = {int(k): v.get('compute', 0.0) for k, v in layers.items()}
decoder = {k: v for k, v in decoder.items() if 0 < k < max(decoder)}  # not the embedding, not the head
median = statistics.median(decoder.values())
worst = max(decoder, key=decoder.get)
print(f'decoder layer compute: median {median/1e3:.3f} ms, layer {worst} {decoder[worst]/1e3:.3f} ms ({decoder[worst]/median:.1f}x)')
sys.exit(0 if decoder[worst] <= 5 * median else 'one decoder layer takes over 5x the median: a per-token set-up on the compute path')
PY"

# CPU attention beside offloaded weights: OPT-30B at 16 GiB with FlexGen's policy (24 x 2,
# weights 20/80, cache and activations on the cpu, CPU attention). The gpu batches of a
# decode token attend over as many keys each; one far slower than another waits on
# something else (on the H200, batch 1's small copies queued behind the next layer's
# weight copy: 21.9 ms against 4.1, before they went through page-locked staging).
step cpu-attention "timeout 300 $tg bench -m opt-30b -s 512 -n 8 -r 1 --warmup 0 --device cuda --gpu-mem 16GiB \\
  --percent 20 80 0 100 0 100 --gpu-batch-size 24 --num-gpu-batches 2 --cpu-attention --trace $work/cpu-attention.json \\
  | grep -E 'throughput|peak memory' || exit 1
$py tools/trace-summary.py $work/cpu-attention.json | tail -n 1
$py tools/trace-summary.py $work/cpu-attention.json --cpu-attention-batches 2"

step memcheck "command -v compute-sanitizer > /dev/null || exit 77
timeout 240 compute-sanitizer --tool memcheck --error-exitcode 1 $tg generate -m $work/tiny-llama -p tools/examples/prompts.txt -n 4 --device cuda \\
  --percent 40 40 0 50 100 0 --compress-weight --compress-cache --gpu-batch-size 2 --num-gpu-batches 2 --offload-dir $work/offload -q --overwrite -o $work/memcheck.jsonl"

# The default gpu tier (free memory after the warm-up, less the reserve) against what
# the caching allocator really holds: OPT-30B fp16, no --gpu-mem, and a searched policy
# (the h100-spr profile). Fails when the run fails (an out of memory is the reserve
# being too small) or when the allocator held more beyond the tier's own peak than the
# reserve leaves (a plan that filled the tier would then not fit).
step default-budget "timeout 420 $tg bench -m opt-30b -s 512 -n 8 -r 1 --warmup 0 --device cuda --policy auto --hw h100-spr \\
  --json $work/default-budget.json > $work/default-budget.log 2>&1
rc=\$?
grep -E 'CUDA device|budgets:|CUDA allocator|policy:|peak memory|throughput|rror' $work/default-budget.log
test \$rc = 0 || exit 1
$py - $work/default-budget.json $work/default-budget.log <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1]))
budget, peak, reserved = r['budget_bytes']['gpu'], r['peak_bytes']['gpu'], r['cuda_peak_reserved_bytes']
units = {'B': 1, 'KiB': 2**10, 'MiB': 2**20, 'GiB': 2**30, 'TiB': 2**40}
m = re.search(r'the gpu tier leaves ([0-9.]+) (\\w+) of that', open(sys.argv[2]).read())
if not m: sys.exit('no default-budget line in the log: was --gpu-mem given?')
reserve = float(m.group(1)) * units[m.group(2)]
gib = 2.0**30
beyond = reserved - peak
print(f'gpu tier budget {budget/gib:.2f} GiB, tier peak {peak/gib:.2f} GiB ({100*peak/budget:.0f}%), '
      f'allocator peak reserved {reserved/gib:.2f} GiB: {beyond/gib:.2f} GiB beyond the tier, reserve {reserve/gib:.2f} GiB')
sys.exit(0 if beyond <= reserve else 'the allocator held more beyond the tier than the reserve leaves')
PY"

# The host's own products over host-resident weights (--cpu-weight-compute), one
# LLaMA-7B-sized layer (404 MB in fp16, more than a last-level cache, so --layers 1) at
# the row counts of decode gpu batches: above 16 rows they leave tiergen's small-row
# kernel for LibTorch's at::linear, whose fp16 rate the profile does not measure at this size.
# (The benches are built here only, so a problem in them cannot fail the main build.)
step cpu-matmul "cmake -S . -B $build -DTIERGEN_BUILD_BENCHES=ON > /dev/null && cmake --build $build --target bench_matmul > /dev/null &&
  timeout 240 $build/bench_matmul --hidden 4096 --intermediate 11008 --kv-dim 4096 --rows 1,4,16,32,64 --reps 3 --layers 1
rc=\$?
cmake -S . -B $build -DTIERGEN_BUILD_BENCHES=OFF > /dev/null  # later builds leave the benches out again
exit \$rc"

# The copy kept as a built-in profile leaves out the measured small-row limit: a
# built-in describes another machine, whose kernels' crossover is not this one's.
step profile "timeout 300 $tg profile --out $out/hw-profile.json --offload-dir $work/offload
python3 -c 'import json, sys; p = json.load(open(sys.argv[1])); p[\"cpu\"].pop(\"small_matmul_max_rows\", None); json.dump(p, open(sys.argv[2], \"w\"), indent=2)' \\
  $out/hw-profile.json configs/hw/\$(hw_profile_name).json && echo \"configs/hw/\$(hw_profile_name).json written\""

step nsys "command -v nsys > /dev/null || exit 77
timeout 240 nsys profile -t cuda,osrt -o $out/nsys-offload --force-overwrite true $tg bench -m opt-1.3b -s 512 -n 8 -r 1 --warmup 0 \\
  --device cuda --gpu-mem 20GiB --percent 0 100 0 100 100 0 --gpu-batch-size 16 --num-gpu-batches 2
nsys stats -r cuda_api_sum,cuda_gpu_mem_time_sum $out/nsys-offload.nsys-rep | head -n 60
nsys analyze -r cuda_memcpy_async,cuda_memcpy_sync,cuda_api_sync $out/nsys-offload.nsys-rep | head -n 60"

[ "$dry_run" = 1 ] && exit 0

# ---- Summary.
failed=0
{
  printf '%-24s %-6s %s\n' step result seconds
  for i in "${!step_names[@]}"; do
    printf '%-24s %-6s %s\n' "${step_names[$i]}" "${step_results[$i]}" "${step_seconds[$i]}"
    [ "${step_results[$i]}" = FAIL ] && failed=$((failed + 1))
  done
  echo "$failed step(s) failed; total ${SECONDS} s; logs in $out"
} | tee "$out/summary.txt"
exit $((failed > 0))
