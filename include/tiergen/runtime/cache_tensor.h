#pragma once
// Keys or values of one (layer, gpu batch): [units, max_len, head_dim] split across
// tiers (split_tensor.h), stored dense or, with compress_cache, quantized row by row
// along head_dim. New entries are quantized as they are stored; readers get dense
// values on the compute device, or the stored bytes in host memory for the CPU
// attention kernel, which dequantizes in registers.
#include <memory>

#include "kernels/cpu/attention.h"
#include "tiergen/runtime/split_tensor.h"

namespace tiergen::runtime {

// Host-resident cache rows for the CPU kernel: dense values, or packed + fp16 meta.
struct HostCacheView {
  Staged values, mins, scales;
  int64_t capacity = 0;
  kernels::KvView view(const DeviceContext& device, const CompressionConfig& config) const;
};

class CacheTensor {
 public:
  // `quantize_errors`: a device int32 [1] the GPU quantizer flags bad values in
  // (KvCache checks it once per token); undefined on the CPU, which throws at once.
  CacheTensor(Tiers& tiers, const DeviceContext& device, const std::array<int64_t, kNumTiers>& split, int64_t max_len,
              int64_t head_dim, const std::string& what, const CompressionConfig& compression,
              const at::Tensor& quantize_errors = at::Tensor());

  int64_t units_on(Tier t) const { return values_->units_on(t); }
  int64_t begin(Tier t) const { return values_->begin(t); }
  int64_t positions() const { return values_->positions(); }
  const CompressionConfig& compression() const { return compression_; }

  // src: dense [units (of all tiers, or of tier t), len, head_dim] on any device.
  void write(const at::Tensor& src, int64_t pos);
  void write_tier(Tier t, const at::Tensor& src, int64_t pos);

  // Dense [n, capacity, d] on the compute device with positions [0, len) filled,
  // queued on this thread's stream (`ready` marks the end for non-gpu tiers).
  Staged dense_on_compute(Tier t, int64_t len, int64_t capacity) const;
  // Host rows [0, len) of a cpu tier (in place, capacity = positions) or disk tier
  // (staged); of the gpu tier too when the compute device is the CPU (in place).
  HostCacheView host_view(Tier t, int64_t len, int64_t capacity) const;
  // Whether host_view can read tier t's units where they live.
  bool host_resident(Tier t) const { return t == Tier::Cpu || (t == Tier::Gpu && !device_.is_cuda()); }
  // Dense rows [n, len, d] as the cache will give them back (quantized and dequantized
  // when compressed), so an entry used before it is stored reads the same as after.
  at::Tensor as_stored(const at::Tensor& rows) const;
  // Writes dense rows [n, 1, d] at `pos` into a staged host view (quantizing if needed).
  void put_row(HostCacheView& view, const at::Tensor& rows, int64_t pos) const;

 private:
  Tiers& tiers_;
  DeviceContext device_;
  CompressionConfig compression_;
  int64_t head_dim_;
  at::Tensor quantize_errors_;
  std::unique_ptr<SplitTensor> values_;         // dense values or packed bytes
  std::unique_ptr<SplitTensor> mins_, scales_;  // compressed only
};

}  // namespace tiergen::runtime
