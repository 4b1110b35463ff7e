#pragma once
// Runtime choice between the portable kernels and the AVX2/FMA/F16C ones. The build
// uses baseline x86-64 flags, so SIMD code is compiled per function with target
// attributes and picked here once per process from what the CPU reports.
namespace tiergen::kernels {

// True when the AVX2 kernels may run (CPU has AVX2, FMA and F16C, and they are enabled).
bool use_avx2_kernels();

// Enables or disables the AVX2 kernels for the whole process (they are enabled by
// default when supported). Tests use it to check both paths give the same results.
void set_avx2_kernels_enabled(bool enabled);

}  // namespace tiergen::kernels
