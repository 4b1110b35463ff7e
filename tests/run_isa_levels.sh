#!/usr/bin/env bash
# Runs the kernel and placement tests once per CPU kernel level below the highest this
# CPU supports (the main suite runs that one), with TIERGEN_CPU_ISA capping the
# dispatcher: a CI machine with AMX also tests the AVX-512 BF16, AVX2 and portable
# kernels, and the routing that depends on them (bf16 GEMMs widened to fp32 where the
# level has no native bf16 products). Each level's run checks that the cap took effect
# (CpuIsa.TheCapHoldsOverEveryKernelSwitch with TIERGEN_EXPECT_CPU_ISA).
#
# Usage: tests/run_isa_levels.sh TIERGEN_BINARY TESTS_BINARY
set -euo pipefail
tiergen=$1
tests=$2
filter='SmallMatmul.*:LinearProduct.*:CpuIsa.*:QuantizedMatmul.*:KernelsAttention.*:KernelsQuantize.*:KernelsHalf.*'
filter+=':RmsNormKernel.*:RotaryKernel.*:SiluGateKernel.*:ForwardTest.*:PolicyTest.*:PolicyReference.*:QuantizedWeights.*'
filter+=':CpuWeightCompute.*:AttentionRange.*'

version=$(env -u TIERGEN_CPU_ISA "$tiergen" --version)
supported=$(sed -n 's/.*this CPU supports up to \([a-z0-9-]*\).*/\1/p' <<<"$version")
[ -n "$supported" ] || { echo "run_isa_levels: no CPU level in tiergen --version: $version" >&2; exit 1; }
echo "$version"

ran=0
for level in portable avx2 avx512-bf16 amx; do
  [ "$level" = "$supported" ] && break
  echo "== TIERGEN_CPU_ISA=$level"
  capped=$(TIERGEN_CPU_ISA=$level "$tiergen" --version)
  grep -q "CPU kernels: $level " <<<"$capped" || { echo "run_isa_levels: the cap did not hold: $capped" >&2; exit 1; }
  TIERGEN_CPU_ISA=$level TIERGEN_EXPECT_CPU_ISA=$level "$tests" --gtest_filter="$filter" --gtest_brief=1
  ran=$((ran + 1))
done
# An unknown level is refused with the valid names before any command runs, not ignored.
if out=$(TIERGEN_CPU_ISA=avx512 "$tiergen" --version 2>&1); then
  echo "run_isa_levels: TIERGEN_CPU_ISA=avx512 was accepted: $out" >&2
  exit 1
fi
grep -q "TIERGEN_CPU_ISA=avx512 is not a CPU kernel level: use portable, avx2" <<<"$out" ||
  { echo "run_isa_levels: unclear refusal: $out" >&2; exit 1; }
echo "run_isa_levels: $ran level(s) below $supported passed"
