#include "tiergen/runtime/compressed_tensor.h"

#include "kernels/cpu/quantize.h"
#include "tiergen/common/error.h"

#ifdef TIERGEN_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "kernels/cuda/quantize.cuh"
#endif

namespace tiergen::runtime {

namespace {

kernels::QuantFormat format_of(const CompressionConfig& c) { return {c.bits, c.group_size}; }

}  // namespace

uint64_t CompressedTensor::nbytes() const { return packed.nbytes() + mins.nbytes() + scales.nbytes(); }

CompressedTensor CompressedTensor::to(const at::Device& device) const {
  CompressedTensor out = *this;
  const bool pinned = packed.is_pinned();
  out.packed = packed.to(device, pinned, /*copy=*/true);
  out.mins = mins.to(device, pinned, true);
  out.scales = scales.to(device, pinned, true);
  return out;
}

CompressedTensor compress(const at::Tensor& dense, const CompressionConfig& config, const at::Tensor& error_flag) {
  TG_CHECK(dense.dim() == 2, "internal: compress expects a matrix, got {} dims", dense.dim());
  const at::Tensor src = dense.contiguous();
  const auto layout = kernels::quantized_layout(src.size(0), src.size(1), format_of(config));
  const auto opts = at::TensorOptions().device(src.device());
  CompressedTensor c;
  c.rows = layout.rows;
  c.cols = layout.cols;
  c.config = config;
  c.packed = at::empty({layout.rows, layout.packed_bytes_per_row}, opts.dtype(at::kByte));
  c.mins = at::empty({layout.rows, layout.groups_per_row}, opts.dtype(at::kShort));
  c.scales = at::empty({layout.rows, layout.groups_per_row}, opts.dtype(at::kShort));
  auto* mins = reinterpret_cast<uint16_t*>(c.mins.data_ptr<int16_t>());
  auto* scales = reinterpret_cast<uint16_t*>(c.scales.data_ptr<int16_t>());
  if (src.is_cpu()) {
    kernels::quantize(src.data_ptr(), kernel_elem_type(src.scalar_type()), c.rows, c.cols, format_of(config),
                      c.packed.data_ptr<uint8_t>(), mins, scales);
    return c;
  }
#ifdef TIERGEN_WITH_CUDA
  const c10::cuda::CUDAGuard guard(src.device());
  const bool deferred = error_flag.defined();
  at::Tensor error = deferred ? error_flag : at::zeros({1}, opts.dtype(at::kInt));
  kernels::quantize_cuda(src.data_ptr(), kernel_elem_type(src.scalar_type()), c.rows, c.cols, format_of(config),
                         c.packed.data_ptr<uint8_t>(), mins, scales, error.data_ptr<int>(),
                         c10::cuda::getCurrentCUDAStream(src.device().index()).stream());
  if (!deferred) check_quantization_flag(error, "a tensor to quantize");
  return c;
#else
  TG_THROW("compression on {} needs a CUDA build", src.device().str());
#endif
}

void check_quantization_flag(at::Tensor& error_flag, const std::string& what) {
  if (!error_flag.defined()) return;
  const bool failed = error_flag.item<int>() != 0;  // one small read, after the stream's work
  if (failed) error_flag.zero_();
  TG_CHECK(!failed, "compression: non-finite or out-of-range (|x| > 65504) values in {}", what);
}

at::Tensor decompress(const CompressedTensor& c, at::ScalarType dtype) {
  at::Tensor out = at::empty({c.rows, c.cols}, at::TensorOptions().dtype(dtype).device(c.packed.device()));
  decompress_into(c, out);
  return out;
}

void decompress_into(const CompressedTensor& c, const at::Tensor& out) {
  TG_CHECK(out.is_contiguous() && out.size(0) == c.rows && out.size(1) == c.cols && out.device() == c.packed.device(),
           "internal: decompress_into needs a contiguous [{}, {}] tensor beside the packed bytes", c.rows, c.cols);
  const at::ScalarType dtype = out.scalar_type();
  const auto* mins = reinterpret_cast<const uint16_t*>(c.mins.data_ptr<int16_t>());
  const auto* scales = reinterpret_cast<const uint16_t*>(c.scales.data_ptr<int16_t>());
  if (c.packed.is_cpu()) {
    kernels::dequantize(c.packed.data_ptr<uint8_t>(), mins, scales, c.rows, c.cols, format_of(c.config),
                        out.data_ptr(), kernel_elem_type(dtype));
    return;
  }
#ifdef TIERGEN_WITH_CUDA
  const c10::cuda::CUDAGuard guard(c.packed.device());
  kernels::dequantize_cuda(c.packed.data_ptr<uint8_t>(), mins, scales, c.rows, c.cols, format_of(c.config),
                           out.data_ptr(), kernel_elem_type(dtype),
                           c10::cuda::getCurrentCUDAStream(c.packed.device().index()).stream());
#else
  TG_THROW("decompression on {} needs a CUDA build", c.packed.device().str());
#endif
}

}  // namespace tiergen::runtime
