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

// Sum of the 16 lanes in a fixed pairwise order (GCC 12's _mm512_reduce_add_ps
// trips -Wuninitialized inside its own header).
TG_AVX512_BF16 inline float lane_sum(__m512 v) {
  alignas(64) float l[16];
  _mm512_store_ps(l, v);
  for (int width = 8; width >= 1; width /= 2)
    for (int i = 0; i < width; ++i) l[i] += l[i + width];
  return l[0];
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
