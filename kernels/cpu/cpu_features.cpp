#include "kernels/cpu/cpu_features.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "tiergen/common/error.h"

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

// The x86 family as CPUID leaf 1 reports it: base family, plus the extended family
// where the base is 0xF.
unsigned cpu_x86_family() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
  const unsigned base = (eax >> 8) & 0xFu;
  return base == 0xFu ? base + ((eax >> 20) & 0xFFu) : base;
#else
  return 0;
#endif
}

bool cpu_vendor_is_amd() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_is("amd");
#else
  return false;
#endif
}

// The cap, read once: TIERGEN_CPU_ISA, or no cap.
CpuIsa read_cpu_isa_cap() {
  const char* value = std::getenv("TIERGEN_CPU_ISA");
  if (value == nullptr || *value == '\0') return CpuIsa::Amx;
  const std::optional<CpuIsa> isa = cpu_isa_from_name(value);
  TG_CHECK(isa.has_value(), "TIERGEN_CPU_ISA={} is not a CPU kernel level: use portable, avx2, avx512-bf16 or amx",
           value);
  return *isa;
}

bool allowed(CpuIsa level) { return level <= cpu_isa_cap(); }

// Each level's kernels are available when the CPU has them and the cap allows them.
bool avx2_available() {
  static const bool available = cpu_supports_avx2_fma_f16c() && allowed(CpuIsa::Avx2);
  return available;
}
bool avx512_bf16_available() {
  static const bool available = cpu_supports_avx512_bf16() && allowed(CpuIsa::Avx512Bf16);
  return available;
}
bool amx_available() {
  static const bool available = allowed(CpuIsa::Amx) && cpu_supports_amx_bf16();
  return available;
}

std::atomic<bool>& amx_enabled() {
  static std::atomic<bool> enabled{amx_available()};
  return enabled;
}

std::atomic<bool>& avx512_bf16_enabled() {
  static std::atomic<bool> enabled{avx512_bf16_available()};
  return enabled;
}

std::atomic<bool>& avx2_enabled() {
  static std::atomic<bool> enabled{avx2_available()};
  return enabled;
}

}  // namespace

bool use_avx2_kernels() { return avx2_enabled().load(std::memory_order_relaxed); }

void set_avx2_kernels_enabled(bool enabled) {
  avx2_enabled().store(enabled && avx2_available(), std::memory_order_relaxed);
}

bool use_avx512_bf16_kernels() { return avx512_bf16_enabled().load(std::memory_order_relaxed); }

void set_avx512_bf16_kernels_enabled(bool enabled) {
  avx512_bf16_enabled().store(enabled && avx512_bf16_available(), std::memory_order_relaxed);
}

bool use_amx_kernels() { return amx_enabled().load(std::memory_order_relaxed); }

void set_amx_kernels_enabled(bool enabled) {
  amx_enabled().store(enabled && amx_available(), std::memory_order_relaxed);
}

bool cpu_has_native_fp16_products() {
  static const bool native = cpu_supports_fp16_products() && allowed(CpuIsa::Avx512Bf16);
  return native;
}

bool cpu_has_native_bf16_products() { return avx512_bf16_available(); }

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Portable: return "portable";
    case CpuIsa::Avx2: return "avx2";
    case CpuIsa::Avx512Bf16: return "avx512-bf16";
    case CpuIsa::Amx: return "amx";
  }
  return "unknown";
}

std::optional<CpuIsa> cpu_isa_from_name(const std::string& name) {
  for (CpuIsa isa : {CpuIsa::Portable, CpuIsa::Avx2, CpuIsa::Avx512Bf16, CpuIsa::Amx}) {
    if (name == cpu_isa_name(isa)) return isa;
  }
  return std::nullopt;
}

CpuIsa cpu_isa_cap() {
  static const CpuIsa cap = read_cpu_isa_cap();
  return cap;
}

CpuIsa cpu_isa_supported() {
  static const CpuIsa supported = cpu_supports_amx_bf16()       ? CpuIsa::Amx
                                  : cpu_supports_avx512_bf16()   ? CpuIsa::Avx512Bf16
                                  : cpu_supports_avx2_fma_f16c() ? CpuIsa::Avx2
                                                                 : CpuIsa::Portable;
  return supported;
}

CpuIsa cpu_isa_in_use() { return std::min(cpu_isa_supported(), cpu_isa_cap()); }

bool cpu_is_amd_zen5_or_later() { return cpu_vendor_is_amd() && cpu_x86_family() >= 0x1Au; }

}  // namespace tiergen::kernels
