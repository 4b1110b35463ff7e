#include "tiergen/runtime/device_event.h"

#include "tiergen/runtime/emulated_stream.h"

#ifdef TIERGEN_WITH_CUDA
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace tiergen::runtime {

#ifdef TIERGEN_WITH_CUDA

namespace {

// Owns one cudaEvent_t created on the compute device; timing is disabled, which makes
// recording and waiting cheaper.
struct CudaEvent {
  explicit CudaEvent(c10::DeviceIndex index) : device(index) {
    c10::cuda::CUDAGuard guard(device);
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  }
  ~CudaEvent() {
    c10::cuda::CUDAGuard guard(device);
    cudaEventDestroy(event);  // no throw from a destructor; a failure here changes nothing
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  c10::DeviceIndex device;
  cudaEvent_t event = nullptr;
};

}  // namespace

#endif

struct DeviceEvent::Handle {
  std::shared_ptr<EmulatedEvent> emulated;
#ifdef TIERGEN_WITH_CUDA
  std::unique_ptr<CudaEvent> cuda;
#endif
};

DeviceEvent DeviceEvent::record(const DeviceContext& device) {
  DeviceEvent out;
  if (device.emulation) {
    if (EmulatedStream* stream = EmulatedStream::current()) {
      out.handle_ = std::make_shared<Handle>();
      out.handle_->emulated = stream->record();
    }
    return out;  // a thread without an emulated stream has nothing queued
  }
#ifdef TIERGEN_WITH_CUDA
  if (!device.is_cuda()) return out;
  out.handle_ = std::make_shared<Handle>();
  out.handle_->cuda = std::make_unique<CudaEvent>(device.cuda_index());
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(out.handle_->cuda->device);
  c10::cuda::CUDAGuard guard(out.handle_->cuda->device);  // a thread that never chose a device is on 0
  C10_CUDA_CHECK(cudaEventRecord(out.handle_->cuda->event, stream.stream()));
#endif
  return out;
}

void DeviceEvent::make_current_stream_wait(const DeviceContext& device) const {
  if (!handle_) return;
  if (handle_->emulated) {
    if (EmulatedStream* stream = device.emulation ? EmulatedStream::current() : nullptr) {
      stream->wait_for(handle_->emulated);
    } else {
      handle_->emulated->wait();  // this thread's work runs at once: wait here
    }
    return;
  }
#ifdef TIERGEN_WITH_CUDA
  if (handle_->cuda) {
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device.cuda_index());
    c10::cuda::CUDAGuard guard(device.cuda_index());  // the default stream's handle means the current device's
    C10_CUDA_CHECK(cudaStreamWaitEvent(stream.stream(), handle_->cuda->event, 0));
  }
#endif
}

}  // namespace tiergen::runtime
