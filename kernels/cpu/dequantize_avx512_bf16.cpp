// AVX-512 BF16 row of dequantize() for 4-bit levels into bf16, fp16 or fp32: a prefill's
// products of compressed weights multiply dequantized copies of them. 32 levels per step
// from 16 packed bytes, twice as fast as the AVX2 row's eight (a TinyLlama MLP matrix on a
// 2-core Zen 5 guest: 0.38-0.40 against 0.75-0.77 ms). Every element gets the AVX2 row's
// value, bit for bit: level * scale + min as one FMA (the product is exact: a level below
// 16 times an fp16 scale), then nearest-even rounding: vcvtps2ph for fp16 as the AVX2 row
// does, and for bf16 vcvtne2ps2bf16 (which treats subnormals as zero: a dequantized value
// is a multiple of 2^-24, fp16's step, so it is zero or normal, and the AVX2 row's integer
// rounding gives the same bits). The group's last levels short of 32 take the AVX2 row's
// scalar form.
#if defined(__x86_64__)
#include <algorithm>

#include "kernels/cpu/half.h"
#include "kernels/cpu/quant_group.h"
#include "kernels/cpu/quantize_rows.h"
#include "kernels/cpu/simd_avx512_bf16.h"

namespace tiergen::kernels::detail {
namespace {

// Levels i .. i + 31 of a group (packed two per byte, the even one in the low nibble)
// as two vectors of 16 fp32 lanes. (The zero-masked widening and conversions, here and
// below: GCC 12's unmasked forms trip -Wmaybe-uninitialized inside its own header.)
TG_AVX512_BF16 inline void load32_levels_q4(const uint8_t* bytes, __m512* first, __m512* second) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes));
  const __m128i nibble = _mm_set1_epi8(0x0F);
  const __m128i even = _mm_and_si128(b, nibble);
  const __m128i odd = _mm_and_si128(_mm_srli_epi16(b, 4), nibble);
  *first = _mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_maskz_cvtepu8_epi32(0xFFFF, _mm_unpacklo_epi8(even, odd)));
  *second = _mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_maskz_cvtepu8_epi32(0xFFFF, _mm_unpackhi_epi8(even, odd)));
}

template <ElemType Type>
TG_AVX512_BF16 void dequantize_q4_row(const uint8_t* packed, const uint16_t* mins, const uint16_t* scales,
                                      int64_t cols, int g, void* dst) {
  const int64_t group_bytes = g / 2;
  for (int64_t k = 0, j0 = 0; j0 < cols; ++k, j0 += g) {
    const float lo = half_to_float(mins[k]), scale = half_to_float(scales[k]);
    const __m512 vmin = _mm512_set1_ps(lo), vscale = _mm512_set1_ps(scale);
    const int n = int(std::min<int64_t>(g, cols - j0));
    const uint8_t* pg = packed + k * group_bytes;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
      __m512 first, second;
      load32_levels_q4(pg + i / 2, &first, &second);
      first = _mm512_fmadd_ps(first, vscale, vmin);
      second = _mm512_fmadd_ps(second, vscale, vmin);
      if constexpr (Type == ElemType::BF16) {
        auto* out = static_cast<uint16_t*>(dst) + j0 + i;
        _mm512_storeu_si512(out, (__m512i)_mm512_cvtne2ps_pbh(second, first));
      } else if constexpr (Type == ElemType::F16) {
        auto* out = static_cast<uint16_t*>(dst) + j0 + i;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_maskz_cvtps_ph(0xFFFF, first, _MM_FROUND_TO_NEAREST_INT));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16), _mm512_maskz_cvtps_ph(0xFFFF, second, _MM_FROUND_TO_NEAREST_INT));
      } else {
        float* out = static_cast<float*>(dst) + j0 + i;
        _mm512_storeu_ps(out, first);
        _mm512_storeu_ps(out + 16, second);
      }
    }
    for (; i < n; ++i) {
      store_dequantized<Type>(dst, j0 + i, quant::dequantize_value(unpack_level(pg, i, 4), lo, scale));
    }
  }
}

}  // namespace

bool dequantize_row_avx512_bf16_supports(QuantFormat format, ElemType) { return format.bits == 4; }

void dequantize_row_avx512_bf16(const uint8_t* packed, const uint16_t* mins, const uint16_t* scales, int64_t cols,
                                QuantFormat format, void* dst, ElemType type) {
  switch (type) {
    case ElemType::BF16: return dequantize_q4_row<ElemType::BF16>(packed, mins, scales, cols, format.group_size, dst);
    case ElemType::F16: return dequantize_q4_row<ElemType::F16>(packed, mins, scales, cols, format.group_size, dst);
    case ElemType::F32: return dequantize_q4_row<ElemType::F32>(packed, mins, scales, cols, format.group_size, dst);
  }
}

}  // namespace tiergen::kernels::detail
#endif  // __x86_64__
