#pragma once
// One element of an uncompressed row (ElemType) read as fp32 or written from fp32, as
// LibTorch converts: F16 and BF16 round to nearest even.
#include <cstdint>

#include "kernels/cpu/half.h"
#include "kernels/cpu/quantize.h"

namespace tiergen::kernels {

inline float load_element(const void* row, ElemType type, int64_t i) {
  switch (type) {
    case ElemType::F32: return static_cast<const float*>(row)[i];
    case ElemType::F16: return half_to_float(static_cast<const uint16_t*>(row)[i]);
    case ElemType::BF16: return bf16_to_float(static_cast<const uint16_t*>(row)[i]);
  }
  return 0.0f;
}

inline void store_element(void* row, ElemType type, int64_t i, float v) {
  switch (type) {
    case ElemType::F32: static_cast<float*>(row)[i] = v; return;
    case ElemType::F16: static_cast<uint16_t*>(row)[i] = float_to_half(v); return;
    case ElemType::BF16: static_cast<uint16_t*>(row)[i] = float_to_bf16(v); return;
  }
}

// v rounded to the element type and back: what an operator computing in fp32 and
// storing `type` leaves for the next operator to read.
inline float round_to(ElemType type, float v) {
  switch (type) {
    case ElemType::F32: return v;
    case ElemType::F16: return half_to_float(float_to_half(v));
    case ElemType::BF16: return bf16_to_float(float_to_bf16(v));
  }
  return v;
}

}  // namespace tiergen::kernels
