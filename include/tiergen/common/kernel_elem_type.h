#pragma once
// LibTorch float dtypes as the kernels' element types (kernels/ never includes ATen):
// one mapping for the model's matmuls and the runtime's (de)quantization and attention.
#include <ATen/ATen.h>

#include <optional>

#include "kernels/cpu/quantize.h"

namespace tiergen {

// float32, float16, bfloat16 -> the kernels' type; any other dtype -> nullopt.
std::optional<kernels::ElemType> kernel_elem_type_of(at::ScalarType type);
// The same, throwing tiergen::Error for a dtype the kernels do not take.
kernels::ElemType kernel_elem_type(at::ScalarType type);

}  // namespace tiergen
