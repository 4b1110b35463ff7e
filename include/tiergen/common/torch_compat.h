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
// Whether `name` is one of the names dtype_name() gives: float32, float16, bfloat16.
bool is_dtype_name(const std::string& name);

// at::scaled_dot_product_attention (fused attention) exists from LibTorch 2.0 on. A
// preprocessor switch rather than a constexpr bool: non-template code cannot even name
// a function that 1.13 does not declare.
#if defined(TORCH_VERSION_MAJOR) && TORCH_VERSION_MAJOR >= 2
#define TIERGEN_HAS_SDPA 1
#else
#define TIERGEN_HAS_SDPA 0
#endif
constexpr bool kHasFusedAttention = TIERGEN_HAS_SDPA != 0;
// Its `scale` argument exists from 2.1 on.
#if TIERGEN_HAS_SDPA && (TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 1)
#define TIERGEN_SDPA_HAS_SCALE 1
#else
#define TIERGEN_SDPA_HAS_SCALE 0
#endif
// Its cuDNN backend, and the switch that turns it off (at::Context::setSDPUseCuDNN),
// from 2.4 on (earlier builds rank it last, behind the memory-efficient kernel).
#if TIERGEN_HAS_SDPA && (TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 4)
#define TIERGEN_SDPA_HAS_CUDNN 1
#else
#define TIERGEN_SDPA_HAS_CUDNN 0
#endif

}  // namespace tiergen::compat
