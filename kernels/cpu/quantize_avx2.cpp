// AVX2/FMA/F16C row kernels of the quantizer. They perform the same IEEE operations as
// the portable ones in quantize.cpp (sub, div, round-to-nearest-even; dequantization's
// FMA is exact because q*scale is), so both paths write identical bytes.
#if defined(__x86_64__)
#include <algorithm>
#include <cmath>

#include "kernels/cpu/half.h"
#include "kernels/cpu/quant_group.h"
#include "kernels/cpu/quantize_rows.h"
#include "kernels/cpu/simd_avx2.h"

namespace tiergen::kernels::detail {
namespace {

// Min and max of n values; returns the index of the first value that is NaN, Inf or
// beyond the fp16 range, or -1.
TG_AVX2 int group_min_max(const float* x, int n, float* lo_out, float* hi_out) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 limit = _mm256_set1_ps(kHalfMax);
  __m256 lo = _mm256_set1_ps(INFINITY), hi = _mm256_set1_ps(-INFINITY), bad = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    lo = _mm256_min_ps(lo, v);
    hi = _mm256_max_ps(hi, v);
    // Not (|v| <= limit): true for NaN too.
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_and_ps(v, abs_mask), limit, _CMP_NLE_UQ));
  }
  float l[8], h[8];
  _mm256_storeu_ps(l, lo);
  _mm256_storeu_ps(h, hi);
  float lo_s = l[0], hi_s = h[0];
  for (int k = 1; k < 8; ++k) {
    lo_s = std::min(lo_s, l[k]);
    hi_s = std::max(hi_s, h[k]);
  }
  const bool any_bad = _mm256_movemask_ps(bad) != 0;
  for (; i < n; ++i) {
    lo_s = std::min(lo_s, x[i]);
    hi_s = std::max(hi_s, x[i]);
  }
  if (any_bad || !(lo_s >= -kHalfMax && hi_s <= kHalfMax)) {
    for (int k = 0; k < n; ++k) {
      if (!(std::fabs(x[k]) <= kHalfMax)) return k;
    }
  }
  *lo_out = lo_s;
  *hi_out = hi_s;
  return -1;
}

TG_AVX2 void quantize_group(const float* x, int n, int g, const quant::GroupParams& p, int max_level,
                            uint8_t* levels) {
  int i = 0;
  if (p.scale != 0.0f) {
    const __m256 vmin = _mm256_set1_ps(p.min), vscale = _mm256_set1_ps(p.scale);
    const __m256 vtop = _mm256_set1_ps(float(max_level)), zero = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
      __m256 t = _mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmin), vscale);
      t = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      t = _mm256_max_ps(_mm256_min_ps(t, vtop), zero);
      const __m256i q = _mm256_cvttps_epi32(t);
      const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(levels + i), _mm_packus_epi16(w, w));
    }
  }
  for (; i < n; ++i) levels[i] = uint8_t(quant::quantize_value(x[i], p.min, p.scale, max_level));
  for (; i < g; ++i) levels[i] = 0;
}

// A 4-bit group's 16 possible values (level * scale + min, one FMA each, rounded to the
// 16-bit Type as store8 rounds every element) split into two byte tables for pshufb:
// the values' low bytes and their high bytes.
template <ElemType Type>
TG_AVX2 void group_byte_tables_q4(float scale, float min, __m128i* low, __m128i* high) {
  const __m256 vscale = _mm256_set1_ps(scale), vmin = _mm256_set1_ps(min);
  alignas(16) uint16_t values[16];
  avx2::store8<Type>(values, 0, _mm256_fmadd_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), vscale, vmin));
  avx2::store8<Type>(values, 8, _mm256_fmadd_ps(_mm256_setr_ps(8, 9, 10, 11, 12, 13, 14, 15), vscale, vmin));
  // Each half's low bytes, then its high bytes.
  const __m128i split = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  const __m128i first = _mm_shuffle_epi8(_mm_load_si128(reinterpret_cast<const __m128i*>(values)), split);
  const __m128i second = _mm_shuffle_epi8(_mm_load_si128(reinterpret_cast<const __m128i*>(values + 8)), split);
  *low = _mm_unpacklo_epi64(first, second);
  *high = _mm_unpackhi_epi64(first, second);
}

// 16 elements of a 4-bit group into a 16-bit Type from 8 packed bytes: each element's
// level picks its value's two bytes out of the group's tables.
TG_AVX2 inline void dequantize16_q4(const uint8_t* bytes, __m128i low, __m128i high, uint16_t* out) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes));
  const __m128i nibble = _mm_set1_epi8(0x0F);
  // Element order: byte i's low nibble, then its high one.
  const __m128i levels = _mm_unpacklo_epi8(_mm_and_si128(b, nibble), _mm_and_si128(_mm_srli_epi16(b, 4), nibble));
  const __m128i lo = _mm_shuffle_epi8(low, levels), hi = _mm_shuffle_epi8(high, levels);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_unpacklo_epi8(lo, hi));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 8), _mm_unpackhi_epi8(lo, hi));
}

// 4-bit levels into a 16-bit type: a group has only 16 values, so they are rounded once
// and each element is looked up: the bytes of the per-element FMA and rounding below.
// In a TinyLlama-shaped 4-bit bf16 prefill at batch 1 under TIERGEN_CPU_ISA=avx2 (2-core
// Zen 5 guest, perf samples of this row over 6 runs): 929-976 per element, 639-734 by
// lookup; a prefetch of the packed bytes 4 KiB ahead changed nothing (725-752).
template <ElemType Type>
TG_AVX2 void dequantize_row_q4_16bit(const uint8_t* packed, const uint16_t* mins, const uint16_t* scales,
                                     int64_t cols, int g, void* dst) {
  const int64_t group_bytes = g / 2;
  auto* out = static_cast<uint16_t*>(dst);
  for (int64_t k = 0, j0 = 0; j0 < cols; ++k, j0 += g) {
    const float lo = half_to_float(mins[k]), scale = half_to_float(scales[k]);
    __m128i low, high;
    group_byte_tables_q4<Type>(scale, lo, &low, &high);
    const int n = int(std::min<int64_t>(g, cols - j0));
    const uint8_t* pg = packed + k * group_bytes;
    int i = 0;
    for (; i + 16 <= n; i += 16) dequantize16_q4(pg + i / 2, low, high, out + j0 + i);
    for (; i < n; ++i) {
      store_dequantized<Type>(dst, j0 + i, quant::dequantize_value(unpack_level(pg, i, 4), lo, scale));
    }
  }
}

template <int Bits, ElemType Type>
TG_AVX2 void dequantize_row_t(const uint8_t* packed, const uint16_t* mins, const uint16_t* scales,
                              int64_t cols, int g, void* dst) {
  const int64_t group_bytes = int64_t(g) * Bits / 8;
  for (int64_t k = 0, j0 = 0; j0 < cols; ++k, j0 += g) {
    const float lo = half_to_float(mins[k]), scale = half_to_float(scales[k]);
    const __m256 vmin = _mm256_set1_ps(lo), vscale = _mm256_set1_ps(scale);
    const int n = int(std::min<int64_t>(g, cols - j0));
    const uint8_t* pg = packed + k * group_bytes;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 q = Bits == 4 ? avx2::load8_levels_q4(pg + i / 2) : avx2::load8_levels_q8(pg + i);
      const __m256 v = _mm256_fmadd_ps(q, vscale, vmin);
      avx2::store8<Type>(dst, j0 + i, v);
    }
    for (; i < n; ++i) {
      store_dequantized<Type>(dst, j0 + i, quant::dequantize_value(unpack_level(pg, i, Bits), lo, scale));
    }
  }
}

template <int Bits>
TG_AVX2 void dequantize_row_bits(const uint8_t* packed, const uint16_t* mins, const uint16_t* scales,
                                 int64_t cols, int g, void* dst, ElemType type) {
  switch (type) {
    case ElemType::F32: return dequantize_row_t<Bits, ElemType::F32>(packed, mins, scales, cols, g, dst);
    case ElemType::F16: return dequantize_row_t<Bits, ElemType::F16>(packed, mins, scales, cols, g, dst);
    case ElemType::BF16: return dequantize_row_t<Bits, ElemType::BF16>(packed, mins, scales, cols, g, dst);
  }
}

}  // namespace

TG_AVX2 int64_t quantize_row_avx2(const float* x, int64_t cols, QuantFormat format, uint8_t* packed,
                                  uint16_t* mins, uint16_t* scales, uint8_t* levels) {
  const int g = format.group_size;
  const int max_level = (1 << format.bits) - 1;
  const int64_t group_bytes = int64_t(g) * format.bits / 8;
  for (int64_t k = 0, j0 = 0; j0 < cols; ++k, j0 += g) {
    const int n = int(std::min<int64_t>(g, cols - j0));
    float lo, hi;
    const int bad = group_min_max(x + j0, n, &lo, &hi);
    if (bad >= 0) return j0 + bad;
    const quant::GroupParams p = quant::group_params(lo, hi, max_level);
    mins[k] = p.min_bits;
    scales[k] = p.scale_bits;
    uint8_t* out = packed + k * group_bytes;
    // 8-bit levels are the packed bytes themselves.
    quantize_group(x + j0, n, g, p, max_level, format.bits == 8 ? out : levels);
    if (format.bits == 4) pack_levels(levels, g, 4, out);
  }
  return -1;
}

TG_AVX2 void dequantize_row_avx2(const uint8_t* packed, const uint16_t* mins, const uint16_t* scales,
                                 int64_t cols, QuantFormat format, void* dst, ElemType type) {
  if (format.bits == 4 && type == ElemType::BF16) {
    return dequantize_row_q4_16bit<ElemType::BF16>(packed, mins, scales, cols, format.group_size, dst);
  }
  if (format.bits == 4 && type == ElemType::F16) {
    return dequantize_row_q4_16bit<ElemType::F16>(packed, mins, scales, cols, format.group_size, dst);
  }
  if (format.bits == 4) return dequantize_row_bits<4>(packed, mins, scales, cols, format.group_size, dst, type);
  dequantize_row_bits<8>(packed, mins, scales, cols, format.group_size, dst, type);
}

TG_AVX2 void row_to_float_avx2(const void* src, ElemType type, int64_t n, float* dst) {
  const uint16_t* s = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  if (type == ElemType::F16) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, avx2::load8_f16(s + i));
  } else if (type == ElemType::BF16) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, avx2::load8_bf16(s + i));
  }
  row_to_float(static_cast<const char*>(src) + i * elem_size(type), type, n - i, dst + i);
}

}  // namespace tiergen::kernels::detail
#endif  // __x86_64__
