#pragma once
// Runtime choice between the portable kernels and the AVX2/FMA/F16C (AVX-512 BF16, AMX) ones. The build
// uses baseline x86-64 flags, so SIMD code is compiled per function with target
// attributes and picked here once per process from what the CPU reports.
#include <optional>
#include <string>

namespace tiergen::kernels {

// The instruction-set levels of the CPU kernels, lowest first. Each level's kernels
// need the CPU features of every level below it.
enum class CpuIsa { Portable, Avx2, Avx512Bf16, Amx };

// "portable", "avx2", "avx512-bf16", "amx".
const char* cpu_isa_name(CpuIsa isa);
std::optional<CpuIsa> cpu_isa_from_name(const std::string& name);

// The highest level the dispatcher may use: TIERGEN_CPU_ISA (one of the names above)
// caps it for the whole process, so that every kernel path can be tested on a CPU that
// has more (tests/run_isa_levels.sh runs the kernel and placement tests once per level).
// Without the variable there is no cap. Throws tiergen::Error on an unknown name.
CpuIsa cpu_isa_cap();
// The highest level this CPU supports (without the cap), and the level that runs: the
// lower of the two.
CpuIsa cpu_isa_supported();
CpuIsa cpu_isa_in_use();

// True when the AVX2 kernels may run (CPU has AVX2, FMA and F16C, and they are enabled).
bool use_avx2_kernels();

// Enables or disables the AVX2 kernels for the whole process (they are enabled by
// default when supported). Tests use it to check both paths give the same results.
void set_avx2_kernels_enabled(bool enabled);

// True when the AVX-512 BF16 kernels may run (CPU has AVX512F, AVX512BW and
// AVX512_BF16, and they are enabled): bf16 x bf16 dot products with fp32 accumulation
// (vdpbf16ps), twice the multiply-adds per instruction of converting to fp32 first.
bool use_avx512_bf16_kernels();
void set_avx512_bf16_kernels_enabled(bool enabled);

// True when the AMX kernels may run (CPU has AMX-TILE and AMX-BF16 besides AVX-512
// BF16, Linux granted the process the tile data state, and they are enabled): tile
// products of bf16 operands with fp32 accumulation.
bool use_amx_kernels();
void set_amx_kernels_enabled(bool enabled);

// True when the CPU multiplies fp16 operands natively (AVX512-FP16 or AMX-FP16), where
// LibTorch 2.x's CPU fp16 matmul runs through oneDNN. Elsewhere LibTorch has only a
// slow fallback for it (2.x) or none (1.13), and fp16 weights go to small_matmul at
// every row count (small_matmul_max_rows). (oneDNN's AVX2-VNNI-2 fp16 path on some
// newer client and efficiency-core CPUs is not detected: they keep small_matmul.)
bool cpu_has_native_fp16_products();

// True when the CPU multiplies bf16 operands natively (AVX-512 BF16, within the cap),
// where LibTorch's CPU bf16 GEMM runs through oneDNN. Elsewhere products with more rows
// than small_matmul takes widen the weights to fp32 tile by tile instead
// (model::widened_linear_product): on an AVX2 EPYC LibTorch 1.13's bf16 GEMM took 75x
// as long (bench/RESULTS.md). (CPUs with AVX-512 but no BF16, where oneDNN may emulate
// bf16 at better speed, also widen; not measured.)
bool cpu_has_native_bf16_products();

// True on AMD CPUs of family 0x1A on (Zen 5), whose cores read one stream of W front to
// back faster than the few streams a tile of W rows reads side by side
// (small_matmul_one_row_sequential's default).
bool cpu_is_amd_zen5_or_later();

}  // namespace tiergen::kernels
