#include "kernels/cpu/cpu_features.h"

#include <atomic>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tiergen::kernels {
namespace {

// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know
// "f16c". The AVX2 check covers the OS saving the YMM state.
bool cpu_supports_avx2_fma_f16c() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
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

// Linux hands out the AMX tile data state only on request, once per process
// (arch_prctl ARCH_REQ_XCOMP_PERM); a tile instruction before it is SIGILL.
bool cpu_supports_amx_bf16() {
#if defined(__x86_64__) && defined(__linux__)
  if (!cpu_supports_avx512_bf16()) return false;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool amx_bf16 = (edx >> 22) & 1u, amx_tile = (edx >> 24) & 1u;
  if (!amx_bf16 || !amx_tile) return false;
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

// AVX512-FP16: CPUID leaf 7 subleaf 0, EDX bit 23; AMX-FP16: subleaf 1, EAX bit 21.
// Both need the OS to save the AVX-512 state, which __builtin_cpu_supports checks.
bool cpu_supports_fp16_products() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f")) return false;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  if ((edx >> 23) & 1u) return true;
  return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && ((eax >> 21) & 1u);
#else
  return false;
#endif
}

std::atomic<bool>& amx_enabled() {
  static std::atomic<bool> enabled{cpu_supports_amx_bf16()};
  return enabled;
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

bool use_amx_kernels() { return amx_enabled().load(std::memory_order_relaxed); }

void set_amx_kernels_enabled(bool enabled) {
  static const bool supported = cpu_supports_amx_bf16();
  amx_enabled().store(enabled && supported, std::memory_order_relaxed);
}

bool cpu_has_native_fp16_products() {
  static const bool native = cpu_supports_fp16_products();
  return native;
}

}  // namespace tiergen::kernels
