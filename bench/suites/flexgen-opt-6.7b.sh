# FlexGen, OPT-6.7B, prompt 512, gen 32, on FlexGen's machine: 1x T4 16 GB, 208 GB DRAM,
# 1.5 TB SSD (flexgen.txt Table 2: 25.26 tok/s; 4-bit compression 29.12 tok/s).
# Policies from FlexGen's benchmark/flexgen/bench_suite.py (suite_6b7_1x1, _comp) and
# the cost-model search. Run with: bench/run_suite.sh flexgen-opt-6.7b [-- --device cuda]
SUITE_DESC="FlexGen OPT-6.7B, s=512 n=32, T4-sized budgets"
COMMON="--model opt-6.7b --dummy --prompt-len 512 --gen-len 32 --gpu-mem 15GiB --cpu-mem 208GB --disk-mem 1500GB --hw configs/hw/t4-flexgen.json"
CASES=(
  "flexgen-policy|--percent 100 0 100 0 100 0 --gpu-batch-size 2 --overlap off"
  "auto|--policy auto"
  "flexgen-policy-compress|--percent 100 0 100 0 100 0 --gpu-batch-size 72 --overlap off --compress-weight --compress-cache"
  "auto-compress|--policy auto --compress-weight --compress-cache"
)
