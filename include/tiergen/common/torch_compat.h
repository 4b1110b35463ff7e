#pragma once
// The one place where LibTorch 1.13 (Debian) and 2.x (pip torch) differ for us.
#include <ATen/ATen.h>
#include <c10/core/ScalarType.h>
#include <torch/version.h>

#include <string>

namespace tiergen::compat {

// at::ScalarType from our dtype names: "float32"/"fp32", "float16"/"fp16", "bfloat16"/"bf16".
at::ScalarType parse_dtype(const std::string& name);
std::string dtype_name(at::ScalarType type);

// Scaled-dot-product attention exists as a fused op from LibTorch 2.0 on.
#if defined(TORCH_VERSION_MAJOR) && TORCH_VERSION_MAJOR >= 2
constexpr bool kHasFusedAttention = true;
#else
constexpr bool kHasFusedAttention = false;
#endif

}  // namespace tiergen::compat
