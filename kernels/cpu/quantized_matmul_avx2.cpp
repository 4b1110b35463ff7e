// AVX2/FMA kernel of quantized_matmul(): tiles of four W rows for one x row. Per group,
// four FMA chains sum q_i * x_i over the group's levels (converted from bytes in
// registers), then each chain is folded into its row's accumulator times the group's
// scale; the min_g * sum(x_g) terms are added after the horizontal sum. 4-bit bytes are
// split into their low nibbles (even elements) and high nibbles (odd elements), which
// meet x prepared in that order (prepare_x), so no shuffles are needed.
//
// Many rows of x (prefill, large batches) go through tile_rows instead: a tile's levels
// are converted to floats once per group and read by every row of a block, in the very
// operations and order tile() uses for each row, so a row's result is the same bits
// whichever path computes it, and so does not depend on how many rows share the call.
#if defined(__x86_64__)
#include <algorithm>
#include <vector>

#include "kernels/cpu/half.h"
#include "kernels/cpu/quantized_matmul_impl.h"
#include "kernels/cpu/simd_avx2.h"

namespace tiergen::kernels::detail {
namespace {

constexpr int kTileW = 4;

// Eight bytes as eight int32 lanes.
TG_AVX2 inline __m256i bytes8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

TG_AVX2 inline float half_value(uint16_t h) { return _cvtsh_ss(h); }

template <int Bits, int R>
TG_AVX2 void tile(const QuantizedMatmulArgs& a, const PreparedX& x, int64_t y_row_stride, const QuantizedLayout& l,
                  int64_t j, int64_t m) {
  const int64_t g = a.format.group_size, group_bytes = g * Bits / 8;
  const float* xr = x.values.data() + m * x.row_len;
  const float* sums = x.group_sums.data() + m * x.groups;
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi32(0xF);
  for (int64_t group = 0; group < l.groups_per_row; ++group) {
    const float* xg = xr + group * g;
    // Two chains per row (even/odd elements for 4 bits, alternate steps for 8 bits)
    // halve the FMA latency each group waits on.
    __m256 dot0[R], dot1[R];
    const uint8_t* bytes[R];
    for (int r = 0; r < R; ++r) {
      dot0[r] = _mm256_setzero_ps();
      dot1[r] = _mm256_setzero_ps();
      bytes[r] = a.packed + (j + r) * l.packed_bytes_per_row + group * group_bytes;
      _mm_prefetch(prefetch_address(bytes[r], kPrefetchTiles * R * l.packed_bytes_per_row), _MM_HINT_T0);
    }
    if constexpr (Bits == 8) {
      for (int64_t c = 0; c < g; c += 16) {
        const __m256 x0 = _mm256_loadu_ps(xg + c), x1 = _mm256_loadu_ps(xg + c + 8);
        for (int r = 0; r < R; ++r) {
          dot0[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(bytes8(bytes[r] + c)), x0, dot0[r]);
          dot1[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(bytes8(bytes[r] + c + 8)), x1, dot1[r]);
        }
      }
    } else {
      for (int64_t c = 0; c < g / 2; c += 8) {
        const __m256 even = _mm256_loadu_ps(xg + c), odd = _mm256_loadu_ps(xg + g / 2 + c);
        for (int r = 0; r < R; ++r) {
          const __m256i b = bytes8(bytes[r] + c);
          dot0[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b, low4)), even, dot0[r]);
          dot1[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4)), odd, dot1[r]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m256 scale = _mm256_set1_ps(half_value(a.scales[(j + r) * l.groups_per_row + group]));
      acc[r] = _mm256_fmadd_ps(_mm256_add_ps(dot0[r], dot1[r]), scale, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float sum = avx2::hsum(acc[r]);
    const uint16_t* mins = a.mins + (j + r) * l.groups_per_row;
    for (int64_t group = 0; group < l.groups_per_row; ++group) sum += half_value(mins[group]) * sums[group];
    if (a.bias) sum += a.bias[j + r];
    a.y[m * y_row_stride + j + r] = sum;
  }
}

// The levels of group `group` in W rows j .. j+kTileW-1 as floats, laid out as tile()
// meets them: 8 bits in element order; 4 bits as the group's low nibbles (even
// elements), then its high nibbles (odd elements).
template <int Bits>
TG_AVX2 void convert_levels(const QuantizedMatmulArgs& a, const QuantizedLayout& l, int64_t j, int64_t group,
                            float* levels) {
  const int64_t g = a.format.group_size, group_bytes = g * Bits / 8;
  const __m256i low4 = _mm256_set1_epi32(0xF);
  for (int r = 0; r < kTileW; ++r) {
    const uint8_t* bytes = a.packed + (j + r) * l.packed_bytes_per_row + group * group_bytes;
    float* out = levels + r * g;
    if constexpr (Bits == 8) {
      for (int64_t c = 0; c < g; c += 8) _mm256_storeu_ps(out + c, _mm256_cvtepi32_ps(bytes8(bytes + c)));
    } else {
      for (int64_t c = 0; c < g / 2; c += 8) {
        const __m256i b = bytes8(bytes + c);
        _mm256_storeu_ps(out + c, _mm256_cvtepi32_ps(_mm256_and_si256(b, low4)));
        _mm256_storeu_ps(out + g / 2 + c, _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4)));
      }
    }
  }
}

// Rows [m0, m1) of x, at most kBlockRows, against W rows j .. j+kTileW-1: tile<Bits,
// kTileW>'s arithmetic for each row, with the levels converted once per group for all
// of them. Each row's accumulators wait in `acc` between groups.
constexpr int64_t kBlockRows = 32;

template <int Bits>
TG_AVX2 void tile_rows(const QuantizedMatmulArgs& a, const PreparedX& x, int64_t y_row_stride,
                       const QuantizedLayout& l, int64_t j, int64_t m0, int64_t m1, float* levels) {
  const int64_t g = a.format.group_size;
  alignas(32) float acc[kBlockRows][kTileW][8];
  for (int64_t m = m0; m < m1; ++m)
    for (int r = 0; r < kTileW; ++r) _mm256_store_ps(acc[m - m0][r], _mm256_setzero_ps());
  for (int64_t group = 0; group < l.groups_per_row; ++group) {
    convert_levels<Bits>(a, l, j, group, levels);
    __m256 scale[kTileW];
    for (int r = 0; r < kTileW; ++r) {
      scale[r] = _mm256_set1_ps(half_value(a.scales[(j + r) * l.groups_per_row + group]));
    }
    for (int64_t m = m0; m < m1; ++m) {
      const float* xg = x.values.data() + m * x.row_len + group * g;
      __m256 dot0[kTileW], dot1[kTileW];
      for (int r = 0; r < kTileW; ++r) {
        dot0[r] = _mm256_setzero_ps();
        dot1[r] = _mm256_setzero_ps();
      }
      if constexpr (Bits == 8) {
        for (int64_t c = 0; c < g; c += 16) {
          const __m256 x0 = _mm256_loadu_ps(xg + c), x1 = _mm256_loadu_ps(xg + c + 8);
          for (int r = 0; r < kTileW; ++r) {
            dot0[r] = _mm256_fmadd_ps(_mm256_loadu_ps(levels + r * g + c), x0, dot0[r]);
            dot1[r] = _mm256_fmadd_ps(_mm256_loadu_ps(levels + r * g + c + 8), x1, dot1[r]);
          }
        }
      } else {
        for (int64_t c = 0; c < g / 2; c += 8) {
          const __m256 even = _mm256_loadu_ps(xg + c), odd = _mm256_loadu_ps(xg + g / 2 + c);
          for (int r = 0; r < kTileW; ++r) {
            dot0[r] = _mm256_fmadd_ps(_mm256_loadu_ps(levels + r * g + c), even, dot0[r]);
            dot1[r] = _mm256_fmadd_ps(_mm256_loadu_ps(levels + r * g + g / 2 + c), odd, dot1[r]);
          }
        }
      }
      for (int r = 0; r < kTileW; ++r) {
        float* a_r = acc[m - m0][r];
        _mm256_store_ps(a_r, _mm256_fmadd_ps(_mm256_add_ps(dot0[r], dot1[r]), scale[r], _mm256_load_ps(a_r)));
      }
    }
  }
  for (int64_t m = m0; m < m1; ++m) {
    const float* sums = x.group_sums.data() + m * x.groups;
    for (int r = 0; r < kTileW; ++r) {
      float sum = avx2::hsum(_mm256_load_ps(acc[m - m0][r]));
      const uint16_t* mins = a.mins + (j + r) * l.groups_per_row;
      for (int64_t group = 0; group < l.groups_per_row; ++group) sum += half_value(mins[group]) * sums[group];
      if (a.bias) sum += a.bias[j + r];
      a.y[m * y_row_stride + j + r] = sum;
    }
  }
}

// From this many rows of x on, full tiles go through tile_rows: the levels' conversion
// is then shared by enough rows to pay for the accumulators' trips to memory (4-bit,
// TinyLlama layer, 2-core Zen 4: 0.96x at 4 rows, 1.10x at 8, 1.20x at 16, 1.32x at 64
// and 256; bench_matmul's "shared levels speed-up").
constexpr int64_t kRowsForSharedLevels = 8;

template <int Bits>
TG_AVX2 void columns(const QuantizedMatmulArgs& a, const PreparedX& x, int64_t y_row_stride, int64_t j0, int64_t j1,
                     bool shared_levels) {
  const QuantizedLayout l = quantized_layout(a.n, a.k, a.format);
  int64_t j = j0;
  if (shared_levels && a.rows >= kRowsForSharedLevels && j + kTileW <= j1) {
    thread_local std::vector<float> levels;
    levels.resize(static_cast<size_t>(kTileW * a.format.group_size));
    for (int64_t m0 = 0; m0 < a.rows; m0 += kBlockRows) {
      const int64_t m1 = std::min(a.rows, m0 + kBlockRows);
      for (j = j0; j + kTileW <= j1; j += kTileW) tile_rows<Bits>(a, x, y_row_stride, l, j, m0, m1, levels.data());
    }
  }
  for (; j + kTileW <= j1; j += kTileW)
    for (int64_t m = 0; m < a.rows; ++m) tile<Bits, kTileW>(a, x, y_row_stride, l, j, m);
  for (; j < j1; ++j)
    for (int64_t m = 0; m < a.rows; ++m) tile<Bits, 1>(a, x, y_row_stride, l, j, m);
}

}  // namespace

bool quantized_matmul_avx2_supports(QuantFormat format) {
  return format.group_size % 16 == 0;
}

void quantized_matmul_columns_avx2(const QuantizedMatmulArgs& a, const PreparedX& x, int64_t y_row_stride,
                                   int64_t j0, int64_t j1, bool shared_levels) {
  if (a.format.bits == 8) return columns<8>(a, x, y_row_stride, j0, j1, shared_levels);
  columns<4>(a, x, y_row_stride, j0, j1, shared_levels);
}

}  // namespace tiergen::kernels::detail
#endif  // __x86_64__
