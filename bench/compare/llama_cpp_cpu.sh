#!/usr/bin/env bash
# CPU decode throughput, llama.cpp vs tiergen, on the same LLaMA weights.
#
#   bench/compare/llama_cpp_cpu.sh TIERGEN LLAMA_BUILD_DIR MODEL_DIR BF16_GGUF Q8_0_GGUF Q4_0_GGUF ROUNDS [OUT_DIR]
#
#   TIERGEN          tiergen binary
#   LLAMA_BUILD_DIR  llama.cpp CMake build folder (bin/llama-bench, bin/llama-batched-bench)
#   MODEL_DIR        Hugging Face checkpoint (config.json + model.safetensors) tiergen loads
#   *_GGUF           the same weights as GGUF (bench/compare/make_llama_gguf.py, then llama-quantize)
#   ROUNDS           rounds; each round runs every configuration once, engines interleaved
#   OUT_DIR          raw logs, one per run (default bench/out/llamacpp)
#
# Threads: 2 (THREADS=N overrides; tiergen uses all cores of the machine, so run this
# on a 2-core box or pin the whole script with taskset). Prints one line per run:
#   round=R engine=llama.cpp|tiergen config=NAME batch=B tok_s=X log=FILE
# llama.cpp batch 1: llama-bench tg32 t/s; llama.cpp batch 16: llama-batched-bench S_TG t/s
# (aggregate decode tokens/s over 16 sequences, prompt 16, 32 generated);
# tiergen: the "decode throughput" of `tiergen bench` (prompt 16, 32 generated).
set -euo pipefail

if [ $# -lt 7 ]; then
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
TIERGEN=$1 LLAMA=$2 MODEL=$3 BF16=$4 Q8=$5 Q4=$6 ROUNDS=$7
OUT=${8:-bench/out/llamacpp}
T=${THREADS:-2}
mkdir -p "$OUT"

bench_bin=$LLAMA/bin/llama-bench
batched_bin=$LLAMA/bin/llama-batched-bench
for f in "$TIERGEN" "$bench_bin" "$batched_bin"; do [ -x "$f" ] || { echo "missing $f" >&2; exit 1; }; done

report() {  # round engine config batch value log
    echo "round=$1 engine=$2 config=$3 batch=$4 tok_s=${5:-FAILED} log=$6"
}

llama_b1() {  # round name gguf
    local log=$OUT/r$1-llamacpp-b1-$2.log
    "$bench_bin" -m "$3" -p 0 -n 32 -t "$T" -r 1 >"$log" 2>&1 || true
    # markdown row "| ... | tg32 | 9.84 ± 0.19 |": the last cell's first number
    report "$1" llama.cpp "$2" 1 "$(awk -F'|' '/ tg32 /{split($(NF-1), a, " "); print a[1]}' "$log")" "$log"
}

llama_b16() {  # round name gguf
    local log=$OUT/r$1-llamacpp-b16-$2.log
    "$batched_bin" -m "$3" -c 2048 -b 2048 -ub 512 -npp 16 -ntg 32 -npl 16 -t "$T" >"$log" 2>&1 || true
    # table "| PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | ...": column by name
    report "$1" llama.cpp "$2" 16 "$(awk -F'|' '
        /S_TG t\/s/ { for (i = 1; i <= NF; i++) if ($i ~ /S_TG/) c = i; next }
        c && $2 ~ /^ *[0-9]+ *$/ { v = $c; gsub(/ /, "", v); print v; exit }' "$log")" "$log"
}

tiergen_run() {  # round batch name extra-args...
    local r=$1 b=$2 name=$3; shift 3
    local log=$OUT/r$r-tiergen-b$b-$name.log
    # warm like llama.cpp's benches, which run a warm-up pass before they time
    "$TIERGEN" bench -m "$MODEL" --device cpu --dtype bfloat16 -s 16 -n 32 --gpu-batch-size "$b" \
        --percent 100 0 100 0 100 0 -r 1 --warmup 1 --hw t4-flexgen "$@" >"$log" 2>&1 || true
    report "$r" tiergen "$name" "$b" \
        "$(sed -n 's/.*decode throughput: *\([0-9.]*\) token\/s.*/\1/p' "$log" | head -1)" "$log"
}

for r in $(seq 1 "$ROUNDS"); do
    llama_b1 "$r" bf16 "$BF16"
    tiergen_run "$r" 1 bf16
    llama_b1 "$r" q8_0 "$Q8"
    llama_b1 "$r" q4_0 "$Q4"
    tiergen_run "$r" 1 4bit --compress-weight --compress-bits 4
    llama_b16 "$r" bf16 "$BF16"
    tiergen_run "$r" 16 bf16
    llama_b16 "$r" q4_0 "$Q4"
    tiergen_run "$r" 16 4bit --compress-weight --compress-bits 4
done
