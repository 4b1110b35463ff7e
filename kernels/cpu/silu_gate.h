#pragma once
// LLaMA's gated MLP activation on the CPU: y = to_type(silu(gate)) * up, per element,
// with the roundings of transformers' act_fn(gate_proj(x)) * up_proj(x) (silu in fp32,
// rounded to the element type, the product rounded again).
//
// Why not at::silu: LibTorch's vectorized loops compute a tensor's last partial vector
// with the scalar function and the rest with a vector exp, whose last bits differ, so
// an element's silu depended on where the tensor's end fell: on how many rows shared
// the product. Here every element takes the same exp (a vector one where the AVX2
// kernels run, the last few elements through a padded copy; std::exp elsewhere),
// whatever its position, the row count or the thread count, so a sequence's activations
// do not depend on its batch.
// Kernels here take raw pointers and never LibTorch types.
#include <cstdint>

#include "kernels/cpu/quantize.h"

namespace tiergen::kernels {

struct SiluGateArgs {
  const void* gate = nullptr;  // [count] elements of `type`
  const void* up = nullptr;    // [count] elements of `type`
  void* y = nullptr;           // [count] elements of `type` (may be gate or up)
  ElemType type = ElemType::F32;
  int64_t count = 0;
  int num_threads = 0;         // OpenMP threads; 0 = the OpenMP default
};

// Throws tiergen::Error on inconsistent arguments.
void silu_gate(const SiluGateArgs& args);

}  // namespace tiergen::kernels
