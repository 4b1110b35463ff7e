// Attention on the compute device (prefill, and decode when the KV cache is there).
#include <limits>

#include "tiergen/model/forward.h"
#include "tiergen/runtime/placement.h"

namespace tiergen::model {

namespace {

// [b, 1, t, total] boolean: key j is visible to new query i when it is not left
// padding and not in the future. Every query also sees itself, so rows of padding
// queries stay finite (their outputs are never used).
at::Tensor visibility_mask(const StepInputs& step, int64_t t, int64_t total, const at::Device& device) {
  const auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  const at::Tensor key_index = at::arange(total, opts).view({1, 1, total});
  const at::Tensor query_index = (at::arange(t, opts) + step.past_len).view({1, t, 1});
  const at::Tensor pad = step.pad.to(device).view({-1, 1, 1});
  const at::Tensor visible = (key_index >= pad).logical_and(key_index <= query_index);
  return visible.logical_or(key_index == query_index).unsqueeze(1);
}

}  // namespace

namespace {

at::Tensor attend_all(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const StepInputs& step) {
  const int64_t b = q.size(0), heads = q.size(1), t = q.size(2), d = q.size(3);
  const int64_t kv_heads = k.size(1), total = k.size(2), groups = heads / kv_heads;
  // Grouped-query attention without copying K/V: fold each kv head's query heads
  // into the query-length dimension.
  const at::Tensor qg = q.reshape({b, kv_heads, groups * t, d});
  at::Tensor scores = at::matmul(qg, k.transpose(-1, -2)).to(at::kFloat);
  scores = scores.view({b, kv_heads, groups, t, total}).mul_(1.0 / std::sqrt(static_cast<double>(d)));
  const at::Tensor mask = visibility_mask(step, t, total, q.device()).unsqueeze(1);  // [b,1,1,t,total]
  scores.masked_fill_(mask.logical_not(), -std::numeric_limits<float>::infinity());
  const at::Tensor probs = at::softmax(scores, -1).to(v.scalar_type()).view({b, kv_heads, groups * t, total});
  const at::Tensor out = at::matmul(probs, v).view({b, heads, t, d});
  return out.transpose(1, 2).reshape({b, t, heads * d});
}

}  // namespace

at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const StepInputs& step) {
  const int64_t b = q.size(0);
  const int64_t chunk = runtime::attention_chunk_sequences(q.size(1), q.size(2), k.size(2));
  if (chunk >= b) return attend_all(q, k, v, step);
  // Bounded temporaries: a chunk of sequences at a time (placement.h).
  std::vector<at::Tensor> parts;
  for (int64_t s = 0; s < b; s += chunk) {
    const int64_t n = std::min(chunk, b - s);
    StepInputs part{step.positions.defined() ? step.positions.narrow(0, s, n) : at::Tensor(), step.pad.narrow(0, s, n),
                    step.past_len};
    parts.push_back(attend_all(q.narrow(0, s, n), k.narrow(0, s, n), v.narrow(0, s, n), part));
  }
  return at::cat(parts, 0);
}

}  // namespace tiergen::model
