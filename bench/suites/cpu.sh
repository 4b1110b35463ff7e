# CPU-only suite: runs on a 2-core machine without a GPU in a few minutes. --device cpu
# makes host memory stand in for the GPU tier; its small budget (--gpu-mem) forces offloading,
# except in the *all-gpu cases (the baselines), and
# part of the weights lives on the disk tier (files under --offload-dir). Models: the
# OPT-125M preset on dummy weights, and a small LLaMA-style model with grouped-query
# attention that bench/cpu_suite.sh writes with make-tiny-model ($TINY_LLAMA).
# Workloads are tiny (s=16, n=4, 4 prompts) because float32 CPU compute is slow; the
# auto case keeps the searched placement but fixes the batch at 2 x 2 (the search, with
# the default T4 profile, picks 512 prompts).
SUITE_DESC="CPU-only: opt-125m and a small LLaMA (GQA), --device cpu, offloaded to cpu and disk"
COMMON="--device cpu --dummy --cpu-mem 2GiB --disk-mem 4GiB -s 16 -n 4"
CASES=(
  "opt125m-all-gpu|--model opt-125m --gpu-mem 1GiB --gpu-batch-size 2 --num-gpu-batches 2 --percent 100 0 100 0 100 0"
  "opt125m-w-cpu-disk|--model opt-125m --gpu-mem 512MiB --gpu-batch-size 2 --num-gpu-batches 2 --percent 30 30 100 0 100 0"
  "opt125m-w-disk-kv-cpu-cpuattn|--model opt-125m --gpu-mem 512MiB --gpu-batch-size 2 --num-gpu-batches 2 --percent 30 30 0 100 100 0 --cpu-attention"
  "llama-gqa-all-gpu|--model \$TINY_LLAMA --gpu-mem 256MiB --gpu-batch-size 2 --num-gpu-batches 2 --percent 100 0 100 0 100 0"
  "llama-gqa-w-disk-kv-cpu-cpuattn|--model \$TINY_LLAMA --gpu-mem 128MiB --gpu-batch-size 2 --num-gpu-batches 2 --percent 30 40 0 100 100 0 --cpu-attention"
  "llama-gqa-compress|--model \$TINY_LLAMA --gpu-mem 128MiB --gpu-batch-size 2 --num-gpu-batches 2 --percent 30 40 0 100 100 0 --compress-weight --compress-cache"
  "llama-gqa-auto-placement|--model \$TINY_LLAMA --gpu-mem 128MiB --policy auto --gpu-batch-size 2 --num-gpu-batches 2"
)
