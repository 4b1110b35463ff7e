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
#include <vector>

#include "kernels/cpu/half.h"
#include "kernels/cpu/quantized_matmul_impl.h"
#include "kernels/cpu/simd_avx512_bf16.h"

namespace tiergen::kernels::detail {
namespace {

constexpr int kTileW = 4;       // rows of W per tile
constexpr int64_t kChunk = 32;  // packed bytes (64 levels) per step

// Word i holds bf16(i & 15): the lookup needs no mask for the low nibble, whose
// neighbour bit (the high nibble's lowest) selects the table's second half.
TG_AVX512_BF16 inline __m512i level_table() {
  alignas(64) uint16_t t[32];
  for (int i = 0; i < 32; ++i) t[i] = uint16_t(float_to_bits(float(i & 15)) >> 16);
  return _mm512_load_si512(t);
}

// sum_g min_g * sum(x_g) for one W row, 16 groups per step.
TG_AVX512_BF16 inline float min_terms(const uint16_t* mins, const float* sums, int64_t groups) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; g += 16) {
    const int64_t count = groups - g >= 16 ? 16 : groups - g;
    const __mmask16 mask = __mmask16((1u << count) - 1);
    acc = _mm512_fmadd_ps(avx512::load_halves(mins + g, count), _mm512_maskz_loadu_ps(mask, sums + g), acc);
  }
  return avx512::lane_sum(acc);
}

// The scales of W rows [j, j + R) as floats, so that each group's scale is a broadcast
// from memory (a load, not a conversion and a shuffle on the vector ports).
template <int R>
TG_AVX512_BF16 void widen_scales(const QuantizedMatmulArgs& a, const QuantizedLayout& l, int64_t j, float* out) {
  const int64_t count = R * l.groups_per_row;
  const uint16_t* h = a.scales + j * l.groups_per_row;
  for (int64_t i = 0; i < count; i += 16) {
    const int64_t n = count - i >= 16 ? 16 : count - i;
    _mm512_mask_storeu_ps(out + i, __mmask16((1u << n) - 1), avx512::load_halves(h + i, n));
  }
}

template <int R>
TG_AVX512_BF16 void tile(const QuantizedMatmulArgs& a, const PreparedX& x, int64_t y_row_stride,
                         const QuantizedLayout& l, const __m512i table, const float* scales, int64_t j, int64_t m) {
  const int64_t g = a.format.group_size, group_bytes = g / 2;
  const uint16_t* xr = x.values_bf16.data() + m * x.row_len;
  const float* sums = x.group_sums.data() + m * x.groups;
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t group = 0; group < l.groups_per_row; ++group) {
    const uint16_t* xg = xr + group * g;
    __m512 dot[R];
    const uint8_t* bytes[R];
    for (int r = 0; r < R; ++r) {
      dot[r] = _mm512_setzero_ps();
      bytes[r] = a.packed + (j + r) * l.packed_bytes_per_row + group * group_bytes;
    }
    for (int r = 0; r < R; ++r)
      _mm_prefetch(prefetch_address(bytes[r], kPrefetchTiles * R * l.packed_bytes_per_row), _MM_HINT_T0);
    for (int64_t c = 0; c < group_bytes; c += kChunk) {
      const __m512bh even = (__m512bh)_mm512_loadu_si512(xg + c);
      const __m512bh odd = (__m512bh)_mm512_loadu_si512(xg + group_bytes + c);
      for (int r = 0; r < R; ++r) {
        const __m512i b = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes[r] + c)));
        const __m512bh low = (__m512bh)_mm512_permutexvar_epi16(b, table);
        const __m512bh high = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(b, 4), table);
        dot[r] = _mm512_dpbf16_ps(dot[r], low, even);
        dot[r] = _mm512_dpbf16_ps(dot[r], high, odd);
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 scale = _mm512_set1_ps(scales[r * l.groups_per_row + group]);
      acc[r] = _mm512_fmadd_ps(dot[r], scale, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float sum = avx512::lane_sum(acc[r]) + min_terms(a.mins + (j + r) * l.groups_per_row, sums, l.groups_per_row);
    if (a.bias) sum += a.bias[j + r];
    a.y[m * y_row_stride + j + r] = sum;
  }
}

}  // namespace

bool quantized_matmul_avx512_bf16_supports(QuantFormat format) {
  return format.bits == 4 && format.group_size % (2 * kChunk) == 0;
}

TG_AVX512_BF16 void quantized_matmul_columns_avx512_bf16(const QuantizedMatmulArgs& a, const PreparedX& x,
                                                         int64_t y_row_stride, int64_t j0, int64_t j1) {
  const QuantizedLayout l = quantized_layout(a.n, a.k, a.format);
  const __m512i table = level_table();
  std::vector<float> scales(size_t(kTileW * l.groups_per_row));
  int64_t j = j0;
  for (; j + kTileW <= j1; j += kTileW) {
    widen_scales<kTileW>(a, l, j, scales.data());
    for (int64_t m = 0; m < a.rows; ++m) tile<kTileW>(a, x, y_row_stride, l, table, scales.data(), j, m);
  }
  for (; j < j1; ++j) {
    widen_scales<1>(a, l, j, scales.data());
    for (int64_t m = 0; m < a.rows; ++m) tile<1>(a, x, y_row_stride, l, table, scales.data(), j, m);
  }
}

}  // namespace tiergen::kernels::detail
#endif  // __x86_64__
