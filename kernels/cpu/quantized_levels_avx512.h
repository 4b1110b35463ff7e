#pragma once
// What the bf16 kernels of quantized_matmul() share (AVX-512 BF16 for 4-bit weights in
// quantized_matmul_avx512_bf16.cpp, AMX for 4- and 8-bit in quantized_matmul_amx.cpp):
// the table that turns a nibble into its bf16 value, the per-row sum of the groups' min
// terms, and the scales of a few W rows widened to floats. Callers are TG_AVX512_BF16 or TG_AMX
// functions (TG_AMX's target includes this one's).
#if defined(__x86_64__)
#include <cstdint>

#include "kernels/cpu/half.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/quantized_matmul.h"
#include "kernels/cpu/simd_avx512_bf16.h"

namespace tiergen::kernels::detail {

// Word i holds bf16(i & 15): a lookup (vpermw, which reads an index's low 5 bits) needs
// no mask for the low nibble, whose neighbour bit (the high nibble's lowest) selects the
// table's second half. Levels 0..15 are bf16 values exactly.
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

// The scales of W rows [j, j + rows) as floats, row by row ([rows, groups_per_row]), so
// that a kernel reads each group's scale as a load, not a conversion.
TG_AVX512_BF16 inline void widen_scales(const QuantizedMatmulArgs& a, const QuantizedLayout& l, int64_t j,
                                        int64_t rows, float* out) {
  const int64_t count = rows * l.groups_per_row;
  const uint16_t* h = a.scales + j * l.groups_per_row;
  for (int64_t i = 0; i < count; i += 16) {
    const int64_t n = count - i >= 16 ? 16 : count - i;
    _mm512_mask_storeu_ps(out + i, __mmask16((1u << n) - 1), avx512::load_halves(h + i, n));
  }
}

}  // namespace tiergen::kernels::detail
#endif  // __x86_64__
