#pragma once
// Rotary position embeddings (RoPE) applied in place on the CPU, in one pass instead of
// the six LibTorch operators of q * cos + rotate_half(q) * sin. The roundings are
// transformers' apply_rotary_pos_emb in the element type: each product rounded, then
// their sum:  x'[i] = to_type(to_type(x[i] * cos[i]) + to_type(rot[i] * sin[i])),
// rot = (-x[d/2:], x[:d/2]).
// Kernels here take raw pointers and never LibTorch types.
#include <cstdint>

#include "kernels/cpu/quantize.h"

namespace tiergen::kernels {

struct RotaryArgs {
  void* x = nullptr;          // [rows, heads, head_dim] row-major, elements of `type`
  const void* cos = nullptr;  // [rows, head_dim], elements of `type`: one table row per x row
  const void* sin = nullptr;
  ElemType type = ElemType::F32;
  int64_t rows = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;  // even
  int num_threads = 0;   // OpenMP threads for many rows; 0 = the OpenMP default
};

// Throws tiergen::Error on inconsistent arguments.
void apply_rotary(const RotaryArgs& args);

}  // namespace tiergen::kernels
