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

constexpr int kTileW = 4;       // rows of W per tile
constexpr int64_t kChunk = 32;  // packed bytes (64 levels) per step

// The result of W row j times x row m: the lanes of its accumulator, each group's min
// term, the bias.
TG_AVX512_BF16 inline void store_result(const QuantizedMatmulArgs& a, const PreparedX& x, int64_t y_row_stride,
                                        const QuantizedLayout& l, __m512 acc, int64_t j, int64_t m) {
  const float* sums = x.group_sums.data() + m * x.groups;
  float sum = avx512::lane_sum(acc) + min_terms(a.mins + j * l.groups_per_row, sums, l.groups_per_row);
  if (a.bias) sum += a.bias[j];
  a.y[m * y_row_stride + j] = sum;
}

// W rows [j, j + R) times x row m. Per W row and group: the group's levels looked up
// chunk by chunk (two dot products each, low nibbles with the even elements, high with
// the odd), then folded into the row's accumulator times the group's scale. x_tile
// below sums every (W row, x row) pair in this same order, so a row's result does not
// depend on the rows around it. The loop over R is unrolled explicitly: left to -O3,
// GCC 12 kept one W row's accumulators in memory, a store and a reload per group (1.66
// against 1.46 ms for a TinyLlama layer at one row of x, before the row-by-row order).
template <int R>
TG_AVX512_BF16 void x_row(const QuantizedMatmulArgs& a, const PreparedX& x, int64_t y_row_stride,
                          const QuantizedLayout& l, const __m512i table, const float* scales, int64_t j, int64_t m) {
  const int64_t g = a.format.group_size, group_bytes = g / 2;
  const uint16_t* xr = x.values_bf16.data() + m * x.row_len;
  __m512 acc[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t group = 0; group < l.groups_per_row; ++group) {
    __m512 dot[R];
    const uint8_t* bytes[R];
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      dot[r] = _mm512_setzero_ps();
      bytes[r] = a.packed + (j + r) * l.packed_bytes_per_row + group * group_bytes;
      _mm_prefetch(prefetch_address(bytes[r], kPrefetchTiles * R * l.packed_bytes_per_row), _MM_HINT_T0);
    }
    for (int64_t chunk = 0; chunk < group_bytes; chunk += kChunk) {
      const __m512bh even = (__m512bh)_mm512_loadu_si512(xr + group * g + chunk);
      const __m512bh odd = (__m512bh)_mm512_loadu_si512(xr + group * g + group_bytes + chunk);
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m512i b = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes[r] + chunk)));
        const __m512bh low = (__m512bh)_mm512_permutexvar_epi16(b, table);
        const __m512bh high = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(b, 4), table);
        dot[r] = _mm512_dpbf16_ps(dot[r], low, even);
        dot[r] = _mm512_dpbf16_ps(dot[r], high, odd);
      }
    }
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(dot[r], _mm512_set1_ps(scales[r * l.groups_per_row + group]), acc[r]);
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) store_result(a, x, y_row_stride, l, acc[r], j + r, m);
}

// W rows [j, j + R) times the kXTileRows rows of x's tile `tile` (x.tiles_bf16): each W
// level lookup serves the tile's rows. The tile's rows of a group lie side by side, so
// with the group size G known (64 to 256; 0: read from the format) one pointer reaches
// them at fixed offsets: R x 4 accumulators, four dot products and a few vectors stay in
// registers. With G read at run time GCC 12 kept a pointer per row and spilled: groups of
// 128 took 6.1 against 5.3 ms at 16 rows, 1.8 against 1.6 at 4, slower than the tiles of
// two W rows before (4.9 and 1.3 ms with G known).
// Against tiles of two W rows times four x rows read through a pointer per row, a
// TinyLlama layer's 4-bit products (groups of 64; 2-core Zen 5 guest, interleaved,
// bench/RESULTS.md) took 4.8-5.1 against 7.7-8.1 ms at 16 rows of x, 2.6-2.8 against
// 3.9-4.0 at 8, 1.6-2.0 against 1.8-2.2 at 4: each tile of x meets four W rows while
// they are in L1, not two, so x is read from L2 half as often, and no pointer spills.
template <int R, int64_t G>
TG_AVX512_BF16 void x_tile(const QuantizedMatmulArgs& a, const PreparedX& x, int64_t y_row_stride,
                           const QuantizedLayout& l, const __m512i table, const float* scales, int64_t j, int64_t tile) {
  constexpr int C = int(kXTileRows);
  const int64_t g = G ? G : a.format.group_size, group_bytes = g / 2;
  const uint16_t* xt = x.tiles_bf16.data() + tile * C * x.row_len;
  __m512 acc[R][C];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t group = 0; group < l.groups_per_row; ++group, xt += C * g) {
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const uint8_t* bytes = a.packed + (j + r) * l.packed_bytes_per_row + group * group_bytes;
      _mm_prefetch(prefetch_address(bytes, kPrefetchTiles * R * l.packed_bytes_per_row), _MM_HINT_T0);
      __m512 dot[C];
      #pragma GCC unroll 16
      for (int c = 0; c < C; ++c) dot[c] = _mm512_setzero_ps();
      for (int64_t chunk = 0; chunk < group_bytes; chunk += kChunk) {
        const __m512i b = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes + chunk)));
        const __m512bh low = (__m512bh)_mm512_permutexvar_epi16(b, table);
        const __m512bh high = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(b, 4), table);
        #pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
          dot[c] = _mm512_dpbf16_ps(dot[c], low, (__m512bh)_mm512_loadu_si512(xt + c * g + chunk));
          dot[c] = _mm512_dpbf16_ps(dot[c], high, (__m512bh)_mm512_loadu_si512(xt + c * g + group_bytes + chunk));
        }
      }
      const __m512 scale = _mm512_set1_ps(scales[r * l.groups_per_row + group]);
      #pragma GCC unroll 16
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(dot[c], scale, acc[r][c]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 16
    for (int c = 0; c < C; ++c) store_result(a, x, y_row_stride, l, acc[r][c], j + r, tile * C + c);
}

// x_tile for a format's group size: one of the sizes it knows at compile time, else the
// one that reads it from the format.
template <int R>
using XTile = void (*)(const QuantizedMatmulArgs&, const PreparedX&, int64_t, const QuantizedLayout&, __m512i,
                       const float*, int64_t, int64_t);

template <int R>
XTile<R> x_tile_for(int64_t group_size) {
  switch (group_size) {
    case 64: return &x_tile<R, 64>;
    case 128: return &x_tile<R, 128>;
    case 192: return &x_tile<R, 192>;
    case 256: return &x_tile<R, 256>;
    default: return &x_tile<R, 0>;
  }
}

// W rows [j, j + R) times every row of x: x's tiles, then the rows past them one by one.
template <int R>
TG_AVX512_BF16 void all_rows(const QuantizedMatmulArgs& a, const PreparedX& x, int64_t y_row_stride,
                             const QuantizedLayout& l, const __m512i table, const float* scales, int64_t j) {
  const int64_t tiles = a.rows / kXTileRows;
  const XTile<R> tile_of_x = x_tile_for<R>(a.format.group_size);
  for (int64_t tile = 0; tile < tiles; ++tile) tile_of_x(a, x, y_row_stride, l, table, scales, j, tile);
  for (int64_t m = tiles * kXTileRows; m < a.rows; ++m) x_row<R>(a, x, y_row_stride, l, table, scales, j, m);
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
  // (kRowSequentialMaxRows). More rows: four W rows per tile keep four chains in flight
  // for each row of x alone, and each level lookup serves a tile's four rows of x.
  if (a.rows <= kRowSequentialMaxRows) return columns<1>(a, x, y_row_stride, j0, j1);
  columns<kTileW>(a, x, y_row_stride, j0, j1);
}

}  // namespace tiergen::kernels::detail
#endif  // __x86_64__
