#include "tiergen/common/kernel_elem_type.h"

#include "tiergen/common/error.h"

namespace tiergen {

std::optional<kernels::ElemType> kernel_elem_type_of(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return kernels::ElemType::F32;
    case at::kHalf: return kernels::ElemType::F16;
    case at::kBFloat16: return kernels::ElemType::BF16;
    default: return std::nullopt;
  }
}

kernels::ElemType kernel_elem_type(at::ScalarType type) {
  const auto kernel_type = kernel_elem_type_of(type);
  TG_CHECK(kernel_type, "the kernels take float32, float16 and bfloat16 tensors, not {}", c10::toString(type));
  return *kernel_type;
}

}  // namespace tiergen
