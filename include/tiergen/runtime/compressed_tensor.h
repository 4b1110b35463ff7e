#pragma once
// A matrix [rows, cols] quantized group-wise along cols (kernels/cpu/quantize.h
// format), as three tensors that move between tiers together. Quantization happens
// once where the dense values are (host for weights at load time, the compute
// device for new KV entries); dequantization on the compute device right before use.
#include <ATen/ATen.h>

#include <string>

#include "kernels/cpu/quantize.h"
#include "tiergen/common/kernel_elem_type.h"
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

// Quantizes a 2-D tensor (any float dtype; host or CUDA). A value the format cannot
// hold (NaN, Inf, |x| > 65504) throws on the host. On a GPU it is found by the kernel:
// with `error_flag` (a device int32 [1]) the kernel sets it and nothing waits (the
// caller checks it once per step, check_quantization_flag); without, compress
// synchronizes and throws.
CompressedTensor compress(const at::Tensor& dense, const CompressionConfig& config,
                          const at::Tensor& error_flag = at::Tensor());
// Throws if a kernel has set `error_flag` since it was zeroed (and zeroes it again).
void check_quantization_flag(at::Tensor& error_flag, const std::string& what);
// Dense [rows, cols] of `dtype` on the compressed tensor's device.
at::Tensor decompress(const CompressedTensor& compressed, at::ScalarType dtype);
// The same into a contiguous [rows, cols] tensor of a float dtype on that device.
void decompress_into(const CompressedTensor& compressed, const at::Tensor& out);

}  // namespace tiergen::runtime
