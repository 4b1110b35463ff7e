#include "tiergen/runtime/device.h"

#include <ATen/Context.h>

#include "tiergen/common/error.h"
#include "tiergen/common/torch_compat.h"

#ifdef TIERGEN_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace tiergen::runtime {

bool cuda_available() { return at::hasCUDA(); }

at::TensorOptions DeviceContext::host_options() const {
  return at::TensorOptions().dtype(dtype).device(at::kCPU).pinned_memory(pin_host && is_cuda());
}

at::Tensor DeviceContext::to_compute(const at::Tensor& tensor) const {
  if (!is_cuda()) return tensor.clone();
  return tensor.to(compute, /*non_blocking=*/tensor.is_pinned(), /*copy=*/true);
}

at::Tensor DeviceContext::to_host(const at::Tensor& tensor) const {
  at::Tensor out = at::empty(tensor.sizes(), host_options().dtype(tensor.scalar_type()));
  out.copy_(tensor);
  return out;
}

void DeviceContext::synchronize() const {
#ifdef TIERGEN_WITH_CUDA
  if (is_cuda()) c10::cuda::getCurrentCUDAStream(compute.index()).synchronize();
#endif
}

void DeviceContext::use_own_stream() const {
#ifdef TIERGEN_WITH_CUDA
  if (is_cuda()) c10::cuda::setCurrentCUDAStream(c10::cuda::getStreamFromPool(false, compute.index()));
#endif
}

namespace {

// LibTorch builds differ in which dtypes the CPU kernels implement (1.13 has no Half
// matmul on the CPU; 2.x has). Asking the library itself, with one tiny matmul and
// the layer norm every layer runs, refuses exactly what would fail later, before
// any weights are read.
void refuse_unsupported_dtype(const DeviceContext& ctx, const std::string& device, const std::string& dtype) {
  try {
    const auto options = at::TensorOptions().dtype(ctx.dtype).device(ctx.compute);
    const at::Tensor a = at::ones({2, 2}, options);
    (void)at::matmul(a, a);
    (void)at::layer_norm(a, {2});
    (void)at::softmax(a, -1);
  } catch (const std::exception&) {
    TG_THROW("--dtype {} is not supported on --device {} by this LibTorch build (its {} kernels lack that dtype); "
             "use --dtype float32", dtype, device, ctx.is_cuda() ? "CUDA" : "CPU");
  }
}

}  // namespace

DeviceContext make_device_context(const std::string& device, const std::string& dtype, bool pin_host) {
  DeviceContext ctx;
  ctx.dtype = compat::parse_dtype(dtype);
  std::string choice = device;
  if (choice == "auto") choice = cuda_available() ? "cuda" : "cpu";
  if (choice == "cpu") {
    ctx.compute = at::Device(at::kCPU);
  } else if (choice.rfind("cuda", 0) == 0) {
    TG_CHECK(cuda_available(), "--device {}: this build or machine has no CUDA device (use --device cpu)", device);
    ctx.compute = at::Device(choice);
  } else {
    TG_THROW("--device '{}' is not one of auto, cpu, cuda, cuda:N", device);
  }
  ctx.pin_host = pin_host && ctx.is_cuda();
  refuse_unsupported_dtype(ctx, device, dtype);
  return ctx;
}

}  // namespace tiergen::runtime
