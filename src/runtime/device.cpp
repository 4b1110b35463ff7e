#include "tiergen/runtime/device.h"

#include <ATen/Context.h>

#include <algorithm>
#include <cstdlib>

#include "tiergen/common/error.h"
#include "tiergen/common/torch_compat.h"
#include "tiergen/runtime/emulated_stream.h"
#include "src/runtime/pitched_rows.h"

#ifdef TIERGEN_WITH_CUDA
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/accumulate.h>
#include <cuda_runtime_api.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace tiergen::runtime {

bool cuda_available() { return at::hasCUDA(); }

namespace {

// The calling thread's emulated stream, when emulation is on and it has one.
EmulatedStream* emulated_stream(const DeviceContext& device) {
  return device.emulation ? EmulatedStream::current() : nullptr;
}

#ifdef TIERGEN_WITH_CUDA

uint64_t page_size() { return static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }

uint64_t round_to_pages(uint64_t bytes) {
  const uint64_t page = page_size();
  return (std::max<uint64_t>(bytes, 1) + page - 1) / page * page;
}

// Zeroed anonymous pages registered with the driver, freed with the tensor.
at::Tensor registered_host_tensor(at::IntArrayRef sizes, at::ScalarType type) {
  const uint64_t bytes = static_cast<uint64_t>(c10::multiply_integers(sizes)) * c10::elementSize(type);
  const uint64_t rounded = round_to_pages(bytes);
  void* data = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TG_CHECK(data != MAP_FAILED, "out of host memory allocating {} bytes for a page-locked home", rounded);
  const cudaError_t status = cudaHostRegister(data, rounded, cudaHostRegisterDefault);
  if (status != cudaSuccess) {
    munmap(data, rounded);
    cudaGetLastError();  // clear it: the failure is reported here
    TG_THROW("cannot page-lock {} bytes of host memory ({}); lower --cpu-mem or turn pinning off", rounded,
             cudaGetErrorString(status));
  }
  return at::from_blob(
      data, sizes,
      [rounded](void* ptr) {
        cudaHostUnregister(ptr);  // no throw from a deleter; failure leaves only a mapping to drop
        munmap(ptr, rounded);
      },
      at::TensorOptions().dtype(type).device(at::kCPU));
}

// One cudaMemcpy2DAsync instead of ATen's pageable temporaries for non-contiguous
// copies of row-pitched views (pitched_rows.h); false when the copy must go another way.
bool copy_rows_2d(const at::Tensor& dst, const at::Tensor& src, cudaStream_t stream) {
  const std::optional<PitchedRows> p = pitched_rows(dst, src);
  if (!p) return false;
  C10_CUDA_CHECK(cudaMemcpy2DAsync(dst.data_ptr(), p->dst_pitch, src.data_ptr(), p->src_pitch, p->width_bytes,
                                   p->rows, cudaMemcpyDefault, stream));
  return true;
}

#endif

}  // namespace

at::Tensor DeviceContext::host_home(at::IntArrayRef sizes, at::ScalarType type, bool pinned) const {
#ifdef TIERGEN_WITH_CUDA
  if (pinned && is_cuda()) return registered_host_tensor(sizes, type);
#endif
  return at::zeros(sizes, at::TensorOptions().dtype(type).device(at::kCPU));
}

uint64_t DeviceContext::host_home_bytes(uint64_t bytes, bool pinned) const {
#ifdef TIERGEN_WITH_CUDA
  if (pinned && is_cuda()) return round_to_pages(bytes);
#endif
  return bytes;
}

void DeviceContext::enqueue(std::function<void()> op) const {
  if (EmulatedStream* stream = emulated_stream(*this)) {
    stream->enqueue(std::move(op));
    return;
  }
  op();  // on a GPU, `op` queues its kernels on this thread's current stream
}

void DeviceContext::copy(const at::Tensor& dst, const at::Tensor& src) const {
  if (EmulatedStream* stream = emulated_stream(*this)) {
    stream->enqueue([dst, src] { dst.copy_(src); });
    return;
  }
#ifdef TIERGEN_WITH_CUDA
  if (dst.is_cuda() || src.is_cuda()) {
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream((dst.is_cuda() ? dst : src).device().index());
    const c10::cuda::CUDAGuard guard(stream.device_index());  // the default stream's handle is the current device's
    if (copy_rows_2d(dst, src, stream.stream())) {
      // A host destination is read by the host next: complete it as copy_ would.
      if (!dst.is_cuda()) stream.synchronize();
      return;
    }
    // Small pageable host tensors cross through page-locked staging (copy_to_host_now).
    if (dst.is_cuda() && src.is_cpu()) {
      const at::Tensor staged = staged_for_device(src);
      if (staged.defined()) {
        dst.copy_(staged, /*non_blocking=*/true);
        return;
      }
    } else if (dst.is_cpu() && src.is_cuda() && !dst.is_pinned() && src.nbytes() <= kPinnedStagingMaxBytes) {
      dst.copy_(copy_to_host_now(src));  // complete: a host destination is read by the host next
      return;
    }
    dst.copy_(src, /*non_blocking=*/dst.is_cuda() && (src.is_cuda() || src.is_pinned()));
    return;
  }
#endif
  dst.copy_(src);
}

at::Tensor DeviceContext::to_compute(const at::Tensor& tensor) const {
  at::Tensor out = at::empty(tensor.sizes(), tensor.options().device(compute).pinned_memory(false));
  copy(out, tensor);
  return out;
}

#ifdef TIERGEN_WITH_CUDA
namespace {

// Two events the host can sleep on (not spin: the cores belong to CPU attention).
struct ChunkEvents {
  ChunkEvents() {
    for (cudaEvent_t& e : events) C10_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventBlockingSync | cudaEventDisableTiming));
  }
  ~ChunkEvents() {
    for (cudaEvent_t e : events) {
      if (e) cudaEventDestroy(e);  // released once complete; no throw from a destructor
    }
  }
  ChunkEvents(const ChunkEvents&) = delete;
  ChunkEvents& operator=(const ChunkEvents&) = delete;
  cudaEvent_t events[2] = {nullptr, nullptr};
};

}  // namespace
#endif

at::Tensor DeviceContext::to_compute_in_chunks(const at::Tensor& tensor, uint64_t chunk_bytes) const {
#ifdef TIERGEN_WITH_CUDA
  const auto bytes = static_cast<uint64_t>(tensor.nbytes());
  if (is_cuda() && !emulation && chunk_bytes > 0 && bytes > chunk_bytes && tensor.is_cpu() && tensor.is_contiguous() &&
      tensor.is_pinned()) {
    at::Tensor out = at::empty(tensor.sizes(), tensor.options().device(compute).pinned_memory(false));
    const c10::cuda::CUDAGuard guard(cuda_index());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(cuda_index()).stream();
    const auto* src = static_cast<const uint8_t*>(tensor.data_ptr());
    auto* dst = static_cast<uint8_t*>(out.data_ptr());
    ChunkEvents done;
    int64_t n = 0;
    for (uint64_t offset = 0; offset < bytes; offset += chunk_bytes, ++n) {
      cudaEvent_t slot = done.events[n % 2];
      if (n >= 2) C10_CUDA_CHECK(cudaEventSynchronize(slot));  // chunk n - 2 has landed
      const uint64_t len = std::min(chunk_bytes, bytes - offset);
      C10_CUDA_CHECK(cudaMemcpyAsync(dst + offset, src + offset, len, cudaMemcpyHostToDevice, stream));
      C10_CUDA_CHECK(cudaEventRecord(slot, stream));
    }
    return out;
  }
#else
  (void)chunk_bytes;
#endif
  return to_compute(tensor);
}

at::Tensor DeviceContext::to_host_now(const at::Tensor& tensor) const {
  synchronize();
  return copy_to_host_now(tensor);
}

c10::DeviceIndex DeviceContext::cuda_index() const {
#ifdef TIERGEN_WITH_CUDA
  if (is_cuda()) return compute.has_index() ? compute.index() : c10::cuda::current_device();
#endif
  TG_CHECK(false, "internal: {} is not a CUDA device", compute.str());
  return -1;
}

void DeviceContext::synchronize() const {
  if (EmulatedStream* stream = emulated_stream(*this)) {
    stream->synchronize();
    return;
  }
#ifdef TIERGEN_WITH_CUDA
  if (is_cuda()) c10::cuda::getCurrentCUDAStream(compute.index()).synchronize();
#endif
}

void DeviceContext::used_on_current_stream(const at::Tensor& tensor) const {
#ifdef TIERGEN_WITH_CUDA
  if (tensor.defined() && tensor.is_cuda()) tensor.record_stream(c10::cuda::getCurrentCUDAStream(tensor.device().index()));
#else
  (void)tensor;
#endif
}

void DeviceContext::use_own_stream() const {
  if (emulation && !is_cuda()) {
    EmulatedStream::make_current(*emulation);
    return;
  }
#ifdef TIERGEN_WITH_CUDA
  if (is_cuda()) {
    // Worker threads start on device 0; kernels and events must use the compute device.
    const c10::DeviceIndex index = cuda_index();
    c10::cuda::set_device(index);
    c10::cuda::setCurrentCUDAStream(c10::cuda::getStreamFromPool(false, index));
  }
#endif
}

namespace {

// TIERGEN_ASYNC_EMULATION=1 with optional _SEED and _MAX_DELAY_US; null when off.
std::shared_ptr<const AsyncEmulation> emulation_from_environment() {
  const char* on = std::getenv("TIERGEN_ASYNC_EMULATION");
  if (!on || std::string(on).empty() || std::string(on) == "0") return nullptr;
  auto config = std::make_shared<AsyncEmulation>();
  if (const char* seed = std::getenv("TIERGEN_ASYNC_EMULATION_SEED")) config->seed = std::strtoull(seed, nullptr, 10);
  if (const char* delay = std::getenv("TIERGEN_ASYNC_EMULATION_MAX_DELAY_US")) {
    config->max_delay_us = std::atoi(delay);
  }
  return config;
}

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
  if (!ctx.is_cuda()) ctx.emulation = emulation_from_environment();
  refuse_unsupported_dtype(ctx, device, dtype);
  return ctx;
}

}  // namespace tiergen::runtime
