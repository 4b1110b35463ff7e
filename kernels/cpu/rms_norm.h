#pragma once
// LLaMA's RMSNorm over rows on the CPU, in one pass instead of eight LibTorch operators
// (a decode row is a few KB: the operators' dispatch costs more than the arithmetic).
// The roundings are transformers' LlamaRMSNorm: the statistics in fp32, the normalized
// row rounded to the element type, then multiplied by the weight in that type:
//   y = weight * to_type(x * rsqrt(mean(x^2) + eps)).
// Kernels here take raw pointers and never LibTorch types.
#include <cstdint>

#include "kernels/cpu/quantize.h"

namespace tiergen::kernels {

struct RmsNormArgs {
  const void* x = nullptr;       // [rows, cols] row-major, elements of `type`
  const void* weight = nullptr;  // [cols], elements of `type`
  void* y = nullptr;             // [rows, cols], elements of `type` (may be x)
  ElemType type = ElemType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  float eps = 1e-6f;
  int num_threads = 0;           // OpenMP threads for many rows; 0 = the OpenMP default
};

// Throws tiergen::Error on inconsistent arguments.
void rms_norm(const RmsNormArgs& args);

}  // namespace tiergen::kernels
