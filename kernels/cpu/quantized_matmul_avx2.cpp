// AVX2/FMA kernel of quantized_matmul(): tiles of four W rows for one x row. Per group,
// four FMA chains sum q_i * x_i over the group's levels (converted from bytes in
// registers), then each chain is folded into its row's accumulator times the group's
// scale; the min_g * sum(x_g) terms are added after the horizontal sum. 4-bit bytes are
// split into their low nibbles (even elements) and high nibbles (odd elements), which
// meet x prepared in that order (prepare_x), so no shuffles are needed.
#if defined(__x86_64__)
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

template <int Bits>
TG_AVX2 void columns(const QuantizedMatmulArgs& a, const PreparedX& x, int64_t y_row_stride, int64_t j0, int64_t j1) {
  const QuantizedLayout l = quantized_layout(a.n, a.k, a.format);
  int64_t j = j0;
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
                                   int64_t j0, int64_t j1) {
  if (a.format.bits == 8) return columns<8>(a, x, y_row_stride, j0, j1);
  columns<4>(a, x, y_row_stride, j0, j1);
}

}  // namespace tiergen::kernels::detail
#endif  // __x86_64__
