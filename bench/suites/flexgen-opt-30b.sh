# FlexGen, OPT-30B, prompt 512, gen 32, 1x T4 16 GB, 208 GB DRAM (flexgen.txt Table 2:
# 7.32 tok/s with gbs 64 x 2 batches, weights 20% gpu / 80% cpu, KV cache and
# activations on cpu, CPU attention; 4-bit compression 8.38 tok/s).
SUITE_DESC="FlexGen OPT-30B, s=512 n=32, T4-sized budgets"
COMMON="--model opt-30b --dummy --prompt-len 512 --gen-len 32 --gpu-mem 15GiB --cpu-mem 208GB --disk-mem 1500GB --hw configs/hw/t4-flexgen.json"
CASES=(
  "flexgen-policy|--percent 20 80 0 100 0 100 --gpu-batch-size 64 --num-gpu-batches 2 --cpu-attention"
  "flexgen-repo-policy|--percent 20 80 0 100 0 100 --gpu-batch-size 48 --num-gpu-batches 3 --cpu-attention"
  "auto|--policy auto"
  "flexgen-policy-compress|--percent 0 100 0 100 0 100 --gpu-batch-size 64 --num-gpu-batches 8 --compress-cache"
  "auto-compress|--policy auto --compress-weight --compress-cache"
)
