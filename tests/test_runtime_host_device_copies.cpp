// Small copies across the host-device boundary (runtime/device.h): on a CUDA device,
// pageable host memory goes through page-locked staging, so the copy is DMA in its
// stream's order rather than the driver's own staged copy (which waited for every copy
// queued on the copy engine). Values, layouts and the host-side completion must be
// those of a plain copy; on the CPU nothing is copied at all.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tiergen/runtime/device.h"

#ifdef TIERGEN_WITH_CUDA
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace tiergen::runtime {
namespace {

at::Tensor numbered(int64_t rows, int64_t cols) {
  return at::arange(rows * cols, at::kFloat).view({rows, cols});
}

TEST(HostDeviceCopies, OnTheCpuTheTensorIsReturnedAsIs) {
  const at::Tensor t = numbered(3, 4);
  EXPECT_TRUE(copy_to_host_now(t).is_same(t));
  EXPECT_TRUE(copy_to_device(t, at::kCPU).is_same(t));
}

TEST(HostDeviceCopies, CudaSmallCopiesArePageLockedAndExact) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const at::Device cuda(at::kCUDA, 0);
  const at::Tensor host = numbered(24, 7168);  // a decode step's hidden rows
  ASSERT_FALSE(host.is_pinned());

  const at::Tensor on_device = copy_to_device(host, cuda);
  EXPECT_TRUE(on_device.is_cuda());
  const at::Tensor back = copy_to_host_now(on_device);
  EXPECT_TRUE(back.is_cpu());
  EXPECT_TRUE(back.is_pinned()) << "a small copy off the device is staged in page-locked memory";
  EXPECT_TRUE(at::equal(back, host));  // complete on return: read at once

  // Non-contiguous sources keep their values (the staging buffer is dense).
  const at::Tensor columns = host.narrow(1, 3, 100);
  EXPECT_TRUE(at::equal(copy_to_host_now(copy_to_device(columns, cuda)), columns));
  const at::Tensor transposed = on_device.t();
  EXPECT_TRUE(at::equal(copy_to_host_now(transposed), host.t()));
}

TEST(HostDeviceCopies, CudaCopiesAboveTheStagingLimitGoDirectly) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const at::Device cuda(at::kCUDA, 0);
  const int64_t cols = 1024, rows = static_cast<int64_t>(kPinnedStagingMaxBytes / (cols * 4)) + 1;
  const at::Tensor host = numbered(rows, cols);
  const at::Tensor back = copy_to_host_now(copy_to_device(host, cuda));
  EXPECT_FALSE(back.is_pinned()) << "large copies must not grow the caching host allocator";
  EXPECT_TRUE(at::equal(back, host));
}

TEST(HostDeviceCopies, CudaDeviceContextCopiesToAndFromPageableMemory) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const DeviceContext device = make_device_context("cuda", "float32", false);
  const at::Tensor host = numbered(48, 512);
  const at::Tensor on_device = at::empty(host.sizes(), device.compute_options());
  device.copy(on_device, host);
  at::Tensor pageable = at::zeros(host.sizes(), at::kFloat);
  device.copy(pageable, on_device);
  EXPECT_TRUE(at::equal(pageable, host)) << "a pageable host destination is complete when copy returns";
  // Into a strided host destination, and with a dtype change on the way.
  at::Tensor wide = at::zeros({48, 1024}, at::kFloat);
  device.copy(wide.narrow(1, 0, 512), on_device);
  EXPECT_TRUE(at::equal(wide.narrow(1, 0, 512), host));
  at::Tensor doubles = at::zeros(host.sizes(), at::kDouble);
  device.copy(doubles, on_device);
  EXPECT_TRUE(at::equal(doubles, host.to(at::kDouble)));
}

// A tensor a loader's stream allocated and the compute stream reads (a loaded weight, a
// staged input) may be freed on the host once the compute thread has queued its reads
// (today a step-end sync comes first). LibTorch's caching allocator gives a freed block
// back to the stream that allocated it at once: marked as read by the compute stream
// (DeviceContext::used_on_current_stream), it is not handed out again before the
// compute stream's queued work has read it.
TEST(HostDeviceCopies, CudaMemoryReadOnAnotherStreamIsNotReusedBeforeThatStreamReadsIt) {
#ifdef TIERGEN_WITH_CUDA
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  // The test needs queued work that really is asynchronous, and LibTorch's own caching
  // allocator.
  const auto set = [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && *value != '\0' && std::string(value) != "0";
  };
  const char* alloc_conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  if (set("CUDA_LAUNCH_BLOCKING") || set("PYTORCH_NO_CUDA_MEMORY_CACHING") ||
      (alloc_conf != nullptr && std::string(alloc_conf).find("cudaMallocAsync") != std::string::npos)) {
    GTEST_SKIP() << "synchronous launches or another CUDA allocator";
  }
  const DeviceContext device = make_device_context("cuda", "float32", false);
  const c10::cuda::CUDAStream loader = c10::cuda::getStreamFromPool(false, 0);
  const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(0);
  const auto read_after_a_delay = [&](bool mark) {
    at::Tensor weight;
    void* block = nullptr;
    {
      const c10::cuda::CUDAStreamGuard on_loader(loader);
      weight = at::full({1 << 20}, 1.0f, device.compute_options());
      block = weight.data_ptr();
    }
    compute.synchronize();
    loader.synchronize();
    // The compute stream reads it only after a long kernel, as a step behind others would.
    at::cuda::sleep(int64_t(200) * 1000 * 1000);
    const at::Tensor read = weight * 1.0f;
    if (mark) device.used_on_current_stream(weight);
    weight.reset();  // the host is done with it: the compute thread takes the next layer
    at::Tensor next;
    {
      const c10::cuda::CUDAStreamGuard on_loader(loader);
      next = at::full({1 << 20}, 2.0f, device.compute_options());  // the next layer's load
    }
    const bool reused = next.data_ptr() == block;
    compute.synchronize();
    loader.synchronize();
    return std::make_pair(reused, read.min().item<float>());
  };
  // Once unmarked first, discarded: the kernels' lazy loading may synchronize the context.
  (void)read_after_a_delay(false);
  const auto [reused, value] = read_after_a_delay(true);
  EXPECT_FALSE(reused) << "the block went back to the loader while the compute stream had yet to read it";
  EXPECT_EQ(value, 1.0f);
  // Unmarked, the same steps hand the block out at once (what the step-end sync alone
  // kept safe): the hazard this guards against.
  const auto [unmarked_reused, unmarked_value] = read_after_a_delay(false);
  EXPECT_TRUE(unmarked_reused) << "the allocator no longer reuses a freed block at once on its stream";
  if (unmarked_reused) EXPECT_EQ(unmarked_value, 2.0f) << "the compute stream read the next load's bytes";
#else
  GTEST_SKIP() << "a build without CUDA";
#endif
}

}  // namespace
}  // namespace tiergen::runtime
