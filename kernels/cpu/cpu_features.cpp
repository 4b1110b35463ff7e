#include "kernels/cpu/cpu_features.h"

#include <atomic>

namespace tiergen::kernels {
namespace {

bool cpu_supports_avx2_fma_f16c() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

std::atomic<bool>& avx2_enabled() {
  static std::atomic<bool> enabled{cpu_supports_avx2_fma_f16c()};
  return enabled;
}

}  // namespace

bool use_avx2_kernels() { return avx2_enabled().load(std::memory_order_relaxed); }

void set_avx2_kernels_enabled(bool enabled) {
  avx2_enabled().store(enabled && cpu_supports_avx2_fma_f16c(), std::memory_order_relaxed);
}

}  // namespace tiergen::kernels
