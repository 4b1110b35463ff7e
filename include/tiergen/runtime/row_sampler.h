#pragma once
// One token per row of a gpu batch's logits, reducing each row where the logits live:
// greedy rows by argmax and top-k rows by topk on the compute device, so that only the
// ids or a [rows, k] slice are copied to the host; rows whose sampler needs the whole
// distribution (penalties, logprobs, min_tokens, sampling without top-k) are copied
// whole. Each row keeps its own seeded host sampler, so tokens are the same whichever
// way a row was reduced.
#include <ATen/ATen.h>

#include <vector>

#include "tiergen/runtime/sampler.h"

namespace tiergen::runtime {

// `logits`: [rows, vocab] float32 on any device. Rows with active[r] == false (padding,
// finished sequences) are not sampled; their entry is 0. An active row whose logits are
// not all finite is not sampled either: its sampler notes it (saw_non_finite_logits).
std::vector<int64_t> sample_rows(const at::Tensor& logits, std::vector<SequenceSampler>& samplers,
                                 const std::vector<bool>& active);

}  // namespace tiergen::runtime
