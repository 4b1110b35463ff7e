// SequenceSampler: greedy, top-k, top-p, temperature, seeding.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tiergen/common/error.h"
#include "tiergen/runtime/sampler.h"

namespace tiergen::runtime {
namespace {

const std::vector<float> kLogits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.0f, 1.5f, -3.0f};

int64_t argmax_first(const std::vector<float>& logits) {
  int64_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int64_t>(i);
  }
  return best;
}

std::vector<int64_t> draws(const SamplingParams& params, uint64_t stream, const std::vector<float>& logits, int n) {
  SequenceSampler sampler(params, stream);
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(sampler.sample(logits.data(), static_cast<int64_t>(logits.size())));
  return out;
}

TEST(RuntimeSampler, GreedyPicksTheFirstMaximum) {
  SequenceSampler sampler(SamplingParams{}, 0);
  // Indices 1 and 3 tie at 2.0: the first wins, as torch.argmax.
  EXPECT_EQ(sampler.sample(kLogits.data(), static_cast<int64_t>(kLogits.size())), 1);
  const std::vector<float> last = {-1.0f, -2.0f, 5.0f};
  EXPECT_EQ(sampler.sample(last.data(), 3), 2);
  const std::vector<float> negative = {-7.0f, -3.0f, -3.0f, -9.0f};
  EXPECT_EQ(sampler.sample(negative.data(), 4), 1);
}

TEST(RuntimeSampler, TopKOneEqualsGreedy) {
  SamplingParams params;
  params.temperature = 1.5;
  params.top_k = 1;
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i) * 0.7f) * 3.0f;
  const int64_t expected = argmax_first(logits);
  for (uint64_t seed = 0; seed < 5; ++seed) {
    params.seed = seed;
    for (int64_t token : draws(params, seed, logits, 50)) EXPECT_EQ(token, expected);
  }
  // Ties under top-k 1 resolve to the lowest index, like greedy.
  for (int64_t token : draws(params, 3, kLogits, 50)) EXPECT_EQ(token, 1);
}

TEST(RuntimeSampler, TinyTopPEqualsGreedy) {
  SamplingParams params;
  params.temperature = 1.0;
  params.top_p = 1e-6;
  std::vector<float> logits(64);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::cos(static_cast<float>(i) * 1.3f) * 2.0f;
  const int64_t expected = argmax_first(logits);
  for (uint64_t seed = 0; seed < 5; ++seed) {
    params.seed = seed;
    for (int64_t token : draws(params, 7, logits, 40)) EXPECT_EQ(token, expected);
  }
}

TEST(RuntimeSampler, SameSeedAndStreamGiveTheSameTokens) {
  SamplingParams params;
  params.temperature = 1.0;
  params.seed = 1234;
  std::vector<float> logits(32, 0.0f);  // uniform: every draw is informative
  const auto a = draws(params, 5, logits, 200);
  const auto b = draws(params, 5, logits, 200);
  EXPECT_EQ(a, b);
  // Another stream or another seed gives another sequence.
  EXPECT_NE(a, draws(params, 6, logits, 200));
  params.seed = 1235;
  EXPECT_NE(a, draws(params, 5, logits, 200));
}

TEST(RuntimeSampler, TemperatureSamplingFollowsTheSoftmax) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.0f, 3.0f, -1.0f};
  for (double temperature : {1.0, 0.5, 2.0}) {
    SamplingParams params;
    params.temperature = temperature;
    params.seed = 42;
    const int n = 20000;
    std::vector<int> counts(logits.size(), 0);
    for (int64_t token : draws(params, 0, logits, n)) {
      ASSERT_GE(token, 0);
      ASSERT_LT(token, static_cast<int64_t>(logits.size()));
      ++counts[static_cast<size_t>(token)];
    }
    double total = 0;
    std::vector<double> expected(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) total += expected[i] = std::exp(logits[i] / temperature);
    for (size_t i = 0; i < logits.size(); ++i) {
      const double p = expected[i] / total;
      const double sigma = std::sqrt(p * (1 - p) / n);
      EXPECT_NEAR(static_cast<double>(counts[i]) / n, p, 5 * sigma + 1e-3)
          << "token " << i << " at temperature " << temperature;
    }
  }
}

TEST(RuntimeSampler, TopKRestrictsToTheKMostLikely) {
  SamplingParams params;
  params.temperature = 1.0;
  params.top_k = 2;
  params.seed = 9;
  const std::vector<float> logits = {1.0f, 2.5f, 0.0f, 3.0f, -1.0f};
  std::vector<int> counts(logits.size(), 0);
  const int n = 4000;
  for (int64_t token : draws(params, 0, logits, n)) ++counts[static_cast<size_t>(token)];
  EXPECT_EQ(counts[0] + counts[2] + counts[4], 0);
  // Renormalized over {3, 1}: p(3) = 1 / (1 + e^-0.5).
  const double p3 = 1.0 / (1.0 + std::exp(-0.5));
  EXPECT_NEAR(static_cast<double>(counts[3]) / n, p3, 5 * std::sqrt(p3 * (1 - p3) / n));
}

TEST(RuntimeSampler, TopPKeepsTheSmallestPrefixReachingTheMass) {
  SamplingParams params;
  params.temperature = 1.0;
  params.seed = 3;
  // Probabilities ~ {0.64, 0.24, 0.09, 0.03}: top-p 0.8 keeps the first two.
  const std::vector<float> logits = {std::log(0.64f), std::log(0.24f), std::log(0.09f), std::log(0.03f)};
  params.top_p = 0.8;
  std::vector<int> counts(logits.size(), 0);
  const int n = 4000;
  for (int64_t token : draws(params, 1, logits, n)) ++counts[static_cast<size_t>(token)];
  EXPECT_EQ(counts[2] + counts[3], 0);
  EXPECT_GT(counts[0], counts[1]);
  EXPECT_GT(counts[1], 0);
}

// Probabilities ~ {0.5, 0.3, 0.15, 0.05}: min-p 0.35 keeps the tokens at least 0.35 times
// as likely as the first (0.5 and 0.3; 0.15 is 0.3 times), renormalized; top-k
// candidates give the same.
TEST(RuntimeSampler, MinPDropsTokensLessLikelyThanItsShareOfTheMostLikely) {
  SamplingParams params;
  params.temperature = 1.0;
  params.seed = 5;
  params.min_p = 0.35;
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  std::vector<int> counts(logits.size(), 0);
  const int n = 4000;
  const std::vector<int64_t> full = draws(params, 1, logits, n);
  for (int64_t token : full) ++counts[static_cast<size_t>(token)];
  EXPECT_EQ(counts[2] + counts[3], 0);
  const double p0 = 0.5 / 0.8;
  EXPECT_NEAR(static_cast<double>(counts[0]) / n, p0, 5 * std::sqrt(p0 * (1 - p0) / n));
  // From the device's top-3 candidates (sorted), the same draws as from the full row.
  params.top_k = 3;
  SequenceSampler on_row(params, 1), on_candidates(params, 1);
  const float values[] = {logits[0], logits[1], logits[2]};
  const int64_t ids[] = {0, 1, 2};
  for (int i = 0; i < 200; ++i) {
    ASSERT_FALSE(on_candidates.needs_full_row());
    EXPECT_EQ(on_row.sample(logits.data(), 4), on_candidates.sample_candidates(values, ids, 3)) << i;
  }
  // min-p 1 keeps only the most likely: greedy.
  params.top_k = 0;
  params.min_p = 1.0;
  for (int64_t token : draws(params, 2, logits, 50)) EXPECT_EQ(token, 0);
}

TEST(RuntimeSampler, ValidateRejectsBadParameters) {
  SamplingParams p;
  p.temperature = -0.1;
  EXPECT_THROW(p.validate(), Error);
  p = SamplingParams{};
  p.top_k = -1;
  EXPECT_THROW(p.validate(), Error);
  p = SamplingParams{};
  p.top_p = 0.0;
  EXPECT_THROW(p.validate(), Error);
  p.top_p = 1.5;
  EXPECT_THROW(p.validate(), Error);
  p = SamplingParams{};
  p.min_p = -0.1;
  EXPECT_THROW(p.validate(), Error);
  p.min_p = 1.01;
  EXPECT_THROW(p.validate(), Error);
  p = SamplingParams{};
  p.temperature = std::nan("");
  EXPECT_THROW(p.validate(), Error);
  EXPECT_NO_THROW(SamplingParams{}.validate());
}

}  // namespace
}  // namespace tiergen::runtime
