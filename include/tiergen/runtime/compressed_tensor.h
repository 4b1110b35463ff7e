#pragma once
// A matrix [rows, cols] quantized group-wise along cols (kernels/cpu/quantize.h
// format), as three tensors that move between tiers together. Quantization happens
// once where the dense values are (host for weights at load time, the compute
// device for new KV entries); dequantization on the compute device right before use.
#include <ATen/ATen.h>

#include "kernels/cpu/quantize.h"
#include "tiergen/runtime/policy.h"

namespace tiergen::runtime {

struct CompressedTensor {
  at::Tensor packed;  // uint8 [rows, packed bytes per row]
  at::Tensor mins;    // int16 (fp16 bits) [rows, groups per row]
  at::Tensor scales;  // int16 (fp16 bits) [rows, groups per row]
  int64_t rows = 0, cols = 0;
  CompressionConfig config;

  uint64_t nbytes() const;
  CompressedTensor to(const at::Device& device) const;
};

// The kernels' element type of a LibTorch float dtype; throws for other dtypes.
kernels::ElemType kernel_elem_type(at::ScalarType type);

// Quantizes a 2-D tensor (any float dtype; host or CUDA).
CompressedTensor compress(const at::Tensor& dense, const CompressionConfig& config);
// Dense [rows, cols] of `dtype` on the compressed tensor's device.
at::Tensor decompress(const CompressedTensor& compressed, at::ScalarType dtype);

}  // namespace tiergen::runtime
