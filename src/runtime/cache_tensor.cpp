#include "tiergen/runtime/cache_tensor.h"

#include "tiergen/common/error.h"
#include "tiergen/runtime/compressed_tensor.h"
#include "tiergen/runtime/device.h"

namespace tiergen::runtime {

namespace {

// [n, len, w] slices of the three parts of a compressed cache, as one CompressedTensor
// of n * len rows.
CompressedTensor as_rows(const at::Tensor& packed, const at::Tensor& mins, const at::Tensor& scales, int64_t head_dim,
                         const CompressionConfig& config) {
  CompressedTensor c;
  c.rows = packed.size(0) * packed.size(1);
  c.cols = head_dim;
  c.config = config;
  c.packed = packed.contiguous().view({c.rows, -1});
  c.mins = mins.contiguous().view({c.rows, -1});
  c.scales = scales.contiguous().view({c.rows, -1});
  return c;
}

}  // namespace

kernels::KvView HostCacheView::view(const DeviceContext& device, const CompressionConfig& config) const {
  if (!config.enabled) return kernels::KvView::dense(values.tensor.data_ptr(), kernel_elem_type(device.dtype));
  return kernels::KvView::compressed(values.tensor.data_ptr<uint8_t>(),
                                     reinterpret_cast<const uint16_t*>(mins.tensor.data_ptr<int16_t>()),
                                     reinterpret_cast<const uint16_t*>(scales.tensor.data_ptr<int16_t>()),
                                     {config.bits, config.group_size});
}

CacheTensor::CacheTensor(Tiers& tiers, const DeviceContext& device, const std::array<int64_t, kNumTiers>& split,
                         int64_t max_len, int64_t head_dim, const std::string& what,
                         const CompressionConfig& compression, const at::Tensor& quantize_errors)
    : tiers_(tiers), device_(device), compression_(compression), head_dim_(head_dim), quantize_errors_(quantize_errors) {
  if (!compression_.enabled) {
    values_ = std::make_unique<SplitTensor>(tiers, device, split, max_len, head_dim, what);
    return;
  }
  const int64_t groups = (head_dim + compression_.group_size - 1) / compression_.group_size;
  const int64_t packed = groups * compression_.group_size * compression_.bits / 8;
  values_ = std::make_unique<SplitTensor>(tiers, device, split, max_len, packed, what + " (packed)", at::kByte);
  mins_ = std::make_unique<SplitTensor>(tiers, device, split, max_len, groups, what + " (mins)", at::kShort);
  scales_ = std::make_unique<SplitTensor>(tiers, device, split, max_len, groups, what + " (scales)", at::kShort);
}

void CacheTensor::write(const at::Tensor& src, int64_t pos) {
  for (Tier t : {Tier::Gpu, Tier::Cpu, Tier::Disk}) {
    if (units_on(t) > 0) write_tier(t, src.narrow(0, begin(t), units_on(t)), pos);
  }
}

void CacheTensor::write_tier(Tier t, const at::Tensor& src, int64_t pos) {
  if (!compression_.enabled) {
    values_->write_tier(t, src, pos);
    return;
  }
  // Quantize where the new entries are (the compute device), then move bytes.
  const int64_t n = src.size(0), len = src.size(1);
  const CompressedTensor c = compress(src.reshape({n * len, head_dim_}), compression_, quantize_errors_);
  values_->write_tier(t, c.packed.view({n, len, -1}), pos);
  mins_->write_tier(t, c.mins.view({n, len, -1}), pos);
  scales_->write_tier(t, c.scales.view({n, len, -1}), pos);
}

Staged CacheTensor::dense_on_compute(Tier t, int64_t len, int64_t capacity) const {
  if (!compression_.enabled) return values_->read_to_compute(t, len, capacity);
  // One event after the copies and the dequantization, all queued on this stream.
  Staged packed = values_->copy_to_compute(t, len, len);
  Staged mins = mins_->copy_to_compute(t, len, len);
  Staged scales = scales_->copy_to_compute(t, len, len);
  const int64_t n = units_on(t);
  Staged dense;
  dense.keep(tiers_.gpu.reserve(static_cast<uint64_t>(n * capacity * head_dim_) * device_.dtype_bytes(),
                                "KV cache dequantize"));
  for (const Staged* part : {&packed, &mins, &scales}) dense.keep_all(*part);
  dense.tensor = at::empty({n, capacity, head_dim_}, device_.compute_options());
  if (len > 0) {
    device_.enqueue([dst = dense.tensor.narrow(1, 0, len), packed = packed.tensor, mins = mins.tensor,
                     scales = scales.tensor, n, len, head_dim = head_dim_, config = compression_,
                     dtype = device_.dtype]() mutable {
      const CompressedTensor c = as_rows(packed.narrow(1, 0, len), mins.narrow(1, 0, len), scales.narrow(1, 0, len),
                                         head_dim, config);
      dst.copy_(decompress(c, dtype).view({n, len, head_dim}));
    });
  }
  dense.ready = DeviceEvent::record(device_);
  return dense;
}

HostCacheView CacheTensor::host_view(Tier t, int64_t len, int64_t capacity) const {
  HostCacheView view;
  if (host_resident(t)) {  // in place: the whole piece, so the kernel's strides hold
    const auto piece = [t](const SplitTensor& s) { return t == Tier::Gpu ? s.gpu_piece() : s.cpu_piece(); };
    view.capacity = positions();
    view.values.tensor = piece(*values_);
    if (compression_.enabled) {
      view.mins.tensor = piece(*mins_);
      view.scales.tensor = piece(*scales_);
    }
    return view;
  }
  view.capacity = capacity;
  view.values = values_->read_to_host(t, len, view.capacity);
  if (compression_.enabled) {
    view.mins = mins_->read_to_host(t, len, view.capacity);
    view.scales = scales_->read_to_host(t, len, view.capacity);
  }
  return view;
}

at::Tensor CacheTensor::as_stored(const at::Tensor& rows) const {
  if (!compression_.enabled) return rows;
  const int64_t n = rows.size(0), len = rows.size(1);
  return decompress(compress(rows.reshape({n * len, head_dim_}), compression_, quantize_errors_), rows.scalar_type())
      .view(rows.sizes());
}

void CacheTensor::put_row(HostCacheView& view, const at::Tensor& rows, int64_t pos) const {
  const at::Tensor host = copy_to_host_now(rows);
  if (!compression_.enabled) {
    view.values.tensor.narrow(1, pos, 1).copy_(host);
    return;
  }
  const int64_t n = host.size(0);
  const CompressedTensor c = compress(host.reshape({n, head_dim_}), compression_);
  view.values.tensor.narrow(1, pos, 1).copy_(c.packed.view({n, 1, -1}));
  view.mins.tensor.narrow(1, pos, 1).copy_(c.mins.view({n, 1, -1}));
  view.scales.tensor.narrow(1, pos, 1).copy_(c.scales.view({n, 1, -1}));
}

}  // namespace tiergen::runtime
