#include "tiergen/runtime/device_event.h"

#ifdef TIERGEN_WITH_CUDA
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace tiergen::runtime {

#ifdef TIERGEN_WITH_CUDA

namespace {

// "cuda" without an index means the current device.
c10::DeviceIndex device_index(const DeviceContext& device) {
  return device.compute.has_index() ? device.compute.index() : c10::cuda::current_device();
}

}  // namespace

// Owns one cudaEvent_t created on the compute device; timing is disabled, which makes
// recording and waiting cheaper.
struct DeviceEvent::Handle {
  explicit Handle(c10::DeviceIndex index) : device(index) {
    c10::cuda::CUDAGuard guard(device);
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  }
  ~Handle() {
    c10::cuda::CUDAGuard guard(device);
    cudaEventDestroy(event);  // no throw from a destructor; a failure here changes nothing
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  c10::DeviceIndex device;
  cudaEvent_t event = nullptr;
};

DeviceEvent DeviceEvent::record(const DeviceContext& device) {
  DeviceEvent out;
  if (!device.is_cuda()) return out;
  out.handle_ = std::make_shared<Handle>(device_index(device));
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(out.handle_->device);
  C10_CUDA_CHECK(cudaEventRecord(out.handle_->event, stream.stream()));
  return out;
}

void DeviceEvent::make_current_stream_wait(const DeviceContext& device) const {
  if (!handle_) return;
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device_index(device));
  C10_CUDA_CHECK(cudaStreamWaitEvent(stream.stream(), handle_->event, 0));
}

#else  // CPU build: every event is complete.

struct DeviceEvent::Handle {};

DeviceEvent DeviceEvent::record(const DeviceContext&) { return {}; }
void DeviceEvent::make_current_stream_wait(const DeviceContext&) const {}

#endif

}  // namespace tiergen::runtime
