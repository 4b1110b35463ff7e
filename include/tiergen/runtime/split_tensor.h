#pragma once
// A tensor [units, positions, width] whose units (sequence x kv-head pairs of the KV
// cache, or sequences of the hidden states) are split across tiers by a policy's
// percentages: units [0, g) on the gpu, [g, g+c) on the cpu, the rest on disk, each
// unit contiguous so that a unit's positions can be read and written in place.
#include <ATen/ATen.h>

#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "tiergen/runtime/device.h"
#include "tiergen/runtime/device_event.h"
#include "tiergen/runtime/tiers.h"

namespace tiergen::runtime {

// A buffer brought closer to the compute device; its staging bytes stay reserved on
// their tiers for as long as it lives.
// Copies share the reservations; the last copy releases them.
struct Staged {
  at::Tensor tensor;
  // Recorded after the copies that fill `tensor` were queued; the compute stream waits
  // on it before reading (always complete on the CPU and for host tensors).
  DeviceEvent ready;
  std::vector<std::shared_ptr<Reservation>> reservations;
  // Host buffers the queued copies read from: held (with their reservations) until
  // the consumer is done. (Registered homes live for the whole run; a pageable buffer
  // is read by the time its copy call returns.)
  std::vector<at::Tensor> sources;
  void keep(Reservation&& reservation) { reservations.push_back(std::make_shared<Reservation>(std::move(reservation))); }
  void keep_all(const Staged& other) {
    reservations.insert(reservations.end(), other.reservations.begin(), other.reservations.end());
    sources.insert(sources.end(), other.sources.begin(), other.sources.end());
  }
};

class SplitTensor {
 public:
  // `elem` is the stored element type: the compute dtype by default, or the bytes and
  // fp16 bits of a quantized cache (kByte, kShort).
  SplitTensor(Tiers& tiers, const DeviceContext& device, const std::array<int64_t, kNumTiers>& split,
              int64_t positions, int64_t width, const std::string& what,
              std::optional<at::ScalarType> elem = std::nullopt);

  int64_t units() const { return begin_[kNumTiers]; }
  int64_t units_on(Tier t) const { return begin_[idx(t) + 1] - begin_[idx(t)]; }
  int64_t begin(Tier t) const { return begin_[idx(t)]; }
  int64_t positions() const { return positions_; }

  // Resident pieces ([n, positions, width]); undefined when the tier holds no unit.
  const at::Tensor& gpu_piece() const { return gpu_; }
  const at::Tensor& cpu_piece() const { return cpu_; }

  // Writes src [units(), len, width] (any device) at positions [pos, pos + len).
  void write(const at::Tensor& src, int64_t pos);
  // Writes only the units of tier `t`: src is [units_on(t), len, width].
  void write_tier(Tier t, const at::Tensor& src, int64_t pos);
  // Positions [0, len) of tier t's units, as a tensor on the host (cpu and disk
  // units; disk units are read into a staging buffer charged to the cpu tier).
  Staged read_to_host(Tier t, int64_t len, int64_t capacity) const;
  // The same on the compute device, charged to the gpu tier; `capacity` >= len
  // positions are allocated so the caller can append the step's new entry (callers
  // that load every step pass positions(): one buffer size the allocator reuses).
  Staged read_to_compute(Tier t, int64_t len, int64_t capacity) const;
  // The same without recording `ready`, for callers that queue more work on this
  // thread's stream and record one event after all of it.
  Staged copy_to_compute(Tier t, int64_t len, int64_t capacity) const;
  // Positions [0, len) of all units, in unit order, as one tensor on the compute
  // device (a view of the home when every unit is on the gpu). `ready` is recorded
  // even then, after the waits this thread's stream was given.
  Staged gather_to_compute(int64_t len) const;

 private:
  static int idx(Tier t) { return static_cast<int>(t); }
  uint64_t elem_bytes() const { return c10::elementSize(elem_); }
  uint64_t unit_bytes() const { return static_cast<uint64_t>(positions_ * width_) * elem_bytes(); }
  at::TensorOptions compute_options() const { return device_.compute_options().dtype(elem_); }
  at::TensorOptions host_options() const { return device_.host_options().dtype(elem_); }

  Tiers& tiers_;
  DeviceContext device_;
  std::array<int64_t, kNumTiers + 1> begin_{};
  int64_t positions_;
  int64_t width_;
  std::string what_;
  at::ScalarType elem_;
  at::Tensor gpu_, cpu_;
  DiskExtent disk_;
  std::vector<Reservation> homes_;
};

}  // namespace tiergen::runtime
