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

// Whether each row's logits are all finite. A NaN or infinity makes its row's sum
// non-finite (summed in double: finite logits cannot overflow it), so one value per row
// crosses to the host.
std::vector<bool> finite_rows(const at::Tensor& logits) {
  const at::Tensor sums = copy_to_host_now(at::sum(logits, {1}, /*keepdim=*/false, at::kDouble)).contiguous();
  const auto* sum = sums.data_ptr<double>();
  std::vector<bool> finite(static_cast<size_t>(logits.size(0)));
  for (size_t r = 0; r < finite.size(); ++r) finite[r] = std::isfinite(sum[r]);
  return finite;
}

}  // namespace

std::vector<int64_t> sample_rows(const at::Tensor& logits, std::vector<SequenceSampler>& samplers,
                                 const std::vector<bool>& active) {
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  TG_CHECK(static_cast<int64_t>(samplers.size()) == rows && static_cast<int64_t>(active.size()) == rows,
           "internal: {} samplers for {} logits rows", samplers.size(), rows);
  std::vector<int64_t> out(static_cast<size_t>(rows), 0);
  const std::vector<bool> finite = finite_rows(logits);
  std::vector<int64_t> argmax_rows, topk_rows, full_rows;
  int64_t k = 0;
  for (int64_t r = 0; r < rows; ++r) {
    auto& s = samplers[static_cast<size_t>(r)];
    const bool sampled = active[static_cast<size_t>(r)] && finite[static_cast<size_t>(r)];
    if (active[static_cast<size_t>(r)] && !sampled) s.note_non_finite_logits();
    switch (reduction_for(s, sampled)) {
      case Reduction::Skip: break;
      case Reduction::Argmax: argmax_rows.push_back(r); break;
      case Reduction::TopK:
        topk_rows.push_back(r);
        k = std::max(k, std::min(s.params().top_k, vocab));
        break;
      case Reduction::FullRow: full_rows.push_back(r); break;
    }
  }
  if (!argmax_rows.empty()) {
    // `rows` int64 values cross to the host, not rows x vocab floats.
    const at::Tensor ids = copy_to_host_now(logits.argmax(1));
    const auto* id = ids.data_ptr<int64_t>();
    for (int64_t r : argmax_rows) {
      out[static_cast<size_t>(r)] = id[r];
      samplers[static_cast<size_t>(r)].accept(id[r]);
    }
  }
  if (!topk_rows.empty()) {
    const auto top = at::topk(logits.index_select(0, row_index(topk_rows, logits.device())), k, 1, true, true);
    const at::Tensor values = copy_to_host_now(std::get<0>(top)).contiguous();
    const at::Tensor ids = copy_to_host_now(std::get<1>(top)).contiguous();
    for (size_t i = 0; i < topk_rows.size(); ++i) {
      auto& s = samplers[static_cast<size_t>(topk_rows[i])];
      const int64_t own_k = std::min(s.params().top_k, vocab);  // its first own_k of the k, still sorted
      const auto offset = static_cast<int64_t>(i) * k;
      out[static_cast<size_t>(topk_rows[i])] =
          s.sample_candidates(values.data_ptr<float>() + offset, ids.data_ptr<int64_t>() + offset, own_k);
    }
  }
  if (!full_rows.empty()) {
    const at::Tensor host = copy_to_host_now(logits.index_select(0, row_index(full_rows, logits.device()))).contiguous();
    for (size_t i = 0; i < full_rows.size(); ++i) {
      out[static_cast<size_t>(full_rows[i])] = samplers[static_cast<size_t>(full_rows[i])].sample(
          host.data_ptr<float>() + static_cast<int64_t>(i) * vocab, vocab);
    }
  }
  return out;
}

}  // namespace tiergen::runtime
