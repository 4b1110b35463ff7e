#pragma once
// Small copies across the host-device boundary on the calling thread's current stream,
// for both runtime/ (the CPU attention's query and output, token ids, row indices,
// sampled ids) and model/ (activations crossing to and from weights the policy keeps
// on the host, runtime::Policy::cpu_weight_compute_*).
//
// From or to a CUDA device, pageable host memory goes through a page-locked staging
// buffer (LibTorch's caching host allocator, up to kPinnedStagingMaxBytes) and moves as
// DMA in its stream's order. The driver copies pageable memory through buffers of its
// own: on an H200, CPU attention that copied its query off the GPU and its output back
// that way (under 1 MB each) ended 0.1 ms after the next layer's weight chunks, 22 ms
// instead of 4, as if those copies waited for all the copy engine had queued.
// Elsewhere these are plain `.to(...)` copies.
#include <ATen/ATen.h>

#include <cstdint>

namespace tiergen {

constexpr uint64_t kPinnedStagingMaxBytes = 64ull << 20;

// `tensor` on the host, complete when this returns (a host tensor is returned as is).
at::Tensor copy_to_host_now(const at::Tensor& tensor);

// `tensor` on `device`, queued (a tensor already there is returned as is).
at::Tensor copy_to_device(const at::Tensor& tensor, const at::Device& device);

// `tensor` on `device` either way: copy_to_host_now to the host, copy_to_device to a
// device (a tensor already there is returned as is).
at::Tensor copy_across(const at::Tensor& tensor, const at::Device& device);

// A page-locked copy of a small pageable host tensor, to go to a CUDA device from;
// undefined when `host` is page-locked already, too large to stage, or the build has
// no CUDA.
at::Tensor staged_for_device(const at::Tensor& host);

}  // namespace tiergen
