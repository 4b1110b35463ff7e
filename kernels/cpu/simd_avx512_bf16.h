#pragma once
// AVX-512 (F, BW, BF16) building blocks shared by the bf16 small-row kernel and the
// 4-bit kernel. Only included by x86-64 translation units; every function carries the
// target attribute, so callers must be TG_AVX512_BF16 functions too (selected at run
// time, cpu_features.h).
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#define TG_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16,f16c")))

namespace tiergen::kernels::avx512 {

// Sum of the 16 lanes in a fixed pairwise order: lane i plus lane i + 8, then the
// same with 4, 2 and 1, in registers (formerly a store and fifteen scalar adds, once
// per W row of every product). GCC 12's _mm512_reduce_add_ps and its 512-to-256 casts
// and extracts trip -Wuninitialized inside its own header, so where the compiler has
// it the halves are split with a generic shuffle; older GCCs take the extract.
TG_AVX512_BF16 inline float lane_sum(__m512 v) {
#if defined(__clang__) || __GNUC__ >= 12
  typedef float Lanes16 __attribute__((vector_size(64)));
  const Lanes16 all = Lanes16(v);
  const __m256 low = __m256(__builtin_shufflevector(all, all, 0, 1, 2, 3, 4, 5, 6, 7));
  const __m256 high = __m256(__builtin_shufflevector(all, all, 8, 9, 10, 11, 12, 13, 14, 15));
#else
  const __m256 low = _mm512_castps512_ps256(v);
  const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
#endif
  const __m256 eights = _mm256_add_ps(low, high);  // i + (i + 8)
  const __m128 fours = _mm_add_ps(_mm256_castps256_ps128(eights), _mm256_extractf128_ps(eights, 1));
  const __m128 twos = _mm_add_ps(fours, _mm_movehl_ps(fours, fours));
  return _mm_cvtss_f32(_mm_add_ss(twos, _mm_movehdup_ps(twos)));
}

// count (1..16) fp16 values as fp32 lanes, zeros above count; never reads past
// p[count - 1]. The zero-masked conversion: GCC 12's unmasked _mm512_cvtph_ps trips
// -Wmaybe-uninitialized inside its own header.
TG_AVX512_BF16 inline __m512 load_halves(const uint16_t* p, int64_t count) {
  alignas(32) uint16_t tail[16] = {};
  if (count < 16) p = static_cast<const uint16_t*>(std::memcpy(tail, p, size_t(count) * 2));
  const __mmask16 mask = __mmask16((1u << count) - 1);
  return _mm512_maskz_cvtph_ps(mask, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

}  // namespace tiergen::kernels::avx512
#endif  // __x86_64__
