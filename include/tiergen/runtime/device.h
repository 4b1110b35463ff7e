#pragma once
// The compute device and the host memory beside it. With --device cpu, host memory
// stands in for the GPU tier (its own budget) and copies "to the device" are real
// copies into separately accounted buffers, so the same placement code runs on CI.
//
// Work on a device is issued to the calling thread's current stream: each load/store
// worker has a stream of its own, the compute thread uses the default one. In CUDA
// builds `enqueue`d work and `copy`s are asynchronous with respect to the host and
// ordered within their stream; readers on other streams order themselves with events
// (device_event.h). On the CPU everything completes at once, so a missing event wait
// could never show; under async emulation (TIERGEN_ASYNC_EMULATION=1, --device cpu
// only) each worker's stream is a thread that runs its queued work in order after a
// random delay, so it does (emulated_stream.h).
#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>

#include "tiergen/common/host_device_copy.h"  // copy_to_host_now, copy_to_device

namespace tiergen::runtime {

struct AsyncEmulation {
  uint64_t seed = 0;
  int max_delay_us = 1000;  // each queued item runs up to this long after it was queued
};

struct DeviceContext {
  at::Device compute{at::kCPU};
  at::ScalarType dtype = at::kFloat;
  bool pin_host = false;  // page-locked host homes (CUDA builds)
  std::shared_ptr<const AsyncEmulation> emulation;  // set: worker streams are emulated

  bool is_cuda() const { return compute.is_cuda(); }
  // The CUDA index of `compute`, the current device when "cuda" names none (CUDA
  // builds and devices only).
  c10::DeviceIndex cuda_index() const;
  int dtype_bytes() const { return static_cast<int>(c10::elementSize(dtype)); }
  at::TensorOptions compute_options() const { return at::TensorOptions().dtype(dtype).device(compute); }
  // Pageable host memory: staging buffers and temporaries.
  at::TensorOptions host_options() const { return at::TensorOptions().dtype(dtype).device(at::kCPU); }

  // A long-lived host home: page-locked at exactly its size (rounded to whole pages)
  // when `pinned` and this is a CUDA context, otherwise pageable. LibTorch's caching
  // pinned allocator would round it up to a power of two and keep it.
  at::Tensor host_home(at::IntArrayRef sizes, at::ScalarType type, bool pinned) const;
  // The bytes host_home(sizes, type, pinned) really occupies (what its tier is charged).
  uint64_t host_home_bytes(uint64_t bytes, bool pinned) const;

  // Queues device work on this thread's current stream (see above). `op` must own
  // (capture by value) every tensor it touches.
  void enqueue(std::function<void()> op) const;
  // dst.copy_(src) queued on this thread's current stream; asynchronous when the
  // destination is on the device. A strided prefix of [n, positions, width] rows moves
  // as one 2-D copy; small pageable host tensors go through page-locked staging (see
  // copy_to_host_now).
  void copy(const at::Tensor& dst, const at::Tensor& src) const;
  // A fresh copy on the compute device (never an alias of `tensor`), queued.
  at::Tensor to_compute(const at::Tensor& tensor) const;
  // The same, for long transfers (a layer's weights). On CUDA, from page-locked
  // memory, the copy is queued in chunks of at most `chunk_bytes`, at most two in
  // flight; the calling thread sleeps until the older one is done. A copy engine runs
  // what is queued on it in order, whatever the stream: a layer's weights queued at
  // once made every small copy queued after them (a CPU-attention result, a hidden
  // state) wait for the whole layer, 23 ms a layer for OPT-30B on an H100 host.
  at::Tensor to_compute_in_chunks(const at::Tensor& tensor, uint64_t chunk_bytes = 32ull << 20) const;
  // `tensor` on the host, complete when this returns (waits for this stream first).
  at::Tensor to_host_now(const at::Tensor& tensor) const;
  // Waits on the host for the work queued so far on this thread's current stream
  // (no-op on the CPU).
  void synchronize() const;
  // Marks `tensor`, device memory that another thread's stream allocated (a loaded
  // weight, a staged input), as read by this thread's current stream: once it is freed,
  // LibTorch's caching allocator hands its memory out again only after the work this
  // stream has queued by then is done (record_stream). Without it the allocator reuses a
  // freed block at once on the stream that allocated it: a loader's next copy could
  // overwrite data the compute stream has yet to read. A no-op for host tensors, on
  // the CPU, and for memory the allocator does not own.
  void used_on_current_stream(const at::Tensor& tensor) const;
  // Gives the calling thread a stream of its own: from LibTorch's pool in CUDA
  // builds, an emulated one under async emulation; no-op otherwise.
  void use_own_stream() const;
};

// "cpu", "cuda", "cuda:1"; "auto" picks cuda when available. Throws naming the choice.
// TIERGEN_ASYNC_EMULATION=1 (optionally TIERGEN_ASYNC_EMULATION_SEED, _MAX_DELAY_US)
// turns on stream emulation for --device cpu.
DeviceContext make_device_context(const std::string& device, const std::string& dtype, bool pin_host);

bool cuda_available();

}  // namespace tiergen::runtime
