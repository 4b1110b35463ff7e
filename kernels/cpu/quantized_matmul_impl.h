#pragma once
// Internals of quantized_matmul(): x prepared once per call and the kernels over a
// range of output columns (portable in quantized_matmul.cpp, AVX2 in
// quantized_matmul_avx2.cpp).
#include <cstdint>
#include <vector>

#include "kernels/cpu/quantized_matmul.h"

namespace tiergen::kernels::detail {

// x per row as groups of group_size floats (zero past k), in the order the kernel
// reads the levels: for 4 bits on the AVX2 path each group holds its even elements
// first, then its odd ones (matching a byte's low and high nibbles); plus each group's
// sum of x.
struct PreparedX {
  std::vector<float> values;      // [rows, groups * group_size]
  std::vector<float> group_sums;  // [rows, groups]
  int64_t groups = 0;
  int64_t row_len = 0;            // groups * group_size
};

PreparedX prepare_x(const QuantizedMatmulArgs& a, int64_t x_row_stride, bool split_nibbles);

// Output columns [j0, j1) of y for all rows.
void quantized_matmul_columns_portable(const QuantizedMatmulArgs& a, const PreparedX& x, int64_t y_row_stride,
                                       int64_t j0, int64_t j1);
#if defined(__x86_64__)
// Needs group_size % 16 == 0, and x prepared with split_nibbles for 4 bits.
bool quantized_matmul_avx2_supports(QuantFormat format);
void quantized_matmul_columns_avx2(const QuantizedMatmulArgs& a, const PreparedX& x, int64_t y_row_stride,
                                   int64_t j0, int64_t j1);
#endif

}  // namespace tiergen::kernels::detail
