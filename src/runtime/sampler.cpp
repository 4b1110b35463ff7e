#include "tiergen/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tiergen/common/error.h"

namespace tiergen::runtime {

namespace {

// Most likely first; equal logits by lower id, so results do not depend on sort stability.
bool by_logit(const std::pair<float, int64_t>& a, const std::pair<float, int64_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

void SamplingParams::validate() const {
  TG_CHECK(std::isfinite(temperature) && temperature >= 0, "temperature must be >= 0, got {}", temperature);
  TG_CHECK(top_k >= 0, "top-k must be >= 0, got {}", top_k);
  TG_CHECK(std::isfinite(top_p) && top_p > 0 && top_p <= 1, "top-p must be in (0, 1], got {}", top_p);
  TG_CHECK(std::isfinite(min_p) && min_p >= 0 && min_p <= 1, "min-p must be in [0, 1], got {}", min_p);
  TG_CHECK(min_tokens >= 0, "min_tokens must be >= 0, got {}", min_tokens);
  TG_CHECK(std::isfinite(presence_penalty) && presence_penalty >= -2 && presence_penalty <= 2,
           "presence_penalty must be in [-2, 2], got {}", presence_penalty);
  TG_CHECK(std::isfinite(frequency_penalty) && frequency_penalty >= -2 && frequency_penalty <= 2,
           "frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  TG_CHECK(std::isfinite(repetition_penalty) && repetition_penalty > 0,
           "repetition_penalty must be > 0, got {}", repetition_penalty);
  TG_CHECK(logprobs >= -1 && logprobs <= 20, "logprobs must be between 0 and 20, got {}", logprobs);
}

SequenceSampler::SequenceSampler(const SamplingParams& params, uint64_t stream_index)
    : params_(params), rng_(params.seed * 0x9E3779B97F4A7C15ull + stream_index) {}

void SequenceSampler::begin(const std::vector<int64_t>& prompt, std::vector<int64_t> held_back_ids) {
  prompt_tokens_ = prompt;
  std::sort(prompt_tokens_.begin(), prompt_tokens_.end());
  prompt_tokens_.erase(std::unique(prompt_tokens_.begin(), prompt_tokens_.end()), prompt_tokens_.end());
  held_back_ = std::move(held_back_ids);
}

bool SequenceSampler::needs_full_row() const {
  if (params_.penalized() || params_.logprobs >= 0) return true;
  if (generated_ < params_.min_tokens && !held_back_.empty()) return true;
  return !params_.greedy() && params_.top_k == 0;
}

void SequenceSampler::penalize(std::vector<float>& row) const {
  const auto vocab = static_cast<int64_t>(row.size());
  if (params_.repetition_penalty != 1.0) {
    const auto rp = static_cast<float>(params_.repetition_penalty);
    auto apply = [&](int64_t id) {
      if (id < 0 || id >= vocab) return;
      float& x = row[static_cast<size_t>(id)];
      x = x > 0 ? x / rp : x * rp;
    };
    std::vector<int64_t> seen = prompt_tokens_;
    for (const auto& [id, count] : generated_counts_) {
      if (!std::binary_search(prompt_tokens_.begin(), prompt_tokens_.end(), id)) seen.push_back(id);
    }
    for (int64_t id : seen) apply(id);
  }
  for (const auto& [id, count] : generated_counts_) {
    if (id < 0 || id >= vocab) continue;
    row[static_cast<size_t>(id)] -= static_cast<float>(params_.frequency_penalty * static_cast<double>(count) +
                                                        params_.presence_penalty);
  }
  if (generated_ < params_.min_tokens) {
    for (int64_t id : held_back_) {
      if (id >= 0 && id < vocab) row[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
    }
  }
}

// fp32 log-softmax of the model's own row (before penalties and temperature), as
// OpenAI's and vLLM's default log-probabilities are.
TokenLogprob token_logprob(const float* logits, int64_t vocab_size, int64_t token, int64_t top_k) {
  const float max_logit = *std::max_element(logits, logits + vocab_size);
  double sum = 0;
  for (int64_t i = 0; i < vocab_size; ++i) sum += std::exp(static_cast<double>(logits[i] - max_logit));
  const float log_norm = max_logit + static_cast<float>(std::log(sum));
  TokenLogprob lp;
  lp.token = token;
  lp.logprob = logits[token] - log_norm;
  const auto k = static_cast<size_t>(std::min<int64_t>(top_k, vocab_size));
  if (k > 0) {
    std::vector<std::pair<float, int64_t>> all(static_cast<size_t>(vocab_size));
    for (int64_t i = 0; i < vocab_size; ++i) all[static_cast<size_t>(i)] = {logits[i], i};
    std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k), all.end(), by_logit);
    for (size_t i = 0; i < k; ++i) lp.top.emplace_back(all[i].second, all[i].first - log_norm);
  }
  return lp;
}

void SequenceSampler::record_logprob(const float* logits, int64_t vocab_size, int64_t token) {
  last_logprob_ = token_logprob(logits, vocab_size, token, params_.logprobs);
}

void SequenceSampler::accept(int64_t token) {
  ++generated_counts_[token];
  ++generated_;
}

int64_t SequenceSampler::sample(const float* logits, int64_t vocab_size) {
  const float* row = logits;
  if (params_.penalized() || generated_ < params_.min_tokens) {
    row_.assign(logits, logits + vocab_size);
    penalize(row_);
    row = row_.data();
  }
  int64_t token = 0;
  if (params_.greedy()) {
    token = std::max_element(row, row + vocab_size) - row;  // first maximum, as torch.argmax
  } else {
    scratch_.resize(static_cast<size_t>(vocab_size));
    const auto t = static_cast<float>(params_.temperature);
    for (int64_t i = 0; i < vocab_size; ++i) scratch_[static_cast<size_t>(i)] = {row[i] / t, i};
    token = choose(scratch_, /*sorted=*/false);
  }
  if (params_.logprobs >= 0) record_logprob(logits, vocab_size, token);
  accept(token);
  return token;
}

int64_t SequenceSampler::sample_candidates(const float* values, const int64_t* ids, int64_t k) {
  TG_CHECK(!needs_full_row() && k > 0, "internal: sampling from candidates needs top_k without full-row features");
  int64_t token = ids[0];
  if (!params_.greedy()) {
    scratch_.resize(static_cast<size_t>(k));
    const auto t = static_cast<float>(params_.temperature);
    for (int64_t i = 0; i < k; ++i) scratch_[static_cast<size_t>(i)] = {values[i] / t, ids[i]};
    std::sort(scratch_.begin(), scratch_.end(), by_logit);  // the device's order of ties is unspecified
    token = choose(scratch_, /*sorted=*/true);
  }
  accept(token);
  return token;
}

// Keeps the top_k best candidates, softmax over them, then the smallest prefix reaching
// top_p, less the candidates under min_p x the most likely one's probability (vLLM's
// order: min-p after top-k and top-p), and draws one from the seeded stream. min_p
// compares probabilities with the most likely one's, which every candidate set holds,
// so the device's top-k candidates give what the full row would.
int64_t SequenceSampler::choose(std::vector<std::pair<float, int64_t>>& candidates, bool sorted) {
  size_t keep = candidates.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) keep = static_cast<size_t>(params_.top_k);
  if (!sorted) {
    std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(keep), candidates.end(),
                      by_logit);
  }
  candidates.resize(keep);
  const float max_logit = candidates.front().first;
  double total = 0;
  std::vector<double> probs(keep);
  for (size_t i = 0; i < keep; ++i) total += probs[i] = std::exp(static_cast<double>(candidates[i].first - max_logit));
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
  if (params_.min_p > 0) {
    // probs[i] is exp(logit_i - max): the probability relative to the most likely.
    size_t kept = 1;
    while (kept < nucleus && probs[kept] >= params_.min_p) ++kept;
    nucleus = kept;
  }
  double mass = 0;
  for (size_t i = 0; i < nucleus; ++i) mass += probs[i];
  const double draw = std::uniform_real_distribution<double>(0.0, mass)(rng_);
  double cumulative = 0;
  for (size_t i = 0; i < nucleus; ++i) {
    cumulative += probs[i];
    if (draw < cumulative) return candidates[i].second;
  }
  return candidates[nucleus - 1].second;
}

}  // namespace tiergen::runtime
