#pragma once
// The arithmetic of one quantization group, shared verbatim by the CPU kernels and the
// CUDA kernels so that both produce identical bytes. Every float operation here is a
// single IEEE operation rounded to nearest (on the device spelled with the explicit
// __f*_rn intrinsics, which nvcc never fuses into an FMA), so no compiler contraction
// can make the two sides differ.
#include <cstdint>

#include "kernels/cpu/half.h"

#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

namespace tiergen::kernels::quant {

TG_HOST_DEVICE inline float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
TG_HOST_DEVICE inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
TG_HOST_DEVICE inline float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
TG_HOST_DEVICE inline float round_even(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return std::nearbyint(x);  // default rounding mode: to nearest, ties to even
#endif
}

// Stored metadata of a group and its float values.
struct GroupParams {
  uint16_t min_bits;
  uint16_t scale_bits;
  float min;
  float scale;
};

// min/max: the group's finite extremes, within +-kHalfMax (callers check).
// The stored min is rounded down and the stored scale up to fp16, and the scale is then
// stepped up until the top level min + levels*scale (evaluated exactly in double: both
// are fp16 values, so the sum needs at most 48 significant bits) reaches max. Hence the
// grid [min, min + levels*scale] covers the group and rounding to the nearest level is
// off by at most scale/2. A group whose values all equal an fp16 value gets scale 0.
TG_HOST_DEVICE inline GroupParams group_params(float min, float max, int levels) {
  // Adding +0 turns -0 into +0, so the result does not depend on which signed zero a
  // min/max reduction happened to keep (reduction orders differ between CPU and GPU).
  min = add_rn(min, 0.0f);
  max = add_rn(max, 0.0f);
  GroupParams p;
  p.min_bits = float_to_half_down(min);
  p.min = half_to_float(p.min_bits);
  p.scale_bits = float_to_half_up(div_rn(sub_rn(max, p.min), float(levels)));
  while (double(p.min) + double(levels) * double(half_to_float(p.scale_bits)) < double(max)) {
    p.scale_bits = half_next_up(p.scale_bits);
  }
  p.scale = half_to_float(p.scale_bits);
  return p;
}

// Nearest level of x (ties to even), clamped to [0, levels]; 0 for a constant group.
TG_HOST_DEVICE inline uint32_t quantize_value(float x, float min, float scale, int levels) {
  if (scale == 0.0f) return 0;
  float t = round_even(div_rn(sub_rn(x, min), scale));
  t = t < 0.0f ? 0.0f : t;
  t = t > float(levels) ? float(levels) : t;
  return uint32_t(t);
}

// q*scale is exact in fp32 (at most 8 + 11 significant bits), so this equals the fused
// form min + q*scale that the SIMD paths compute with an FMA.
TG_HOST_DEVICE inline float dequantize_value(uint32_t q, float min, float scale) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(min, __fmul_rn(float(q), scale));
#else
  return min + float(q) * scale;
#endif
}

}  // namespace tiergen::kernels::quant
