#pragma once
// Internals of quantized_matmul(): x prepared once per call and the kernels over a
// range of output columns (portable in quantized_matmul.cpp, AVX2 in
// quantized_matmul_avx2.cpp, AVX-512 BF16 and AMX in quantized_matmul_avx512_bf16.cpp
// and quantized_matmul_amx.cpp).
#include <cstdint>
#include <vector>

#include "kernels/cpu/prefetch_address.h"
#include "kernels/cpu/quantized_matmul.h"
#include "kernels/cpu/row_sequential.h"

namespace tiergen::kernels::detail {

// The SIMD kernels prefetch each group's bytes in the W rows this many tiles ahead: a
// decode row converts every level it reads, so without it W's loads wait on memory in
// line with the arithmetic (4-bit TinyLlama decode at batch 1, in tiles of four W
// rows: 17.4 tok/s without, 19.3 one tile ahead, 19.9 two; the rows of a tile are too
// short for a distance within the row). Measured before the AVX-512 BF16 kernel took a
// decode row's W rows one at a time (row_sequential.h), where it now reaches two W rows
// ahead of one stream that the hardware prefetchers follow anyway. An address past W's
// end is harmless: prefetches never fault.
constexpr int64_t kPrefetchTiles = 2;

// W rows' scales and mins live in arrays of their own, beside the packed levels: two more
// streams, a row's worth of each (64 bytes at k = 2048) per 1 KiB of 4-bit levels, that
// the hardware prefetchers did not keep ahead of. Without this, a decode row's 4-bit
// products on AVX-512 BF16 spent a fifth of their time on the first load of each W row's
// scales (perf, 2-core Zen 5 guest; bench_matmul: 0.79 against 0.66 ms a TinyLlama layer
// at one row, 1.15 against 0.99 at four). The AVX-512 BF16 kernel calls it for the rows
// kMetadataAheadRows past the tile it starts; the AVX2 kernels, bound by their FMA chains,
// gained nothing from it (1.12 against 1.13 ms). Addresses past the arrays are harmless.
constexpr int64_t kMetadataAheadRows = 8;

inline void prefetch_metadata(const QuantizedMatmulArgs& a, const QuantizedLayout& l, int64_t j, int64_t rows) {
  const int64_t first = j * l.groups_per_row * 2, bytes = rows * l.groups_per_row * 2;
  const auto* scales = reinterpret_cast<const uint8_t*>(a.scales);
  const auto* mins = reinterpret_cast<const uint8_t*>(a.mins);
  for (int64_t line = first; line < first + bytes; line += 64) {
    __builtin_prefetch(prefetch_address(scales, line), 0, 3);
    __builtin_prefetch(prefetch_address(mins, line), 0, 3);
  }
}

// x per row as groups of group_size floats (zero past k), in the order the kernel
// reads the levels: for 4 bits on the SIMD paths each group holds its even elements
// first, then its odd ones (matching a byte's low and high nibbles); plus each group's
// sum of x.
struct PreparedX {
  std::vector<float> values;      // [rows, groups * group_size]
  std::vector<uint16_t> values_bf16;  // the same as bf16 bits, for the AVX-512 BF16 kernel
  // values_bf16 again for the AVX-512 BF16 kernel's tiles of kXTileRows rows, group by
  // group: [tile][group][row of the tile][group_size] (rows past the last full tile
  // left out). A tile's rows of one group lie side by side, one run of memory that the
  // kernel reads through one pointer (tile_x_bf16).
  std::vector<uint16_t> tiles_bf16;
  std::vector<float> group_sums;  // [rows, groups]
  int64_t groups = 0;
  int64_t row_len = 0;            // groups * group_size
};

// With as_bf16 (x given as bf16), fills values_bf16 instead of values.
PreparedX prepare_x(const QuantizedMatmulArgs& a, int64_t x_row_stride, bool split_nibbles, bool as_bf16 = false);

// Rows of x per tile of the AVX-512 BF16 kernel (each W level lookup serves them all).
constexpr int64_t kXTileRows = 4;

// Fills x.tiles_bf16 from x.values_bf16 (x prepared as bf16 for `rows` rows).
void tile_x_bf16(PreparedX& x, int64_t rows);

// Output columns [j0, j1) of y for all rows.
void quantized_matmul_columns_portable(const QuantizedMatmulArgs& a, const PreparedX& x, int64_t y_row_stride,
                                       int64_t j0, int64_t j1);
#if defined(__x86_64__)
// Needs group_size % 16 == 0, and x prepared with split_nibbles for 4 bits.
bool quantized_matmul_avx2_supports(QuantFormat format);
// With shared_levels, eight or more rows share each tile's converted levels.
void quantized_matmul_columns_avx2(const QuantizedMatmulArgs& a, const PreparedX& x, int64_t y_row_stride,
                                   int64_t j0, int64_t j1, bool shared_levels);
// Needs 4 bits, group_size % 64 == 0, and x prepared with split_nibbles and as_bf16,
// and tiled (tile_x_bf16) for kXTileRows rows or more.
bool quantized_matmul_avx512_bf16_supports(QuantFormat format);
void quantized_matmul_columns_avx512_bf16(const QuantizedMatmulArgs& a, const PreparedX& x, int64_t y_row_stride,
                                          int64_t j0, int64_t j1);
// AMX (where use_amx_kernels()): 4 bits in groups of a multiple of 64, 8 bits of 32;
// x prepared as bf16 (split nibbles for 4 bits), plus what prepare_x_for_quantized_amx
// adds. Whole tiles only: [j0, j1) must be a multiple of 16 W rows.
bool quantized_matmul_amx_supports(QuantFormat format);
struct AmxX {
  std::vector<uint16_t> times_16;     // 8 bits: 16 x, laid out as x.values_bf16
  std::vector<uint16_t> packed_low;   // more than one row: x.values_bf16 as B tiles
  std::vector<uint16_t> packed_high;  // more than one row, 8 bits: times_16 as B tiles
};
AmxX prepare_x_for_quantized_amx(const QuantizedMatmulArgs& a, const PreparedX& x);
void quantized_matmul_columns_amx(const QuantizedMatmulArgs& a, const PreparedX& x, const AmxX& ax,
                                  int64_t y_row_stride, int64_t j0, int64_t j1);
#endif

}  // namespace tiergen::kernels::detail
