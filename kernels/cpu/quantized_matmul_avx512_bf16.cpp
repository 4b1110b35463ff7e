// AVX-512 BF16 kernel of quantized_matmul() for 4-bit weights times bf16 activations
// (QuantizedMatmulArgs::x_bf16). A level q in 0..15 is a bf16 value
// exactly, so each byte's two nibbles become bf16 through one table lookup (vpermw),
// and vdpbf16ps multiplies 32 level/x pairs (exact products) into 16 fp32 lanes:
// per 64 weights of one W row, one widening load, one shift, two lookups and two
// dot-product instructions, against eight conversions and multiply-adds in fp32.
// x is prepared as the AVX2 kernel reads it (a group's even elements, then its odd
// ones), so the low nibbles meet the even elements without shuffles. Per group the
// dot products are folded into the row's accumulator times the group's scale; the
// min_g * sum(x_g) terms are a second vector sum over groups. Like the instruction,
// results treat bf16 subnormal inputs as zero.
#if defined(__x86_64__)
#include <algorithm>
#include <vector>

#include "kernels/cpu/quantized_levels_avx512.h"
#include "kernels/cpu/quantized_matmul_impl.h"

namespace tiergen::kernels::detail {
namespace {

constexpr int kTileW = 4;       // rows of W per tile, with fewer than kTileX rows of x
constexpr int kTileWMany = 2;   // rows of W per tile, with kTileX or more rows of x
constexpr int kTileX = 4;       // rows of x per tile
constexpr int64_t kChunk = 32;  // packed bytes (64 levels) per step

// W rows [j, j + R) times x rows [m, m + C): each W byte's levels are looked up once
// and multiplied with all C rows of x. Every (W row, x row) pair sums in the same order
// whatever R and C are, so a row's result does not depend on the rows around it.
// The loops over R and C are unrolled explicitly: left to -O3, GCC 12 kept one W row's
// accumulators in memory, a store and a reload per group (1.66 against 1.46 ms for a
// TinyLlama layer at one row of x, before the row-by-row order).
template <int R, int C>
TG_AVX512_BF16 void tile(const QuantizedMatmulArgs& a, const PreparedX& x, int64_t y_row_stride,
                         const QuantizedLayout& l, const __m512i table, const float* scales, int64_t j, int64_t m) {
  const int64_t g = a.format.group_size, group_bytes = g / 2;
  const uint16_t* xr[C];
  #pragma GCC unroll 16
  for (int c = 0; c < C; ++c) xr[c] = x.values_bf16.data() + (m + c) * x.row_len;
  __m512 acc[R][C];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t group = 0; group < l.groups_per_row; ++group) {
    __m512 dot[R][C];
    const uint8_t* bytes[R];
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      #pragma GCC unroll 16
      for (int c = 0; c < C; ++c) dot[r][c] = _mm512_setzero_ps();
      bytes[r] = a.packed + (j + r) * l.packed_bytes_per_row + group * group_bytes;
      _mm_prefetch(prefetch_address(bytes[r], kPrefetchTiles * R * l.packed_bytes_per_row), _MM_HINT_T0);
    }
    for (int64_t chunk = 0; chunk < group_bytes; chunk += kChunk) {
      __m512bh even[C], odd[C];
      #pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        even[c] = (__m512bh)_mm512_loadu_si512(xr[c] + group * g + chunk);
        odd[c] = (__m512bh)_mm512_loadu_si512(xr[c] + group * g + group_bytes + chunk);
      }
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m512i b = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes[r] + chunk)));
        const __m512bh low = (__m512bh)_mm512_permutexvar_epi16(b, table);
        const __m512bh high = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(b, 4), table);
        #pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
          dot[r][c] = _mm512_dpbf16_ps(dot[r][c], low, even[c]);
          dot[r][c] = _mm512_dpbf16_ps(dot[r][c], high, odd[c]);
        }
      }
    }
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 scale = _mm512_set1_ps(scales[r * l.groups_per_row + group]);
      #pragma GCC unroll 16
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(dot[r][c], scale, acc[r][c]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    #pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const float* sums = x.group_sums.data() + (m + c) * x.groups;
      float sum = avx512::lane_sum(acc[r][c]) + min_terms(a.mins + (j + r) * l.groups_per_row, sums, l.groups_per_row);
      if (a.bias) sum += a.bias[j + r];
      a.y[(m + c) * y_row_stride + j + r] = sum;
    }
  }
}

// W rows [j, j + R) times every row of x: tiles of kTileX rows of x, then single rows.
template <int R>
TG_AVX512_BF16 void all_rows(const QuantizedMatmulArgs& a, const PreparedX& x, int64_t y_row_stride,
                             const QuantizedLayout& l, const __m512i table, const float* scales, int64_t j) {
  int64_t m = 0;
  for (; m + kTileX <= a.rows; m += kTileX) tile<R, kTileX>(a, x, y_row_stride, l, table, scales, j, m);
  for (; m < a.rows; ++m) tile<R, 1>(a, x, y_row_stride, l, table, scales, j, m);
}

// The W rows whose scales are widened at once: a chunk of columns (column_chunks.h).
// Widened a tile at a time, each group's scale was read back right after the masked
// store that wrote it, and perf put 1.5% of 4-bit decode at batch 1 on that store
// (2-core Zen 5 guest).
constexpr int64_t kScaleRows = 16;

// Columns [j0, j1) in blocks of kScaleRows W rows, each in tiles of R W rows, then single
// rows.
template <int R>
TG_AVX512_BF16 void columns(const QuantizedMatmulArgs& a, const PreparedX& x, int64_t y_row_stride, int64_t j0,
                            int64_t j1) {
  static_assert(kScaleRows % R == 0, "a tile's W rows lie in one block of widened scales");
  const QuantizedLayout l = quantized_layout(a.n, a.k, a.format);
  const __m512i table = level_table();
  std::vector<float> scales(size_t(kScaleRows * l.groups_per_row));
  for (int64_t block = j0; block < j1; block += kScaleRows) {
    const int64_t block_end = std::min(j1, block + kScaleRows);
    widen_scales(a, l, block, block_end - block, scales.data());
    int64_t j = block;
    for (; j + R <= block_end; j += R) {
      prefetch_metadata(a, l, j + kMetadataAheadRows, R);
      all_rows<R>(a, x, y_row_stride, l, table, scales.data() + (j - block) * l.groups_per_row, j);
    }
    for (; j < block_end; ++j) {
      prefetch_metadata(a, l, j + kMetadataAheadRows, 1);
      all_rows<1>(a, x, y_row_stride, l, table, scales.data() + (j - block) * l.groups_per_row, j);
    }
  }
}

}  // namespace

bool quantized_matmul_avx512_bf16_supports(QuantFormat format) {
  return format.bits == 4 && format.group_size % (2 * kChunk) == 0;
}

TG_AVX512_BF16 void quantized_matmul_columns_avx512_bf16(const QuantizedMatmulArgs& a, const PreparedX& x,
                                                         int64_t y_row_stride, int64_t j0, int64_t j1) {
  // One row of x (decode at batch 1): one W row at a time, W read front to back
  // (kRowSequentialMaxRows). Up to three rows: four W rows per tile keep four chains in
  // flight. More rows: two W rows times four x rows (16 accumulators and 8 x vectors of
  // the 32 registers), so each level lookup serves four rows.
  if (a.rows <= kRowSequentialMaxRows) return columns<1>(a, x, y_row_stride, j0, j1);
  if (a.rows < kTileX) return columns<kTileW>(a, x, y_row_stride, j0, j1);
  columns<kTileWMany>(a, x, y_row_stride, j0, j1);
}

}  // namespace tiergen::kernels::detail
#endif  // __x86_64__
