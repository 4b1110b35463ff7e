#pragma once
// AVX2/FMA/F16C building blocks shared by the quantization and attention kernels:
// loading 8 elements of any cache format as fp32 lanes and storing them back. Only
// included by x86-64 translation units; every function carries the target attribute,
// so callers must be TG_AVX2 functions too (selected at run time, cpu_features.h).
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>
#include <cstring>

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

TG_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace tiergen::kernels::avx2
#endif  // __x86_64__
