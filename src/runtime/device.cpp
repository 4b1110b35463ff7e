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
  return ctx;
}

}  // namespace tiergen::runtime
