// AMX kernel of quantized_matmul() for 4- and 8-bit weights times bf16 activations,
// where the CPU has AMX-BF16 (Sapphire Rapids and later). The vector kernels
// (quantized_matmul_avx512_bf16.cpp for 4 bits) multiply with vdpbf16ps, which costs
// about as much port time as four FMAs for 32 products; here the tile unit does the
// products and the vector ports only turn levels into bf16 values (exact: levels are
// integers below 256):
// - A tiles: 16 W rows x 32 nibbles. Per unit (32 packed bytes of a row), one widening
//   load, one shift and two table lookups give the low and the high nibbles as two A
//   tiles' rows. 4 bits: they are the levels of the group's even and odd elements.
//   8 bits: a level is low + 16 high, so the high nibbles meet 16 x (exact in bf16),
//   and 8-bit weights cost the lookups of 4-bit ones per byte (in a microbenchmark,
//   two conversions to float and one to bf16 per 32 levels took 26 ns per unit of 16
//   rows, the nibbles 15; in the decode, reading W bounds both).
// - B tiles: x as the vector kernels read it (4 bits: a group's even elements, then its
//   odd ones; 8 bits: in order, and 16 x beside it), one column per row of x: read in
//   place for one row of x, packed for more.
// - C: one tile per group, scaled by the rows' group scales into fp32 accumulators.
// The lookups run two units ahead of the tile products, and a group's C is read back
// one group later, so neither waits on the store before it (a tile load or a vector
// load right after the stores that feed it costs more than the products themselves).
// Every (W row, x row) pair runs the same steps in the same order whatever the number
// of x rows, so a row's result does not depend on the rows around it. Whole tiles of 16
// W rows only: quantized_matmul() gives a matrix's last n % 16 rows to a vector kernel,
// for every row count alike.
#if defined(__x86_64__)
#include <algorithm>
#include <vector>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/quantized_levels_avx512.h"
#include "kernels/cpu/quantized_matmul_impl.h"

namespace tiergen::kernels::detail {
namespace {

using amx::kTileRows;
constexpr int64_t kUnitBytes = 32;                 // packed bytes of one W row per unit
constexpr int64_t kUnitsAhead = 2;                 // lookups run this many units ahead
constexpr int64_t kLevelBuffers = kUnitsAhead + 1;

// Levels of one W row per unit.
template <int Bits>
constexpr int64_t unit_levels() {
  return kUnitBytes * 8 / Bits;
}

// Tiles: 0 and 1 hold C of even and odd groups; 2 and 3 the A tiles (low and high
// nibbles); 4 and 5 the B tiles they meet. The tile intrinsics take the register
// number as a literal.
amx::TileConfig tile_config(int64_t x_columns) {
  amx::TileConfig c;
  for (int t = 0; t < 6; ++t) {
    c.rows[t] = kTileRows;
    c.colsb[t] = uint16_t(4 * x_columns);  // C: fp32 per x row; B: a pair of bf16 per x row
  }
  c.colsb[2] = c.colsb[3] = 64;  // A: 32 bf16 levels
  return c;
}

// One unit of 16 W rows as bf16 levels, 64 bytes a row: the low and the high nibbles of
// its 32 bytes.
struct alignas(64) UnitLevels {
  uint16_t low[kTileRows * 32];
  uint16_t high[kTileRows * 32];
};

TG_AMX void look_up_levels(const QuantizedMatmulArgs& a, const QuantizedLayout& l, const __m512i table, int64_t j,
                           int64_t unit, UnitLevels& out) {
  for (int64_t r = 0; r < kTileRows; ++r) {
    const uint8_t* bytes = a.packed + (j + r) * l.packed_bytes_per_row + unit * kUnitBytes;
    const __m512i b = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes)));
    _mm512_store_si512(out.low + r * 32, _mm512_permutexvar_epi16(b, table));
    _mm512_store_si512(out.high + r * 32, _mm512_permutexvar_epi16(_mm512_srli_epi16(b, 4), table));
  }
}

// The next 16 W rows are one contiguous block of units * 512 bytes: each unit of this
// tile brings the matching 512 bytes of it into L2. Sixteen rows read 32 bytes at a
// time are too many streams for the hardware prefetcher; without this a W streamed from
// memory ran at 6.3 GB/s on one thread instead of 7.9 (the vector kernel: 9.2), and
// 4-bit TinyLlama decode at batch 1 at 0.7x the vector kernel instead of on par.
TG_AMX inline void prefetch_next_tile(const QuantizedMatmulArgs& a, const QuantizedLayout& l, int64_t j,
                                      int64_t unit) {
  constexpr int64_t kTileUnitBytes = kTileRows * kUnitBytes;
  const uint8_t* next = a.packed + (j + kTileRows) * l.packed_bytes_per_row + unit * kTileUnitBytes;
  for (int64_t line = 0; line < kTileUnitBytes; line += 64) {
    _mm_prefetch(prefetch_address(next, line), _MM_HINT_T1);
  }
}

// Where one block of x rows lives as B tiles: the operand of the low-nibble tile and
// that of the high-nibble tile (4 bits: both in one array, the odd elements g / 2
// after the even ones; 8 bits: x and 16 x, at the same offsets).
struct XTiles {
  const uint16_t* low;   // one row: that row's prepared x; more: its packed block
  const uint16_t* high;
  int64_t stride;        // bytes between B tile rows (pairs of k)
  bool packed;

  // The B tile of 32 elements from `offset` (a multiple of 32) of the prepared row.
  const uint16_t* at(const uint16_t* base, int64_t offset) const {
    return packed ? base + (offset / amx::kStepK) * amx::kPackedStep : base + offset;
  }
};

// The B operands of one block of x rows (`packed_offset` into the packed arrays).
XTiles x_tiles(const QuantizedMatmulArgs& a, const PreparedX& x, const AmxX& ax, int64_t packed_offset,
               int64_t x_columns) {
  const bool eight = a.format.bits == 8;
  if (x_columns == 1) {
    const uint16_t* low = x.values_bf16.data();
    return XTiles{low, eight ? ax.times_16.data() : low, 4, false};
  }
  const uint16_t* low = ax.packed_low.data() + packed_offset;
  return XTiles{low, eight ? ax.packed_high.data() + packed_offset : low, 64, true};
}

// C (tile C_TILE) += the unit's low nibbles times B_LOW, then its high nibbles times
// B_HIGH.
#define TG_AMX_UNIT_PRODUCTS(C_TILE, LEVELS, B_LOW, B_HIGH, STRIDE) \
  do {                                                             \
    _tile_loadd(2, (LEVELS).low, 64);                              \
    _tile_loadd(4, (B_LOW), (STRIDE));                             \
    _tile_dpbf16ps(C_TILE, 2, 4);                                  \
    _tile_loadd(3, (LEVELS).high, 64);                             \
    _tile_loadd(5, (B_HIGH), (STRIDE));                            \
    _tile_dpbf16ps(C_TILE, 3, 5);                                  \
  } while (0)

// fp32 accumulators of 16 W rows times the block's x rows, and the group fold into them.
struct Accumulators {
  int64_t x_columns;
  __m512 one_row;                            // x_columns == 1: lane r is W row r
  alignas(64) float rows[kTileRows * kTileRows];  // more: [W row][x row]

  // products: the group's C as stored (one row of x: 16 floats; more: 16 rows of 16);
  // scales: the 16 W rows' scales as floats, [row][groups].
  TG_AMX void fold(const float* products, const float* scales, int64_t groups, int64_t group) {
    if (x_columns == 1) {
      const __m512i rows_at = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                 _mm512_set1_epi32(int(groups)));
      // The masked form: GCC 12's unmasked gather trips -Wmaybe-uninitialized in its header.
      const __m512 row_scales =
          _mm512_mask_i32gather_ps(_mm512_setzero_ps(), __mmask16(0xFFFF), rows_at, scales + group, 4);
      one_row = _mm512_fmadd_ps(_mm512_load_ps(products), row_scales, one_row);
      return;
    }
    for (int64_t r = 0; r < kTileRows; ++r) {
      float* acc = rows + r * kTileRows;
      _mm512_store_ps(acc, _mm512_fmadd_ps(_mm512_load_ps(products + r * kTileRows),
                                           _mm512_set1_ps(scales[r * groups + group]), _mm512_load_ps(acc)));
    }
  }

  TG_AMX float sum(int64_t w_row, int64_t x_row) const {
    if (x_columns == 1) {
      alignas(64) float lanes[kTileRows];
      _mm512_store_ps(lanes, one_row);
      return lanes[w_row];
    }
    return rows[w_row * kTileRows + x_row];
  }
};

// W rows [j, j + 16) times one block of x rows (x_rows of them, from first_x_row).
template <int Bits>
TG_AMX void tile_products(const QuantizedMatmulArgs& a, const PreparedX& x, const XTiles& b, int64_t y_row_stride,
                          const QuantizedLayout& l, const __m512i table, const float* scales, int64_t j,
                          int64_t first_x_row, int64_t x_rows, int64_t x_columns) {
  const int64_t g = a.format.group_size, units_per_group = g / unit_levels<Bits>();
  const int64_t groups = l.groups_per_row, units = groups * units_per_group;
  const int64_t c_stride = x_columns == 1 ? 4 : 4 * kTileRows;
  UnitLevels levels[kLevelBuffers];
  alignas(64) float c[2][kTileRows * kTileRows];
  Accumulators acc{x_columns, _mm512_setzero_ps(), {}};
  for (int64_t u = 0; u < std::min(kUnitsAhead, units); ++u) look_up_levels(a, l, table, j, u, levels[u]);
  // Unit u = group * units_per_group + unit_in_group uses levels[u % kLevelBuffers];
  // counters instead of divisions, which would cost as much as a unit's lookups.
  int64_t u = 0, buffer = 0, ahead_buffer = kUnitsAhead % kLevelBuffers;
  for (int64_t group = 0; group < groups; ++group) {
    for (int64_t unit_in_group = 0; unit_in_group < units_per_group; ++unit_in_group, ++u) {
      if (u + kUnitsAhead < units) look_up_levels(a, l, table, j, u + kUnitsAhead, levels[ahead_buffer]);
      prefetch_next_tile(a, l, j, u);
      const bool first = unit_in_group == 0, last = unit_in_group == units_per_group - 1;
      // x offsets: 4 bits, the unit's even elements and its odd ones; 8 bits, its
      // elements in both arrays.
      const int64_t low_x = group * g + unit_in_group * 32, high_x = Bits == 4 ? low_x + g / 2 : low_x;
      const uint16_t *b_low = b.at(b.low, low_x), *b_high = b.at(b.high, high_x);
      const UnitLevels& unit = levels[buffer];
      if (group % 2 == 0) {
        if (first) _tile_zero(0);
        TG_AMX_UNIT_PRODUCTS(0, unit, b_low, b_high, b.stride);
        if (last) _tile_stored(0, c[0], c_stride);
      } else {
        if (first) _tile_zero(1);
        TG_AMX_UNIT_PRODUCTS(1, unit, b_low, b_high, b.stride);
        if (last) _tile_stored(1, c[1], c_stride);
      }
      buffer = buffer + 1 == kLevelBuffers ? 0 : buffer + 1;
      ahead_buffer = ahead_buffer + 1 == kLevelBuffers ? 0 : ahead_buffer + 1;
    }
    if (group > 0) acc.fold(c[(group - 1) % 2], scales, groups, group - 1);
  }
  acc.fold(c[(groups - 1) % 2], scales, groups, groups - 1);
  for (int64_t n = 0; n < x_rows; ++n) {
    const int64_t m = first_x_row + n;
    const float* group_sums = x.group_sums.data() + m * x.groups;
    for (int64_t r = 0; r < kTileRows; ++r) {
      float sum = acc.sum(r, n) + min_terms(a.mins + (j + r) * groups, group_sums, groups);
      if (a.bias) sum += a.bias[j + r];
      a.y[m * y_row_stride + j + r] = sum;
    }
  }
}
#undef TG_AMX_UNIT_PRODUCTS

}  // namespace

bool quantized_matmul_amx_supports(QuantFormat format) {
  return (format.bits == 4 && format.group_size % unit_levels<4>() == 0) ||
         (format.bits == 8 && format.group_size % unit_levels<8>() == 0);
}

namespace {

// 16 x as bf16 bits: exact (the exponent plus 4), zero for zeros and subnormals (which
// tiles read as zero), infinities and NaNs as they are, overflow to infinity.
uint16_t times_16(uint16_t bits) {
  const int exponent = (bits >> 7) & 0xFF;
  if (exponent == 0) return 0;
  if (exponent == 0xFF) return bits;
  if (exponent + 4 >= 0xFF) return uint16_t((bits & 0x8000) | 0x7F80);
  return uint16_t(bits + (4 << 7));
}

}  // namespace

AmxX prepare_x_for_quantized_amx(const QuantizedMatmulArgs& a, const PreparedX& x) {
  AmxX t;
  if (a.format.bits == 8) {
    t.times_16.resize(x.values_bf16.size());
    for (size_t i = 0; i < x.values_bf16.size(); ++i) t.times_16[i] = times_16(x.values_bf16[i]);
  }
  if (a.rows > 1) {
    t.packed_low = amx::pack_rows(x.values_bf16.data(), a.rows, x.row_len, x.row_len);
    if (a.format.bits == 8) t.packed_high = amx::pack_rows(t.times_16.data(), a.rows, x.row_len, x.row_len);
  }
  return t;
}

TG_AMX void quantized_matmul_columns_amx(const QuantizedMatmulArgs& a, const PreparedX& x, const AmxX& ax,
                                         int64_t y_row_stride, int64_t j0, int64_t j1) {
  const QuantizedLayout l = quantized_layout(a.n, a.k, a.format);
  const __m512i table = level_table();
  // One row of x reads its prepared row in place as a 1-column B tile; more rows read
  // 16-column packed blocks (zero past the last row).
  const int64_t x_columns = a.rows == 1 ? 1 : kTileRows;
  const int64_t steps = x.row_len / amx::kStepK;
  const amx::TileConfig config = tile_config(x_columns);
  std::vector<float> scales(size_t(kTileRows * l.groups_per_row));
  _tile_loadconfig(&config);
  for (int64_t j = j0; j + kTileRows <= j1; j += kTileRows) {
    widen_scales(a, l, j, kTileRows, scales.data());
    for (int64_t block = 0; block < amx::x_blocks(a.rows); ++block) {
      const int64_t first = block * kTileRows, rows = std::min(kTileRows, a.rows - first);
      const XTiles b = x_tiles(a, x, ax, block * steps * amx::kPackedStep, x_columns);
      if (a.format.bits == 4) {
        tile_products<4>(a, x, b, y_row_stride, l, table, scales.data(), j, first, rows, x_columns);
      } else {
        tile_products<8>(a, x, b, y_row_stride, l, table, scales.data(), j, first, rows, x_columns);
      }
    }
  }
  _tile_release();
}

}  // namespace tiergen::kernels::detail
#endif  // __x86_64__
