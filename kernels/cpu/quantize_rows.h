#pragma once
// Per-row kernels behind quantize()/dequantize(): a portable version, an AVX2 one
// (quantize_avx2.cpp) and, for dequantizing 4-bit rows, an AVX-512 BF16 one, all
// producing identical bytes. Internal to kernels/cpu.
#include <cstdint>

#include "kernels/cpu/half.h"
#include "kernels/cpu/quantize.h"

namespace tiergen::kernels::detail {

// Quantizes one row of fp32 values into packed levels and group metadata.
// `levels` is scratch for group_size bytes. Returns -1, or the column of the first
// value that cannot be quantized (NaN, Inf or beyond +-65504); the row is then left
// partly written.
int64_t quantize_row(const float* x, int64_t cols, QuantFormat format, uint8_t* packed,
                     uint16_t* mins, uint16_t* scales, uint8_t* levels);
void dequantize_row(const uint8_t* packed, const uint16_t* mins, const uint16_t* scales,
                    int64_t cols, QuantFormat format, void* dst, ElemType type);
void row_to_float(const void* src, ElemType type, int64_t n, float* dst);

#if defined(__x86_64__)
int64_t quantize_row_avx2(const float* x, int64_t cols, QuantFormat format, uint8_t* packed,
                          uint16_t* mins, uint16_t* scales, uint8_t* levels);
void dequantize_row_avx2(const uint8_t* packed, const uint16_t* mins, const uint16_t* scales,
                         int64_t cols, QuantFormat format, void* dst, ElemType type);
void row_to_float_avx2(const void* src, ElemType type, int64_t n, float* dst);
// 4-bit levels (dequantize_avx512_bf16.cpp): the AVX2 row's bytes.
bool dequantize_row_avx512_bf16_supports(QuantFormat format, ElemType type);
void dequantize_row_avx512_bf16(const uint8_t* packed, const uint16_t* mins, const uint16_t* scales,
                                int64_t cols, QuantFormat format, void* dst, ElemType type);
#endif

// Writes group_size levels (each < 2^bits) as packed bytes: bytes are copied for 8 bits,
// pairs share a byte (even element in the low nibble) for 4 bits.
inline void pack_levels(const uint8_t* levels, int group_size, int bits, uint8_t* out) {
  if (bits == 8) {
    for (int i = 0; i < group_size; ++i) out[i] = levels[i];
  } else {
    for (int i = 0; i < group_size / 2; ++i) out[i] = uint8_t(levels[2 * i] | (levels[2 * i + 1] << 4));
  }
}

// Element i of a dequantized row of Type, from its fp32 value (the SIMD rows' tails).
template <ElemType Type>
inline void store_dequantized(void* row, int64_t i, float v) {
  if constexpr (Type == ElemType::F32) static_cast<float*>(row)[i] = v;
  if constexpr (Type == ElemType::F16) static_cast<uint16_t*>(row)[i] = float_to_half(v);
  if constexpr (Type == ElemType::BF16) static_cast<uint16_t*>(row)[i] = float_to_bf16(v);
}

inline uint32_t unpack_level(const uint8_t* group_bytes, int64_t i, int bits) {
  if (bits == 8) return group_bytes[i];
  const uint8_t b = group_bytes[i / 2];
  return (i & 1) ? uint32_t(b >> 4) : uint32_t(b & 0xF);
}

}  // namespace tiergen::kernels::detail
