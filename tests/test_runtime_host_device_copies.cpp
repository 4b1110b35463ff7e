// Small copies across the host-device boundary (runtime/device.h): on a CUDA device,
// pageable host memory goes through page-locked staging, so the copy is DMA in its
// stream's order rather than the driver's own staged copy (which waited for every copy
// queued on the copy engine). Values, layouts and the host-side completion must be
// those of a plain copy; on the CPU nothing is copied at all.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "tiergen/runtime/device.h"

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

}  // namespace
}  // namespace tiergen::runtime
