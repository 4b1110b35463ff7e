#include "tiergen/runtime/live_rows.h"

#include "tiergen/common/error.h"

namespace tiergen::runtime {

void LiveRows::update(const std::vector<bool>& live, const at::Device& device) {
  rows_ = static_cast<int64_t>(live.size());
  live_.clear();
  for (int64_t r = 0; r < rows_; ++r) {
    if (live[static_cast<size_t>(r)]) live_.push_back(r);
  }
  // Only a partly live batch gathers and scatters; the others never read the index.
  index_ = all() || none() ? at::Tensor() : at::tensor(live_, at::kLong).to(device);
}

at::Tensor LiveRows::gather(const at::Tensor& full) const {
  if (all()) return full;
  TG_CHECK(index_.defined() && full.size(0) == rows_, "internal: gathering {} live rows of a {}-row tensor",
           count(), full.size(0));
  return full.index_select(0, index_);
}

at::Tensor LiveRows::scatter(const at::Tensor& live_part) const {
  if (all()) return live_part;
  TG_CHECK(index_.defined() && live_part.size(0) == count(), "internal: scattering {} rows as {} live rows",
           live_part.size(0), count());
  std::vector<int64_t> shape = live_part.sizes().vec();
  shape[0] = rows_;
  return at::zeros(shape, live_part.options()).index_copy_(0, index_, live_part);
}

model::StepInputs LiveRows::gather(const model::StepInputs& step) const {
  model::StepInputs live_step;
  live_step.positions = step.positions.defined() ? gather(step.positions) : step.positions;
  live_step.pad = step.pad.defined() ? gather(step.pad) : step.pad;
  live_step.past_len = step.past_len;
  return live_step;
}

}  // namespace tiergen::runtime
