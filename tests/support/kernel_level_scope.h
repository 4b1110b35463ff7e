#pragma once
// Kernel levels for a scope (the portable row, AVX2, or all this CPU has), restored on
// leaving it whatever a failed assertion or an exception skips.
#include "kernels/cpu/cpu_features.h"

namespace tiergen::test {

class KernelLevelScope {
 public:
  KernelLevelScope(bool avx2, bool avx512) {
    kernels::set_avx2_kernels_enabled(avx2);
    kernels::set_avx512_bf16_kernels_enabled(avx512);
  }
  ~KernelLevelScope() {
    kernels::set_avx2_kernels_enabled(true);
    kernels::set_avx512_bf16_kernels_enabled(true);
  }
  KernelLevelScope(const KernelLevelScope&) = delete;
  KernelLevelScope& operator=(const KernelLevelScope&) = delete;
};

}  // namespace tiergen::test
