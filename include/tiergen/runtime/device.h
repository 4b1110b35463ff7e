#pragma once
// The compute device and the host memory beside it. With --device cpu, host memory
// stands in for the GPU tier (its own budget) and copies "to the device" are real
// copies into separately accounted buffers, so the same placement code runs on CI.
#include <ATen/ATen.h>

#include <string>

namespace tiergen::runtime {

struct DeviceContext {
  at::Device compute{at::kCPU};
  at::ScalarType dtype = at::kFloat;
  bool pin_host = false;  // page-locked host buffers (CUDA builds)

  bool is_cuda() const { return compute.is_cuda(); }
  int dtype_bytes() const { return static_cast<int>(c10::elementSize(dtype)); }
  at::TensorOptions compute_options() const { return at::TensorOptions().dtype(dtype).device(compute); }
  at::TensorOptions host_options() const;
  // A fresh copy on the compute device (never an alias of `host`).
  at::Tensor to_compute(const at::Tensor& tensor) const;
  // A fresh host copy (pinned when configured).
  at::Tensor to_host(const at::Tensor& tensor) const;
  // Waits for queued device work issued by this thread on its current stream (no-op
  // on the CPU): a task's data is ready when its worker returns.
  void synchronize() const;
  // Gives the calling thread a CUDA stream of its own from LibTorch's pool, so a
  // worker's copies overlap the compute stream (no-op on the CPU).
  void use_own_stream() const;
};

// "cpu", "cuda", "cuda:1"; "auto" picks cuda when available. Throws naming the choice.
DeviceContext make_device_context(const std::string& device, const std::string& dtype, bool pin_host);

bool cuda_available();

}  // namespace tiergen::runtime
