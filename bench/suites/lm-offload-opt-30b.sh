# LM-Offload, OPT-30B, prompt 64, gen 8..128 on 1x A100 40 GB, 240 GB DRAM, PCIe 4.0
# (lm-offload.txt: 117-144 tok/s against FlexGen's 41-56). Policies from the search
# with LM-Offload's quantization-aware cost model and the A100 profile.
SUITE_DESC="LM-Offload OPT-30B, s=64 n=8..128, A100-40GB budgets"
COMMON="--model opt-30b --dummy --prompt-len 64 --gpu-mem 38GiB --cpu-mem 240GB --disk-mem 1500GB --hw configs/hw/a100-40gb-pcie4.json --policy auto"
CASES=(
  "gen8|--gen-len 8"
  "gen16|--gen-len 16"
  "gen32|--gen-len 32"
  "gen64|--gen-len 64"
  "gen128|--gen-len 128"
  "gen32-compress|--gen-len 32 --compress-weight --compress-cache"
)
