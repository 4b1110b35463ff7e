// The request parameters the sampler honours (penalties, min_tokens, logprobs), and
// the device-side reductions of sample_rows (argmax, top-k) giving the same tokens as
// the whole row on the host.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "tiergen/common/error.h"
#include "tiergen/runtime/row_sampler.h"
#include "tiergen/runtime/sampler.h"

namespace tiergen::runtime {
namespace {

const std::vector<float> kLogits = {0.5f, 2.0f, -1.0f, 1.9f, 1.0f, 0.0f, 1.5f, -3.0f};
constexpr int64_t kVocab = 8;

int64_t greedy_after(const SamplingParams& params, const std::vector<int64_t>& history,
                     const std::vector<int64_t>& prompt = {}) {
  SequenceSampler s(params, 0);
  s.begin(prompt, {});
  for (int64_t t : history) s.accept(t);
  return s.sample(kLogits.data(), kVocab);
}

TEST(SamplingParams, PresencePenaltyMovesAwayFromAGeneratedToken) {
  SamplingParams p;
  EXPECT_EQ(greedy_after(p, {1}), 1);  // 2.0 beats 1.9
  p.presence_penalty = 0.2;
  EXPECT_EQ(greedy_after(p, {1}), 3);  // 1.8 < 1.9
  EXPECT_EQ(greedy_after(p, {4}), 1);  // only generated tokens are penalized
}

TEST(SamplingParams, FrequencyPenaltyCountsOccurrences) {
  SamplingParams p;
  p.frequency_penalty = 0.06;
  EXPECT_EQ(greedy_after(p, {1}), 1);        // 1.94 > 1.9
  EXPECT_EQ(greedy_after(p, {1, 1}), 3);     // 1.88 < 1.9
}

TEST(SamplingParams, RepetitionPenaltyCoversPromptAndOutput) {
  SamplingParams p;
  p.repetition_penalty = 1.1;
  EXPECT_EQ(greedy_after(p, {}, {1}), 3);  // 2.0 / 1.1 < 1.9, from the prompt
  EXPECT_EQ(greedy_after(p, {1}), 3);      // and from the output
  EXPECT_EQ(greedy_after(p, {}, {5}), 1);
}

TEST(SamplingParams, MinTokensHoldsBackEndOfSequence) {
  SamplingParams p;
  p.min_tokens = 2;
  SequenceSampler s(p, 0);
  s.begin({}, {1, 3});  // the ids min_tokens holds back
  EXPECT_TRUE(s.needs_full_row());
  EXPECT_EQ(s.sample(kLogits.data(), kVocab), 6);  // 1 and 3 masked: 1.5 is the best left
  EXPECT_EQ(s.sample(kLogits.data(), kVocab), 6);
  EXPECT_FALSE(s.needs_full_row());
  EXPECT_EQ(s.sample(kLogits.data(), kVocab), 1);  // two tokens out: 1 may come
}

TEST(SamplingParams, LogprobsAreTheLogSoftmaxOfTheRowMostLikelyFirst) {
  SamplingParams p;
  p.logprobs = 3;
  SequenceSampler s(p, 0);
  const int64_t token = s.sample(kLogits.data(), kVocab);
  ASSERT_TRUE(s.last_logprob().has_value());
  const TokenLogprob& lp = *s.last_logprob();
  double total = 0;
  for (float x : kLogits) total += std::exp(static_cast<double>(x));
  EXPECT_EQ(lp.token, token);
  EXPECT_NEAR(lp.logprob, kLogits[1] - std::log(total), 1e-5);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].first, 6);
  EXPECT_GT(lp.top[0].second, lp.top[1].second);
  EXPECT_GT(lp.top[1].second, lp.top[2].second);
  // Probabilities of all tokens sum to 1.
  double mass = 0;
  for (float x : kLogits) mass += std::exp(static_cast<double>(x) - std::log(total));
  EXPECT_NEAR(mass, 1.0, 1e-9);
  // Without logprobs, none are made.
  SequenceSampler plain(SamplingParams{}, 0);
  plain.sample(kLogits.data(), kVocab);
  EXPECT_FALSE(plain.last_logprob().has_value());
}

TEST(SamplingParams, ValidateNamesTheNewFields) {
  SamplingParams p;
  p.presence_penalty = 3;
  EXPECT_THROW(p.validate(), Error);
  p = SamplingParams{};
  p.repetition_penalty = 0;
  EXPECT_THROW(p.validate(), Error);
  p = SamplingParams{};
  p.logprobs = 21;
  EXPECT_THROW(p.validate(), Error);
  p = SamplingParams{};
  p.min_tokens = -1;
  EXPECT_THROW(p.validate(), Error);
}

// Rows reduced on the device (argmax, topk) give exactly what the whole row gives on
// the host, draw for draw, because each row's seeded stream is the same.
TEST(RowSampler, DeviceReductionsMatchTheWholeRow) {
  const int64_t rows = 6, vocab = 50;
  at::Tensor logits = at::randn({rows, vocab}, at::TensorOptions().dtype(at::kFloat));
  logits[2][7] = logits[2].max().item<float>();  // a tie for the maximum: the first wins
  std::vector<SamplingParams> params(rows);
  params[1].temperature = 0.8;
  params[1].top_k = 5;
  params[2] = SamplingParams{};
  params[3].temperature = 1.2;
  params[3].top_k = 12;
  params[3].top_p = 0.7;
  params[4].temperature = 0.9;  // no top-k: the whole row
  params[5].logprobs = 2;       // logprobs: the whole row
  for (auto& p : params) p.seed = 11;
  std::vector<SequenceSampler> fast, reference;
  for (int64_t r = 0; r < rows; ++r) {
    fast.emplace_back(params[static_cast<size_t>(r)], static_cast<uint64_t>(r));
    reference.emplace_back(params[static_cast<size_t>(r)], static_cast<uint64_t>(r));
  }
  const std::vector<bool> active(rows, true);
  for (int step = 0; step < 30; ++step) {
    const auto got = sample_rows(logits, fast, active);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t want = reference[static_cast<size_t>(r)].sample(logits[r].contiguous().data_ptr<float>(), vocab);
      ASSERT_EQ(got[static_cast<size_t>(r)], want) << "row " << r << " step " << step;
    }
  }
  // Inactive rows are not sampled.
  std::vector<bool> none(rows, false);
  EXPECT_EQ(sample_rows(logits, fast, none), std::vector<int64_t>(rows, 0));
}

// A row whose logits hold a NaN or an infinity gives no token, whichever way it is
// reduced (argmax, top-k, the whole row): its sampler notes it, and the other rows
// sample as they would without it.
TEST(RowSampler, RowsWithNonFiniteLogitsAreNotedNotSampled) {
  const int64_t rows = 6, vocab = 40;
  at::Tensor logits = at::randn({rows, vocab}, at::TensorOptions().dtype(at::kFloat));
  std::vector<SamplingParams> params(rows);
  params[2].temperature = params[3].temperature = 0.8;  // top-k rows
  params[2].top_k = params[3].top_k = 5;
  params[4].logprobs = params[5].logprobs = 1;  // whole rows
  for (int64_t r : {0, 2, 4}) logits[r][r + 3] = r == 2 ? INFINITY : NAN;
  std::vector<SequenceSampler> samplers, reference;
  for (int64_t r = 0; r < rows; ++r) {
    samplers.emplace_back(params[static_cast<size_t>(r)], static_cast<uint64_t>(r));
    reference.emplace_back(params[static_cast<size_t>(r)], static_cast<uint64_t>(r));
  }
  const auto got = sample_rows(logits, samplers, std::vector<bool>(rows, true));
  for (int64_t r = 0; r < rows; ++r) {
    const bool broken = r % 2 == 0;
    EXPECT_EQ(samplers[static_cast<size_t>(r)].saw_non_finite_logits(), broken) << "row " << r;
    if (broken) {
      EXPECT_EQ(got[static_cast<size_t>(r)], 0) << "row " << r;
    } else {
      EXPECT_EQ(got[static_cast<size_t>(r)],
                reference[static_cast<size_t>(r)].sample(logits[r].contiguous().data_ptr<float>(), vocab))
          << "row " << r;
    }
  }
}

}  // namespace
}  // namespace tiergen::runtime
