// AVX-512 BF16 row of dequantize() for 4-bit levels into bf16, fp16 or fp32: a prefill's
// products of compressed weights multiply dequantized copies of them. A group has only
// 16 possible values, so each group's are computed once and every element is a table
// lookup, 32 levels from 16 packed bytes a step. Every element gets the AVX2 row's value,
// bit for bit: level * scale + min as one FMA (the product is exact: a level below 16
// times an fp16 scale), then nearest-even rounding: vcvtps2ph for fp16 as the AVX2 row
// does, and for bf16 vcvtneps2bf16 (which treats subnormals as zero: a dequantized value
// is a multiple of 2^-24, fp16's step, so it is zero or normal, and the AVX2 row's integer
// rounding gives the same bits). The group's last levels short of 32 take the AVX2 row's
// scalar form. 64-row tiles of a 4-bit TinyLlama layer's seven matrices (2-core Zen 5
// guest, ms per layer, two rounds): 1.08-1.15 into bf16 and 1.23-1.29 into fp32, against
// 2.00-2.07 and 2.04-2.10 converting every level to fp32 and rounding it, without prefetch.
#if defined(__x86_64__)
#include <algorithm>

#include "kernels/cpu/quant_group.h"
#include "kernels/cpu/quantize_rows.h"
#include "kernels/cpu/simd_avx512_bf16.h"

namespace tiergen::kernels::detail {
namespace {

// Packed bytes are prefetched this far ahead. A prefill's dequantized tiles
// (model/linear.cpp) read each tile's packed rows from memory between long compute-bound
// products, and the loads stalled: in a TinyLlama-shaped 4-bit prefill at batch 1 (2-core
// Zen 5 guest, perf samples of this row over 21 runs) 1375 without prefetch, 1030 at
// 1 KiB ahead, 751-794 at 4-16 KiB. (The AVX2 row, at 8 levels a step, is not held up by
// its loads: the same prefetch left its samples as they were.)
constexpr int64_t kPrefetchBytes = 4096;

// Levels i .. i + 15 of a group (packed two per byte, the even one in the low nibble) as
// 16 32-bit indices in element order: byte b widened to a 64-bit lane, its low nibble
// kept in the lane's low half and its high nibble moved to the high half. (The
// zero-masked forms, here and below: GCC 12's unmasked ones trip -Wmaybe-uninitialized
// inside its own header.)
TG_AVX512_BF16 inline __m512i level_indices16_q4(const uint8_t* bytes) {
  const __m512i lanes =
      _mm512_maskz_cvtepu8_epi64(0xFF, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes)));
  // (lanes | lanes << 28) & 0x0000000F0000000F in one instruction.
  return _mm512_ternarylogic_epi64(lanes, _mm512_maskz_slli_epi64(0xFF, lanes, 28),
                                   _mm512_set1_epi64(0x0000000F0000000F), 0xA8);
}

// Levels i .. i + 31 of a group as 32 16-bit indices, the same way: byte b widened to a
// 32-bit lane, its nibbles in the lane's two halves.
TG_AVX512_BF16 inline __m512i level_indices32_q4(const uint8_t* bytes) {
  const __m512i lanes =
      _mm512_maskz_cvtepu8_epi32(0xFFFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)));
  // (lanes | lanes << 12) & 0x000F000F in one instruction.
  return _mm512_ternarylogic_epi32(lanes, _mm512_maskz_slli_epi32(0xFFFF, lanes, 12), _mm512_set1_epi32(0x000F000F),
                                   0xA8);
}

// A 16-value table in a register's low 16 words (vpermw reads only those for indices
// below 16; the high half is a copy of the low one).
TG_AVX512_BF16 inline __m512i low_words(__m256i v) { return _mm512_maskz_broadcast_i64x4(0xFF, v); }

// A group's 16 possible values, level * scale + min (one FMA per value, as the AVX2 row
// computes each element) in fp32 lanes.
TG_AVX512_BF16 inline __m512 group_values_q4(float scale, float min) {
  const __m512 levels = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  return _mm512_fmadd_ps(levels, _mm512_set1_ps(scale), _mm512_set1_ps(min));
}

// 32 levels from 16 packed bytes: each element one lookup in its group's table of 16
// values (vpermps for fp32, vpermw on the values rounded to 16 bits), so the rounding
// is done 16 times per group and not once per element.
template <ElemType Type>
TG_AVX512_BF16 inline void dequantize32_q4(const uint8_t* bytes, __m512 values, __m512i rounded, void* out) {
  if constexpr (Type == ElemType::F32) {
    auto* f = static_cast<float*>(out);
    _mm512_storeu_ps(f, _mm512_maskz_permutexvar_ps(0xFFFF, level_indices16_q4(bytes), values));
    _mm512_storeu_ps(f + 16, _mm512_maskz_permutexvar_ps(0xFFFF, level_indices16_q4(bytes + 8), values));
  } else {
    _mm512_storeu_si512(out, _mm512_permutexvar_epi16(level_indices32_q4(bytes), rounded));
  }
}

// The group's values rounded to the 16-bit type, in the low 16 words (unused for fp32).
template <ElemType Type>
TG_AVX512_BF16 inline __m512i rounded_values_q4(__m512 values) {
  if constexpr (Type == ElemType::BF16) return low_words((__m256i)_mm512_cvtneps_pbh(values));
  if constexpr (Type == ElemType::F16) {
    return low_words(_mm512_maskz_cvtps_ph(0xFFFF, values, _MM_FROUND_TO_NEAREST_INT));
  }
  return _mm512_setzero_si512();
}

template <ElemType Type>
TG_AVX512_BF16 void dequantize_q4_row(const uint8_t* packed, const uint16_t* mins, const uint16_t* scales,
                                      int64_t cols, int g, void* dst) {
  const int64_t group_bytes = g / 2;
  constexpr int64_t kDstElemBytes = Type == ElemType::F32 ? 4 : 2;
  for (int64_t k = 0, j0 = 0; j0 < cols; ++k, j0 += g) {
    const float lo = _cvtsh_ss(mins[k]), scale = _cvtsh_ss(scales[k]);
    const __m512 values = group_values_q4(scale, lo);
    const __m512i rounded = rounded_values_q4<Type>(values);
    const int n = int(std::min<int64_t>(g, cols - j0));
    const uint8_t* pg = packed + k * group_bytes;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
      _mm_prefetch(reinterpret_cast<const char*>(pg + i / 2 + kPrefetchBytes), _MM_HINT_T0);
      dequantize32_q4<Type>(pg + i / 2, values, rounded, static_cast<uint8_t*>(dst) + (j0 + i) * kDstElemBytes);
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
