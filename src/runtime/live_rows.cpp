#include "tiergen/runtime/live_rows.h"

#include <algorithm>

#include "tiergen/common/error.h"
#include "tiergen/runtime/device.h"

namespace tiergen::runtime {

void LiveRows::update(const std::vector<bool>& live, const at::Device& device) {
  std::vector<int64_t> source(live.size(), -1);
  for (size_t r = 0; r < live.size(); ++r) {
    if (live[r]) source[r] = static_cast<int64_t>(r);
  }
  update(source, device);
}

void LiveRows::update(const std::vector<int64_t>& source, const at::Device& device,
                      const std::vector<int64_t>* order_key) {
  rows_ = static_cast<int64_t>(source.size());
  source_ = source;
  live_.clear();
  shared_ = false;
  for (int64_t r = 0; r < rows_; ++r) {
    const int64_t s = source_[static_cast<size_t>(r)];
    TG_CHECK(s >= -1 && s <= r, "internal: row {} takes row {}", r, s);
    if (s == r) {
      live_.push_back(r);
    } else if (s >= 0) {
      TG_CHECK(source_[static_cast<size_t>(s)] == s, "internal: row {} takes row {}, which is not computed", r, s);
      shared_ = true;
    }
  }
  if (order_key) {
    TG_CHECK(order_key->size() == source.size(), "internal: {} order keys for {} rows", order_key->size(), rows_);
    std::stable_sort(live_.begin(), live_.end(), [&](int64_t a, int64_t b) {
      return (*order_key)[static_cast<size_t>(a)] < (*order_key)[static_cast<size_t>(b)];
    });
  }
  reordered_ = !std::is_sorted(live_.begin(), live_.end());
  // Only a partly computed batch gathers and scatters; the others never read the index.
  index_ = all() || none() ? at::Tensor() : copy_to_device(at::tensor(live_, at::kLong), device);
  expand_ = at::Tensor();
  if (shared_) {
    std::vector<int64_t> place(source.size(), -1);  // a computed row's place among live_
    for (size_t i = 0; i < live_.size(); ++i) place[static_cast<size_t>(live_[i])] = static_cast<int64_t>(i);
    std::vector<int64_t> expand(source.size());
    for (size_t r = 0; r < source.size(); ++r) {
      expand[r] = source[r] < 0 ? count() : place[static_cast<size_t>(source[r])];
    }
    expand_ = copy_to_device(at::tensor(expand, at::kLong), device);
  }
}

at::Tensor LiveRows::gather(const at::Tensor& full) const {
  if (all()) return full;
  TG_CHECK(index_.defined() && full.size(0) == rows_, "internal: gathering {} computed rows of a {}-row tensor",
           count(), full.size(0));
  return full.index_select(0, index_);
}

at::Tensor LiveRows::scatter(const at::Tensor& computed) const {
  if (all()) return computed;
  TG_CHECK(index_.defined() && computed.size(0) == count(), "internal: scattering {} rows as {} computed rows",
           computed.size(0), count());
  std::vector<int64_t> shape = computed.sizes().vec();
  if (shared_) {
    shape[0] = 1;
    return at::cat({computed, at::zeros(shape, computed.options())}).index_select(0, expand_);
  }
  shape[0] = rows_;
  return at::zeros(shape, computed.options()).index_copy_(0, index_, computed);
}

model::StepInputs LiveRows::gather(const model::StepInputs& step) const {
  model::StepInputs live_step;
  live_step.positions = step.positions.defined() ? gather(step.positions) : step.positions;
  live_step.pad = step.pad.defined() ? gather(step.pad) : step.pad;
  live_step.past_len = step.past_len;
  return live_step;
}

}  // namespace tiergen::runtime
