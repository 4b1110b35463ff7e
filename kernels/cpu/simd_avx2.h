#pragma once
// AVX2/FMA/F16C building blocks shared by the quantization, attention and SiLU kernels:
// loading 8 elements of any cache format as fp32 lanes and storing them back, rounding
// to a 16-bit type in registers, e^x. Only
// included by x86-64 translation units; every function carries the target attribute,
// so callers must be TG_AVX2 functions too (selected at run time, cpu_features.h).
#if defined(__x86_64__)
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/quantize.h"

#define TG_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace tiergen::kernels::avx2 {

TG_AVX2 inline __m256 load8_f32(const float* p) { return _mm256_loadu_ps(p); }

TG_AVX2 inline __m256 load8_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

TG_AVX2 inline __m256 load8_bf16(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

// Levels of 8 elements of a 4-bit row from 4 packed bytes: read as a little-endian
// 32-bit word, element k is bits [4k, 4k+4) (element 2i is byte i's low nibble).
TG_AVX2 inline __m256 load8_levels_q4(const uint8_t* p) {
  uint32_t word;
  std::memcpy(&word, p, sizeof word);
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const __m256i q = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int(word)), shifts),
                                     _mm256_set1_epi32(0xF));
  return _mm256_cvtepi32_ps(q);
}

TG_AVX2 inline __m256 load8_levels_q8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

TG_AVX2 inline void store8_f32(float* p, __m256 v) { _mm256_storeu_ps(p, v); }

TG_AVX2 inline void store8_f16(uint16_t* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

// Round to nearest even on the bit pattern; inputs are never NaN here (dequantized
// values and attention outputs are finite).
TG_AVX2 inline void store8_bf16(uint16_t* p, __m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), odd), 16);
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}

// v rounded to bf16 and back (nearest even), as float_to_bf16 then bf16_to_float do,
// NaN aside.
TG_AVX2 inline __m256 round8_to_bf16(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), odd);
  return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32(int(0xFFFF0000u))));
}

// v rounded to fp16 and back (nearest even), as float_to_half then half_to_float do.
TG_AVX2 inline __m256 round8_to_f16(__m256 v) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

// Eight elements of an uncompressed row of type T from element i as fp32 lanes, eight
// lanes stored back as T (16-bit types rounded to nearest even), and lanes rounded to
// T and back: what storing T and loading it again leaves.
template <ElemType T>
TG_AVX2 inline __m256 load8(const void* row, int64_t i) {
  if constexpr (T == ElemType::F32) {
    return load8_f32(static_cast<const float*>(row) + i);
  } else if constexpr (T == ElemType::F16) {
    return load8_f16(static_cast<const uint16_t*>(row) + i);
  } else {
    return load8_bf16(static_cast<const uint16_t*>(row) + i);
  }
}

template <ElemType T>
TG_AVX2 inline void store8(void* row, int64_t i, __m256 v) {
  if constexpr (T == ElemType::F32) {
    store8_f32(static_cast<float*>(row) + i, v);
  } else if constexpr (T == ElemType::F16) {
    store8_f16(static_cast<uint16_t*>(row) + i, v);
  } else {
    store8_bf16(static_cast<uint16_t*>(row) + i, v);
  }
}

template <ElemType T>
TG_AVX2 inline __m256 round8_to(__m256 v) {
  if constexpr (T == ElemType::F32) {
    return v;
  } else if constexpr (T == ElemType::F16) {
    return round8_to_f16(v);
  } else {
    return round8_to_bf16(v);
  }
}

// e^x in every lane, within about 2 units in the last place of fp32 over the whole range:
// x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, so r is exact), e^r by Cephes'
// expf polynomial, then 2^n applied in two halves so that results near the overflow
// and in the subnormal range keep their exponent. +inf above ln(FLT_MAX), 0 below
// -104 (as expf), NaN for NaN. Every lane is computed alike, so a value's result never
// depends on the lanes beside it.
TG_AVX2 inline __m256 exp8(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.72283935546875f), lo = _mm256_set1_ps(-104.0f);
  const __m256 xc = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 r2 = _mm256_mul_ps(r, r);
  __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0f));
  // 2^n = 2^n1 * 2^n2 with n1 = floor(n / 2): after the clamp n is in [-150, 128], so
  // each factor's exponent is in [-75, 64], a normal float, where 2^n alone would not be.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23)));
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23)));
  y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

TG_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace tiergen::kernels::avx2
#endif  // __x86_64__
