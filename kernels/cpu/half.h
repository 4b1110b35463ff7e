#pragma once
// fp16 (IEEE binary16) and bfloat16 <-> fp32 conversions on raw bit patterns, plus
// fp16 rounding toward -inf / +inf. Pure integer and exactly-rounded float code, so the
// same functions compile for the host and (under nvcc) for the device and give
// identical bits on both; the CPU and CUDA quantizers depend on that.
//
// Conversions to fp16/bf16 round to nearest even (what F16C's vcvtps2ph and CUDA's
// __float2half_rn do); values beyond the fp16 range become +-inf, NaN stays a NaN.
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TG_HOST_DEVICE __host__ __device__
#else
#define TG_HOST_DEVICE
#endif

namespace tiergen::kernels {

TG_HOST_DEVICE inline uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

TG_HOST_DEVICE inline float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// ---- fp16 -------------------------------------------------------------------------

TG_HOST_DEVICE inline float half_to_float(uint16_t h) {
  // Re-bias the exponent; subnormal halves become normal floats via one exact
  // subtraction of a power-of-two "magic" value.
  const uint32_t shifted_exp = 0x7C00u << 13;
  uint32_t o = (uint32_t(h) & 0x7FFFu) << 13;
  const uint32_t exp = shifted_exp & o;
  o += uint32_t(127 - 15) << 23;
  if (exp == shifted_exp) {
    o += uint32_t(128 - 16) << 23;  // Inf / NaN
  } else if (exp == 0) {
    o += 1u << 23;
    o = float_to_bits(bits_to_float(o) - bits_to_float(113u << 23));
  }
  o |= (uint32_t(h) & 0x8000u) << 16;
  return bits_to_float(o);
}

TG_HOST_DEVICE inline uint16_t float_to_half(float f) {
  uint32_t u = float_to_bits(f);
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint32_t o;
  if (u >= (uint32_t(127 + 16) << 23)) {
    o = u > (255u << 23) ? 0x7E00u : 0x7C00u;  // NaN -> quiet NaN; overflow -> Inf
  } else if (u < (113u << 23)) {
    // Result is subnormal or zero: adding 0.5 aligns the 10 mantissa bits at the
    // bottom, and the float addition itself rounds to nearest even.
    const uint32_t denorm_magic = uint32_t((127 - 15) + (23 - 10) + 1) << 23;
    o = float_to_bits(bits_to_float(u) + bits_to_float(denorm_magic)) - denorm_magic;
  } else {
    const uint32_t mant_odd = (u >> 13) & 1u;
    u += (uint32_t(15 - 127) << 23) + 0xFFFu + mant_odd;  // round to nearest even
    o = u >> 13;
  }
  return uint16_t(o | (sign >> 16));
}

// Neighbouring fp16 values of a finite h (stepping from +-0 crosses to the smallest
// subnormal of the other sign; stepping past the largest finite value gives Inf).
TG_HOST_DEVICE inline uint16_t half_next_down(uint16_t h) {
  if ((h & 0x7FFFu) == 0) return 0x8001u;
  return (h & 0x8000u) ? uint16_t(h + 1) : uint16_t(h - 1);
}
TG_HOST_DEVICE inline uint16_t half_next_up(uint16_t h) {
  if ((h & 0x7FFFu) == 0) return 0x0001u;
  return (h & 0x8000u) ? uint16_t(h - 1) : uint16_t(h + 1);
}

// Largest fp16 <= x and smallest fp16 >= x (x finite; out of range gives -+Inf).
TG_HOST_DEVICE inline uint16_t float_to_half_down(float x) {
  uint16_t h = float_to_half(x);
  if (half_to_float(h) > x) h = half_next_down(h);
  return h;
}
TG_HOST_DEVICE inline uint16_t float_to_half_up(float x) {
  uint16_t h = float_to_half(x);
  if (half_to_float(h) < x) h = half_next_up(h);
  return h;
}

constexpr float kHalfMax = 65504.0f;

// ---- bfloat16 -----------------------------------------------------------------------

TG_HOST_DEVICE inline float bf16_to_float(uint16_t b) { return bits_to_float(uint32_t(b) << 16); }

TG_HOST_DEVICE inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_to_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x0040u);  // quiet NaN
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace tiergen::kernels
