#include "tiergen/runtime/sampler.h"

#include <algorithm>
#include <cmath>

#include "tiergen/common/error.h"

namespace tiergen::runtime {

void SamplingParams::validate() const {
  TG_CHECK(std::isfinite(temperature) && temperature >= 0, "temperature must be >= 0, got {}", temperature);
  TG_CHECK(top_k >= 0, "top-k must be >= 0, got {}", top_k);
  TG_CHECK(std::isfinite(top_p) && top_p > 0 && top_p <= 1, "top-p must be in (0, 1], got {}", top_p);
}

SequenceSampler::SequenceSampler(const SamplingParams& params, uint64_t stream_index)
    : params_(params), rng_(params.seed * 0x9E3779B97F4A7C15ull + stream_index) {}

int64_t SequenceSampler::sample(const float* logits, int64_t vocab_size) {
  if (params_.greedy()) {
    // First maximum, as torch.argmax.
    return std::max_element(logits, logits + vocab_size) - logits;
  }
  scratch_.resize(static_cast<size_t>(vocab_size));
  for (int64_t i = 0; i < vocab_size; ++i) scratch_[i] = {logits[i] / static_cast<float>(params_.temperature), i};
  const auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t keep = scratch_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) keep = static_cast<size_t>(params_.top_k);
  std::partial_sort(scratch_.begin(), scratch_.begin() + static_cast<std::ptrdiff_t>(keep), scratch_.end(), by_logit);
  scratch_.resize(keep);
  // Softmax over the kept candidates, then the smallest prefix reaching top_p.
  const float max_logit = scratch_.front().first;
  double total = 0;
  std::vector<double> probs(keep);
  for (size_t i = 0; i < keep; ++i) total += probs[i] = std::exp(static_cast<double>(scratch_[i].first - max_logit));
  size_t nucleus = keep;
  if (params_.top_p < 1.0) {
    double cumulative = 0;
    for (size_t i = 0; i < keep; ++i) {
      cumulative += probs[i] / total;
      if (cumulative >= params_.top_p) {
        nucleus = i + 1;
        break;
      }
    }
  }
  double mass = 0;
  for (size_t i = 0; i < nucleus; ++i) mass += probs[i];
  const double draw = std::uniform_real_distribution<double>(0.0, mass)(rng_);
  double cumulative = 0;
  for (size_t i = 0; i < nucleus; ++i) {
    cumulative += probs[i];
    if (draw < cumulative) return scratch_[i].second;
  }
  return scratch_[nucleus - 1].second;
}

}  // namespace tiergen::runtime
