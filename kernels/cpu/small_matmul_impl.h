#pragma once
// Internals of small_matmul(): the kernels that compute a range of output columns
// (rows of W) for every row of x. Portable in small_matmul.cpp, the SIMD ones in
// small_matmul_<isa>.cpp; the caller splits the columns between threads.
#include <cstdint>
#include <vector>

#include "kernels/cpu/row_sequential.h"
#include "kernels/cpu/small_matmul.h"

namespace tiergen::kernels::detail {

// x as the kernel reads it (fp32, or bf16 for the AVX-512 BF16 kernel) and the
// resolved row strides (the 0 defaults of SmallMatmulArgs filled in).
struct SmallMatmulShape {
  const float* x_f32 = nullptr;
  const uint16_t* x_bf16 = nullptr;
  const uint16_t* x_amx = nullptr;  // x_bf16 packed into AMX B tiles (amx::pack_rows)
  // x_f32's rows in pairs for the AVX-512 fp32 kernel (x_rows_in_pairs): pair q holds
  // rows 2q and 2q + 1 eight elements at a time, twice k rounded down to eight floats
  // (zeros for a missing last row).
  const float* x_pairs = nullptr;
  int64_t x_row_stride = 0;
  int64_t y_row_stride = 0;
  // small_matmul_blocking(), read once per call before the threads start (its first
  // read checks TIERGEN_SMALL_MATMUL_BLOCKING, which must not throw inside them).
  bool blocking = true;
  // small_matmul_one_row_sequential(), read once per call likewise.
  bool one_row_sequential = false;
};

// Output columns [j0, j1) of y for all rows of x (s.x_f32).
void small_matmul_columns_portable(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j0, int64_t j1);
// x_f32 (rows x k, s.x_row_stride apart) as SmallMatmulShape::x_pairs lays it out.
std::vector<float> x_rows_in_pairs(const float* x, int64_t rows, int64_t k, int64_t x_row_stride);

#if defined(__x86_64__)
void small_matmul_columns_avx2(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j0, int64_t j1);
// W rows [j0, j1) (16-bit elements) widened exactly to fp32, row after row, k apart, into
// `out`: what the fp32-x kernels then read as fp32 weights, with the same bits.
void widen_w_rows_avx2(const SmallMatmulArgs& a, int64_t j0, int64_t j1, float* out);
// Whether the AVX-512 fp32 kernel multiplies a's weights widened to fp32 first (16-bit
// weights, many rows of x; small_matmul_widened_w.cpp), and that product: a's chunks of W
// rows each widened into its thread's buffer, then multiplied as fp32 weights.
bool widens_w(const SmallMatmulArgs& a);
void small_matmul_over_widened_w(const SmallMatmulArgs& a, const SmallMatmulShape& s);
// Needs AVX-512F and s.x_pairs; the same bits as small_matmul_columns_avx2.
void small_matmul_columns_avx512_f32(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j0, int64_t j1);
// BF16 weights and BF16 x (s.x_bf16) only.
void small_matmul_columns_avx512_bf16(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j0, int64_t j1);
// AMX: BF16 weights and BF16 x, with s.x_amx (amx_tiles.h's pack_rows of x) as well as s.x_bf16.
void small_matmul_columns_amx(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j0, int64_t j1);
#endif

}  // namespace tiergen::kernels::detail
