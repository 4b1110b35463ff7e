#include "tiergen/runtime/split_tensor.h"

#include "tiergen/common/error.h"

namespace tiergen::runtime {

SplitTensor::SplitTensor(Tiers& tiers, const DeviceContext& device, const std::array<int64_t, kNumTiers>& split,
                         int64_t positions, int64_t width, const std::string& what,
                         std::optional<at::ScalarType> elem)
    : tiers_(tiers), device_(device), positions_(positions), width_(width), what_(what),
      elem_(elem.value_or(device.dtype)) {
  for (int i = 0; i < kNumTiers; ++i) begin_[i + 1] = begin_[i] + split[i];
  const int64_t g = units_on(Tier::Gpu), c = units_on(Tier::Cpu), d = units_on(Tier::Disk);
  if (g > 0) {
    homes_.push_back(tiers_.gpu.reserve(g * unit_bytes(), what_));
    gpu_ = at::zeros({g, positions_, width_}, compute_options());
  }
  if (c > 0) {
    // Page-locked (exact size) in CUDA builds: loads from here are single DMA copies.
    homes_.push_back(tiers_.cpu.reserve(device_.host_home_bytes(c * unit_bytes(), device_.pin_host), what_));
    cpu_ = device_.host_home({c, positions_, width_}, elem_, device_.pin_host);
  }
  if (d > 0) disk_ = tiers_.disk_tier().allocate(d * unit_bytes(), what_);
}

void SplitTensor::write(const at::Tensor& src, int64_t pos) {
  TG_CHECK(src.size(0) == units(), "internal: {} write of {} units into {}", what_, src.size(0), units());
  for (Tier t : {Tier::Gpu, Tier::Cpu, Tier::Disk}) {
    if (units_on(t) > 0) write_tier(t, src.narrow(0, begin(t), units_on(t)), pos);
  }
}

void SplitTensor::write_tier(Tier t, const at::Tensor& src, int64_t pos) {
  const int64_t len = src.size(1);
  TG_CHECK(pos + len <= positions_, "internal: {} write past its {} positions", what_, positions_);
  if (t == Tier::Gpu) {
    device_.copy(gpu_.narrow(1, pos, len), src);
    return;
  }
  if (t == Tier::Cpu) {
    device_.copy(cpu_.narrow(1, pos, len), src);
    return;
  }
  const at::Tensor host = device_.to_host_now(src).to(elem_).contiguous();
  const uint64_t row = static_cast<uint64_t>(len * width_) * elem_bytes();
  const uint64_t at_pos = static_cast<uint64_t>(pos * width_) * elem_bytes();
  const auto* bytes = static_cast<const uint8_t*>(host.data_ptr());
  for (int64_t u = 0; u < src.size(0); ++u) {
    tiers_.disk_tier().write(disk_, u * unit_bytes() + at_pos, bytes + u * row, row);
  }
}

Staged SplitTensor::read_to_host(Tier t, int64_t len, int64_t capacity) const {
  const int64_t n = units_on(t);
  Staged staged;
  if (t == Tier::Cpu) {
    staged.tensor = cpu_.narrow(1, 0, len);
    return staged;
  }
  TG_CHECK(t == Tier::Disk, "internal: read_to_host of gpu units");
  // Pageable: the disk, not the host-to-device copy after it, bounds these loads,
  // and LibTorch's pinned allocator would keep every size it ever served.
  const uint64_t staging = static_cast<uint64_t>(n * capacity * width_) * elem_bytes();
  staged.keep(tiers_.cpu.reserve(staging, what_ + " disk staging"));
  at::Tensor buffer = at::empty({n, capacity, width_}, host_options());
  const uint64_t row = static_cast<uint64_t>(len * width_) * elem_bytes();
  auto* bytes = static_cast<uint8_t*>(buffer.data_ptr());
  const uint64_t stride = static_cast<uint64_t>(capacity * width_) * elem_bytes();
  for (int64_t u = 0; u < n; ++u) tiers_.disk_tier().read(disk_, u * unit_bytes(), bytes + u * stride, row);
  staged.tensor = buffer;
  return staged;
}

Staged SplitTensor::read_to_compute(Tier t, int64_t len, int64_t capacity) const {
  Staged staged = copy_to_compute(t, len, capacity);
  // A gpu home is used in place: nothing was queued, nothing to wait for.
  if (t != Tier::Gpu) staged.ready = DeviceEvent::record(device_);
  return staged;
}

Staged SplitTensor::copy_to_compute(Tier t, int64_t len, int64_t capacity) const {
  const int64_t n = units_on(t);
  Staged staged;
  if (t == Tier::Gpu) {
    staged.tensor = gpu_.narrow(1, 0, capacity);
    return staged;
  }
  Staged host = read_to_host(t, len, capacity);
  const uint64_t bytes = static_cast<uint64_t>(n * capacity * width_) * elem_bytes();
  staged.keep(tiers_.gpu.reserve(bytes, what_ + " load"));
  staged.tensor = at::empty({n, capacity, width_}, compute_options());
  // One 2-D copy of the prefix rows, from page-locked memory for cpu homes.
  device_.copy(staged.tensor.narrow(1, 0, len), host.tensor.narrow(1, 0, len));
  staged.keep_all(host);
  staged.sources.push_back(host.tensor);
  return staged;
}

Staged SplitTensor::gather_to_compute(int64_t len) const {
  Staged gathered;
  std::vector<at::Tensor> parts;
  for (Tier t : {Tier::Gpu, Tier::Cpu, Tier::Disk}) {
    if (units_on(t) == 0) continue;
    Staged part = copy_to_compute(t, len, len);
    parts.push_back(part.tensor.narrow(1, 0, len));
    gathered.keep_all(part);
  }
  if (parts.size() == 1) {
    gathered.tensor = parts.front();
  } else {
    const uint64_t bytes = static_cast<uint64_t>(units() * len * width_) * elem_bytes();
    gathered.keep(tiers_.gpu.reserve(bytes, what_ + " gather"));
    gathered.tensor = at::empty({units(), len, width_}, compute_options());
    device_.enqueue([out = gathered.tensor, parts]() mutable { at::cat_out(out, parts, 0); });
  }
  gathered.ready = DeviceEvent::record(device_);
  return gathered;
}

}  // namespace tiergen::runtime
