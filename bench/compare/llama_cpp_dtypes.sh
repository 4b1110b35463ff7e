#!/usr/bin/env bash
# Prefill, decode and total throughput on the CPU, llama.cpp against tiergen, in every
# dtype pairing, on the same LLaMA weights; tiergen's cost-model predictions beside its
# measurements.
#
#   bench/compare/llama_cpp_dtypes.sh TIERGEN LLAMA_BUILD_DIR MODEL_DIR GGUF_PREFIX ROUNDS [OUT_DIR]
#
#   TIERGEN          tiergen binary
#   LLAMA_BUILD_DIR  llama.cpp CMake build folder (bin/llama-bench, bin/llama-batched-bench)
#   MODEL_DIR        Hugging Face checkpoint (config.json + model.safetensors, bf16)
#   GGUF_PREFIX      the same weights as GGUF: PREFIX-f32.gguf, -bf16, -q8_0, -q4_0
#                    (bench/compare/make_llama_gguf.py writes bf16; llama-quantize the rest)
#   ROUNDS           rounds; each runs every configuration once, engines interleaved
#   OUT_DIR          raw logs and bench records (default bench/out/llamacpp-dtypes)
#
# Environment: THREADS (default 2), PROMPT (128), GEN (32), BATCHES ("1 16"),
# HW (a hardware profile for tiergen's predictions; default: this host's cached one).
# tiergen uses every core of the machine: run on a host with THREADS cores, or pin the
# whole script with taskset.
#
# One CSV line per run on stdout (header first):
#   round,engine,config,batch,prefill_tok_s,decode_tok_s,total_tok_s,predicted_prefill,predicted_decode,log
# Throughputs as tiergen defines them: prefill = prompt tokens / prefill seconds,
# decode = decode tokens / decode seconds, total = generated tokens / (prefill + decode
# seconds). llama.cpp batch 1: llama-bench pp(PROMPT) and tg(GEN); batch B > 1:
# llama-batched-bench S_PP and S_TG over B sequences of their own prompts.
# Every engine runs warm: llama-bench and llama-batched-bench run a warm-up pass before
# they time, so tiergen's bench does too (--warmup 1). A cold tiergen run pays for first
# touches of its buffers and thread start-up inside a 128-token prefill (at batch 1 on a
# 2-core Zen 4: 515-628 prefill tok/s cold, 667-693 warm).
set -euo pipefail

if [ $# -lt 5 ]; then
    sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
TIERGEN=$1 LLAMA=$2 MODEL=$3 PREFIX=$4 ROUNDS=$5
OUT=${6:-bench/out/llamacpp-dtypes}
T=${THREADS:-2} P=${PROMPT:-128} G=${GEN:-32} BATCHES=${BATCHES:-"1 16"}
mkdir -p "$OUT"

bench_bin=$LLAMA/bin/llama-bench
batched_bin=$LLAMA/bin/llama-batched-bench
for f in "$TIERGEN" "$bench_bin" "$batched_bin"; do [ -x "$f" ] || { echo "missing $f" >&2; exit 1; }; done
for q in f32 bf16 q8_0 q4_0; do [ -f "$PREFIX-$q.gguf" ] || { echo "missing $PREFIX-$q.gguf" >&2; exit 1; }; done

# total = generated / (prefill seconds + decode seconds), from the two rates.
total_of() {  # batch prefill_rate decode_rate
    awk -v b="$1" -v pp="$2" -v tg="$3" -v p="$P" -v g="$G" \
        'BEGIN { if (pp > 0 && tg > 0) printf "%.3f", b * g / (b * p / pp + b * g / tg) }'
}

llama_run() {  # round config batch
    local r=$1 q=$2 b=$3 log=$OUT/r$1-llamacpp-b$3-$2.log pp tg
    if [ "$b" = 1 ]; then
        "$bench_bin" -m "$PREFIX-$q.gguf" -p "$P" -n "$G" -t "$T" -r 1 >"$log" 2>&1 || true
        # markdown rows "| ... | pp128 | 85.1 ± 0.2 |": the last cell's first number
        pp=$(awk -F'|' -v t="pp$P" '$0 ~ " " t " " {split($(NF-1), a, " "); print a[1]}' "$log")
        tg=$(awk -F'|' -v t="tg$G" '$0 ~ " " t " " {split($(NF-1), a, " "); print a[1]}' "$log")
    else
        "$batched_bin" -m "$PREFIX-$q.gguf" -c $(((P + G) * b + 64)) -b 2048 -ub 512 -npp "$P" -ntg "$G" -npl "$b" \
            -t "$T" >"$log" 2>&1 || true
        # table "| PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | ...": columns by name
        read -r pp tg < <(awk -F'|' '
            /S_TG t\/s/ { for (i = 1; i <= NF; i++) { if ($i ~ /S_PP/) cp = i; if ($i ~ /S_TG/) ct = i }; next }
            ct && $2 ~ /^ *[0-9]+ *$/ { a = $cp; b = $ct; gsub(/ /, "", a); gsub(/ /, "", b); print a, b; exit }' "$log")
    fi
    echo "$r,llama.cpp,$q,$b,${pp:-FAILED},${tg:-FAILED},$(total_of "$b" "${pp:-0}" "${tg:-0}"),,,$log"
}

tiergen_run() {  # round config batch dtype extra-args...
    local r=$1 name=$2 b=$3 dtype=$4; shift 4
    local log=$OUT/r$r-tiergen-b$b-$name.log record=$OUT/r$r-tiergen-b$b-$name.json
    local hw=()
    [ -n "${HW:-}" ] && hw=(--hw "$HW")
    rm -f "$record"
    "$TIERGEN" bench -m "$MODEL" --device cpu --dtype "$dtype" -s "$P" -n "$G" --gpu-batch-size "$b" \
        --num-prompts "$b" --percent 100 0 100 0 100 0 -r 1 --warmup 1 --json "$record" "${hw[@]}" "$@" \
        >"$log" 2>&1 || true
    if [ -s "$record" ]; then
        /usr/bin/env python3 - "$record" "$r" "$name" "$b" "$log" <<'EOF'
import json, sys
rec = json.load(open(sys.argv[1]))
median = rec.get
pred = ((rec.get("predicted_vs_measured") or {}).get("throughput") or {}).get("predicted") or {}
f = lambda x: "" if x is None else f"{x:.3f}"
print(",".join([sys.argv[2], "tiergen", sys.argv[3], sys.argv[4], f(median("prefill_throughput")),
                f(median("decode_throughput")), f(median("total_throughput")), f(pred.get("prefill")),
                f(pred.get("decode")), sys.argv[5]]))
EOF
    else
        echo "$r,tiergen,$name,$b,FAILED,FAILED,,,,$log"
    fi
}

echo "round,engine,config,batch,prefill_tok_s,decode_tok_s,total_tok_s,predicted_prefill,predicted_decode,log"
for r in $(seq 1 "$ROUNDS"); do
    for b in $BATCHES; do
        llama_run "$r" f32 "$b"
        tiergen_run "$r" fp32 "$b" float32
        llama_run "$r" bf16 "$b"
        tiergen_run "$r" bf16 "$b" bfloat16
        llama_run "$r" q8_0 "$b"
        llama_run "$r" q4_0 "$b"
        tiergen_run "$r" 4bit "$b" bfloat16 --compress-weight --compress-bits 4
    done
done
