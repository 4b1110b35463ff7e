#include "tiergen/common/torch_compat.h"

#include "tiergen/common/error.h"

namespace tiergen::compat {

at::ScalarType parse_dtype(const std::string& name) {
  if (name == "float32" || name == "fp32" || name == "float") return at::kFloat;
  if (name == "float16" || name == "fp16" || name == "half") return at::kHalf;
  if (name == "bfloat16" || name == "bf16") return at::kBFloat16;
  TG_THROW("unknown dtype '{}' (use float32, float16 or bfloat16)", name);
}

std::string dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return "float32";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    default: return c10::toString(type);
  }
}

bool is_dtype_name(const std::string& name) {
  return name == "float32" || name == "float16" || name == "bfloat16";
}

}  // namespace tiergen::compat
