# FlexGen, OPT-175B, prompt 512, gen 32, 1x T4 16 GB, 208 GB DRAM, 1.5 TB SSD
# (flexgen.txt Table 2: 0.69 tok/s with gbs 32 x 8, weights 0% gpu / 50% cpu / 50% disk,
# CPU attention; 4-bit compression 1.12 tok/s with gbs 48 x 3, everything on cpu).
# The disk tier must be a real SSD with ~190 GB free: set --offload-dir to it.
SUITE_DESC="FlexGen OPT-175B, s=512 n=32, T4-sized budgets"
COMMON="--model opt-175b --dummy --prompt-len 512 --gen-len 32 --gpu-mem 15GiB --cpu-mem 208GB --disk-mem 1500GB --hw configs/hw/t4-flexgen.json"
CASES=(
  "flexgen-policy|--percent 0 50 0 0 0 100 --gpu-batch-size 32 --num-gpu-batches 8 --cpu-attention"
  "auto|--policy auto"
  "flexgen-policy-compress|--percent 0 100 0 100 0 100 --gpu-batch-size 48 --num-gpu-batches 3 --compress-weight --compress-cache"
  "auto-compress|--policy auto --compress-weight --compress-cache"
)
