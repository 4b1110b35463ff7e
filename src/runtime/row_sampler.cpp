#include "tiergen/runtime/row_sampler.h"

#include <algorithm>
#include <cmath>

#include "tiergen/common/error.h"
#include "tiergen/runtime/device.h"

namespace tiergen::runtime {

namespace {

enum class Reduction { Skip, Argmax, TopK, FullRow };

Reduction reduction_for(const SequenceSampler& s, bool active) {
  if (!active) return Reduction::Skip;
  if (s.needs_full_row()) return Reduction::FullRow;
  return s.params().greedy() ? Reduction::Argmax : Reduction::TopK;
}

at::Tensor row_index(const std::vector<int64_t>& rows, const at::Device& device) {
  return copy_to_device(at::tensor(rows, at::kLong), device);
}

// Rows whose logits hold a NaN or an infinity, on the logits' device: such a row's sum
// is not finite (summed in double, finite logits cannot overflow it). The verdict
// crosses to the host with the ids the reductions copy anyway, as an id of -1: no
// copy, and no synchronisation, of its own.
at::Tensor non_finite_rows(const at::Tensor& logits) {
  return at::isfinite(at::sum(logits, {1}, /*keepdim=*/false, at::kDouble)).logical_not();
}

constexpr int64_t kNonFinite = -1;

}  // namespace

std::vector<int64_t> sample_rows(const at::Tensor& logits, std::vector<SequenceSampler>& samplers,
                                 const std::vector<bool>& active) {
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  TG_CHECK(static_cast<int64_t>(samplers.size()) == rows && static_cast<int64_t>(active.size()) == rows,
           "internal: {} samplers for {} logits rows", samplers.size(), rows);
  std::vector<int64_t> out(static_cast<size_t>(rows), 0);
  std::vector<int64_t> argmax_rows, topk_rows, full_rows;
  int64_t k = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const auto& s = samplers[static_cast<size_t>(r)];
    switch (reduction_for(s, active[static_cast<size_t>(r)])) {
      case Reduction::Skip: break;
      case Reduction::Argmax: argmax_rows.push_back(r); break;
      case Reduction::TopK:
        topk_rows.push_back(r);
        k = std::max(k, std::min(s.params().top_k, vocab));
        break;
      case Reduction::FullRow: full_rows.push_back(r); break;
    }
  }
  const at::Tensor non_finite =
      argmax_rows.empty() && topk_rows.empty() ? at::Tensor() : non_finite_rows(logits);
  if (!argmax_rows.empty()) {
    // `rows` int64 values cross to the host, not rows x vocab floats.
    const at::Tensor ids = copy_to_host_now(logits.argmax(1).masked_fill(non_finite, kNonFinite));
    const auto* id = ids.data_ptr<int64_t>();
    for (int64_t r : argmax_rows) {
      auto& s = samplers[static_cast<size_t>(r)];
      if (id[r] == kNonFinite) {
        s.note_non_finite_logits();
        continue;
      }
      out[static_cast<size_t>(r)] = id[r];
      s.accept(id[r]);
    }
  }
  if (!topk_rows.empty()) {
    const at::Tensor index = row_index(topk_rows, logits.device());
    const auto top = at::topk(logits.index_select(0, index), k, 1, true, true);
    const at::Tensor values = copy_to_host_now(std::get<0>(top)).contiguous();
    const at::Tensor ids = copy_to_host_now(
        std::get<1>(top).masked_fill(non_finite.index_select(0, index).unsqueeze(1), kNonFinite)).contiguous();
    for (size_t i = 0; i < topk_rows.size(); ++i) {
      auto& s = samplers[static_cast<size_t>(topk_rows[i])];
      const int64_t own_k = std::min(s.params().top_k, vocab);  // its first own_k of the k, still sorted
      const auto offset = static_cast<int64_t>(i) * k;
      if (ids.data_ptr<int64_t>()[offset] == kNonFinite) {
        s.note_non_finite_logits();
        continue;
      }
      out[static_cast<size_t>(topk_rows[i])] =
          s.sample_candidates(values.data_ptr<float>() + offset, ids.data_ptr<int64_t>() + offset, own_k);
    }
  }
  if (!full_rows.empty()) {
    const at::Tensor host = copy_to_host_now(logits.index_select(0, row_index(full_rows, logits.device()))).contiguous();
    for (size_t i = 0; i < full_rows.size(); ++i) {
      auto& s = samplers[static_cast<size_t>(full_rows[i])];
      const float* row = host.data_ptr<float>() + static_cast<int64_t>(i) * vocab;
      if (!std::all_of(row, row + vocab, [](float x) { return std::isfinite(x); })) {
        s.note_non_finite_logits();
        continue;
      }
      out[static_cast<size_t>(full_rows[i])] = s.sample(row, vocab);
    }
  }
  return out;
}

}  // namespace tiergen::runtime
