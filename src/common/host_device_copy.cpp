#include "tiergen/common/host_device_copy.h"

#ifdef TIERGEN_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace tiergen {

namespace {

#ifdef TIERGEN_WITH_CUDA
// Page-locked memory for a small copy to or from a CUDA device: from LibTorch's caching
// host allocator, which reuses a block only after the copies recorded on it are done.
// Undefined for larger tensors, which copy directly.
at::Tensor pinned_staging(const at::Tensor& like) {
  if (like.nbytes() > kPinnedStagingMaxBytes) return at::Tensor();
  return at::empty(like.sizes(), like.options().device(at::kCPU).pinned_memory(true));
}
#endif

}  // namespace

at::Tensor staged_for_device(const at::Tensor& host) {
#ifdef TIERGEN_WITH_CUDA
  if (host.is_pinned()) return at::Tensor();
  at::Tensor staged = pinned_staging(host);
  if (staged.defined()) staged.copy_(host);
  return staged;
#else
  (void)host;
  return at::Tensor();
#endif
}

at::Tensor copy_to_host_now(const at::Tensor& tensor) {
#ifdef TIERGEN_WITH_CUDA
  if (tensor.is_cuda()) {
    const c10::cuda::CUDAGuard guard(tensor.device().index());
    const at::Tensor staged = pinned_staging(tensor);
    if (staged.defined()) {
      staged.copy_(tensor, /*non_blocking=*/true);
      c10::cuda::getCurrentCUDAStream(tensor.device().index()).synchronize();
      return staged;
    }
  }
#endif
  return tensor.to(at::kCPU);  // blocking and ordered after the current stream's work on a GPU
}

at::Tensor copy_to_device(const at::Tensor& tensor, const at::Device& device) {
#ifdef TIERGEN_WITH_CUDA
  if (device.is_cuda() && tensor.is_cpu()) {
    const at::Tensor staged = staged_for_device(tensor);
    if (staged.defined()) return staged.to(device, /*non_blocking=*/true);
  }
#endif
  return tensor.to(device);
}

at::Tensor copy_across(const at::Tensor& tensor, const at::Device& device) {
  if (tensor.device() == device) return tensor;
  return device.is_cpu() ? copy_to_host_now(tensor) : copy_to_device(tensor, device);
}

}  // namespace tiergen
