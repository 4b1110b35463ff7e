#pragma once
// The rows of one gpu batch that still generate at a decode token. Sequences that
// finished (end-of-sequence, a stop token or string, their own max_tokens) and the
// padding rows of a partial block leave the batch's matmuls: the embedding, the
// projections, the MLP and the LM head run on the live rows only, so a ragged batch
// costs what its live sequences need rather than what its longest one needs.
// The KV cache and the homes of the hidden states keep the batch's
// full row layout (the cache and activation homes are split by rows across tiers),
// and attention itself runs over the live rows' cache only (KvCache::decode_attention);
// a finished row's entries there are zeros that nothing reads again.
#include <ATen/ATen.h>

#include <vector>

#include "tiergen/model/forward.h"

namespace tiergen::runtime {

class LiveRows {
 public:
  // `live[r]`: row r of the batch still generates. The row index is placed on `device`.
  void update(const std::vector<bool>& live, const at::Device& device);

  int64_t rows() const { return rows_; }
  int64_t count() const { return static_cast<int64_t>(live_.size()); }
  bool none() const { return live_.empty(); }
  // Every row is live: the batch runs in its full layout, with no gather or scatter.
  bool all() const { return count() == rows_; }
  const std::vector<int64_t>& indices() const { return live_; }

  // The live rows of `full` (rows along dim 0), in row order.
  at::Tensor gather(const at::Tensor& full) const;
  // The full layout again: `live_part`'s rows in their places, zeros elsewhere.
  at::Tensor scatter(const at::Tensor& live_part) const;
  // A step's positions and padding for the live rows (past_len is shared).
  model::StepInputs gather(const model::StepInputs& step) const;

 private:
  int64_t rows_ = 0;
  std::vector<int64_t> live_;  // indices of the live rows, ascending
  at::Tensor index_;           // the same on the compute device
};

}  // namespace tiergen::runtime
