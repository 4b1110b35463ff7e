#pragma once
// The rows of one gpu batch that are computed at a step, and where each row's result
// comes from.
//
// Decode tokens: sequences that finished (end-of-sequence, a stop token or string,
// their own max_tokens) and the padding rows of a partial block leave the batch's
// matmuls: the embedding, the projections, the MLP and the LM head run on the live
// rows only, so a ragged batch costs what its live sequences need rather than what its
// longest one needs.
// The prefill: rows with the same prompt (the n samples of one request) compute it
// once and share the result, padding rows compute nothing, and the computed rows are
// gathered shortest prompt first (the prefill runs by groups of similar length).
//
// The KV cache and the homes of the hidden states keep the batch's full row layout
// (the cache and activation homes are split by rows across tiers): scatter() puts the
// computed rows back in it, copying a shared row to every row that takes it. Decode
// attention runs over the live rows' cache only (KvCache::decode_attention); a row
// nothing computed holds zeros that nothing reads again.
#include <ATen/ATen.h>

#include <vector>

#include "tiergen/model/forward.h"

namespace tiergen::runtime {

class LiveRows {
 public:
  // `live[r]`: row r of the batch is computed, for itself. The index is placed on `device`.
  void update(const std::vector<bool>& live, const at::Device& device);
  // `source[r]`: the row whose computed result row r takes: r itself, an earlier row
  // with the same input, or -1 (nothing: zeros). A row that is some row's source must
  // be its own source. With `order_key`, the computed rows are gathered in ascending
  // order of their key (stable), e.g. by prompt length so that rows of similar length
  // are consecutive; without, in row order.
  void update(const std::vector<int64_t>& source, const at::Device& device,
              const std::vector<int64_t>* order_key = nullptr);

  int64_t rows() const { return rows_; }
  int64_t count() const { return static_cast<int64_t>(live_.size()); }
  bool none() const { return live_.empty(); }
  // Every row is computed for itself, in row order: the batch runs in its full layout,
  // with no gather or scatter.
  bool all() const { return count() == rows_ && !shared_ && !reordered_; }
  // The computed rows, in the order they are gathered (ascending without an order key).
  const std::vector<int64_t>& indices() const { return live_; }
  // The row whose result row r takes (-1: none).
  int64_t source(int64_t r) const { return source_[static_cast<size_t>(r)]; }

  // The computed rows of `full` (rows along dim 0), in row order.
  at::Tensor gather(const at::Tensor& full) const;
  // The full layout again: each row takes its source's row of `computed`, zeros where
  // it has none.
  at::Tensor scatter(const at::Tensor& computed) const;
  // A step's positions and padding for the computed rows (past_len is shared).
  model::StepInputs gather(const model::StepInputs& step) const;

 private:
  int64_t rows_ = 0;
  std::vector<int64_t> source_;
  std::vector<int64_t> live_;  // the computed rows, in gather order
  bool shared_ = false;        // some row takes another row's result
  bool reordered_ = false;     // live_ is not ascending
  at::Tensor index_;           // live_ on the compute device
  // With shared rows: for each row, its source's place in `computed`, or count() for a
  // zero row appended after them.
  at::Tensor expand_;
};

}  // namespace tiergen::runtime
