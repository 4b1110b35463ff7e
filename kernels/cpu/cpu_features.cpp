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

bool cpu_supports_avx512_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

std::atomic<bool>& avx512_bf16_enabled() {
  static std::atomic<bool> enabled{cpu_supports_avx512_bf16()};
  return enabled;
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

bool use_avx512_bf16_kernels() { return avx512_bf16_enabled().load(std::memory_order_relaxed); }

void set_avx512_bf16_kernels_enabled(bool enabled) {
  avx512_bf16_enabled().store(enabled && cpu_supports_avx512_bf16(), std::memory_order_relaxed);
}

}  // namespace tiergen::kernels
