#!/usr/bin/env bash
# tools/gpu-check.sh --dry-run on a machine without a GPU: it succeeds, lists every
# step with its command, runs nothing and writes nothing.
# Usage: check_gpu_check_dry_run.sh TIERGEN_ROOT
set -uo pipefail
root=${1:?tiergen root}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

listing=$(TIERGEN_GPU_BUILD="$out/never-built" bash "$root/tools/gpu-check.sh" "$out/logs" --dry-run 2>&1)
rc=$?
[ "$rc" = 0 ] || fail "the dry run exited with status $rc"

steps=(facts deps configure build linkage ctest cuda-tests golden tiny-models equality-opt-float32 equality-opt-float16
  equality-llama-float32 equality-llama-float16 overlap decode-layers cpu-attention memcheck default-budget cpu-matmul profile nsys)
i=0
for s in "${steps[@]}"; do
  i=$((i + 1))
  grep -qx "== step $(printf %02d $i) $s" <<< "$listing" || fail "step $i '$s' is not listed in its place"
done
# The commands each step would run are shown, with the settings the GPU host needs.
for expected in "nvidia-smi" "TORCH_CUDA_ARCH_LIST=9.0 cmake" "-DTIERGEN_ENABLE_CUDA=ON" "ctest --test-dir" \
    "for each of the 12 placements" "--device cuda --dtype float32" "--device cuda --dtype float16" \
    "for ngb in 1 2 3" "--percent 100 0 100 0 100 0" "compute-sanitizer --tool memcheck" "--device cuda --policy auto" "beyond <= reserve" "trace-summary.py" "--cpu-attention-batches 2" \
    "bench_matmul --hidden 4096" "profile --out" "nsys stats"; do
  grep -qF -- "$expected" <<< "$listing" || fail "no '$expected' in the listing"
done
[ "$(grep -c '^  \[' <<< "$listing")" -ge 48 ] || fail "fewer than 12 placements per model and dtype"
# Nothing ran: no logs, no build folder.
[ -z "$(ls -A "$out/logs" 2>/dev/null)" ] || fail "the dry run wrote into OUTDIR: $(ls "$out/logs")"
[ ! -e "$out/never-built" ] || fail "the dry run created the build folder"

[ "$failures" = 0 ] && echo "gpu-check dry run: ${#steps[@]} steps listed"
[ "$failures" = 0 ] || echo "$listing"
exit $((failures > 0))
