// Request parameters through the engine: ignore_eos, min_tokens, stop_token_ids, the
// stop callback, penalties and logprobs, each in a way that fails if it were ignored;
// log-probabilities are the same whatever the placement.
#include <gtest/gtest.h>

#include <set>

#include "tests/support/tiny_model.h"
#include "tiergen/runtime/engine.h"

namespace tiergen::test {
namespace {

using A = std::array<double, 6>;

struct Fixture {
  TinyModel model = make_tiny_model(tiny_llama(31));
  std::vector<std::vector<int64_t>> prompts = make_prompts({5, 3, 8, 2}, model.spec.vocab_size, 17);
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

std::vector<runtime::SequenceResult> run(const model::Spec& spec, const std::vector<runtime::SequenceRequest>& requests,
                                         const runtime::Policy& policy = make_policy(2, 2, A{100, 0, 100, 0, 100, 0}, false)) {
  TempDir offload("offload");
  runtime::Engine engine(spec, *fixture().model.weights, policy, cpu_engine_options(offload.path), workload_of(requests));
  return engine.generate(requests);
}

std::vector<runtime::SequenceRequest> requests(int64_t max_new) {
  return greedy_requests(fixture().prompts, {max_new});
}

TEST(RequestParams, EndOfSequenceStopsUnlessIgnoredAndMinTokensHoldsItBack) {
  auto& f = fixture();
  auto base = requests(6);
  const auto plain = run(f.model.spec, base);
  // Make the first greedy token of prompt 0 an end-of-sequence token.
  model::Spec spec = f.model.spec;
  const int64_t eos = plain[0].tokens[0];
  spec.eos_token_ids = {eos};
  const auto stopped = run(spec, base);
  EXPECT_EQ(stopped[0].tokens, std::vector<int64_t>{eos});
  EXPECT_EQ(stopped[0].finish_reason, "stop");

  auto ignoring = base;
  for (auto& r : ignoring) r.ignore_eos = true;
  const auto ignored = run(spec, ignoring);
  EXPECT_EQ(ignored[0].tokens, plain[0].tokens);
  EXPECT_EQ(ignored[0].finish_reason, "length");

  auto at_least = base;
  for (auto& r : at_least) r.sampling.min_tokens = 3;
  const auto held = run(spec, at_least);
  ASSERT_GE(held[0].tokens.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NE(held[0].tokens[i], eos) << "token " << i << " before min_tokens";
}

TEST(RequestParams, StopTokenIdsEndTheSequenceAndSayWhich) {
  auto& f = fixture();
  auto base = requests(6);
  const auto plain = run(f.model.spec, base);
  const int64_t third = plain[0].tokens[2];
  const bool seen_before = plain[0].tokens[0] == third || plain[0].tokens[1] == third;
  auto stopping = base;
  stopping[0].stop_token_ids = {third};
  const auto got = run(f.model.spec, stopping);
  EXPECT_EQ(got[0].finish_reason, "stop");
  ASSERT_TRUE(got[0].stop_token.has_value());
  EXPECT_EQ(*got[0].stop_token, third);
  if (!seen_before) EXPECT_EQ(got[0].tokens, std::vector<int64_t>(plain[0].tokens.begin(), plain[0].tokens.begin() + 3));
  EXPECT_EQ(got[1].tokens, plain[1].tokens);  // others untouched
}

TEST(RequestParams, TheStopCallbackEndsTheSequence) {
  auto& f = fixture();
  auto base = requests(6);
  base[1].should_stop = [](const std::vector<int64_t>& tokens) { return tokens.size() == 2; };
  const auto got = run(f.model.spec, base);
  EXPECT_EQ(got[1].tokens.size(), 2u);
  EXPECT_EQ(got[1].finish_reason, "stop");
  EXPECT_EQ(got[0].tokens.size(), 6u);
}

size_t distinct(const std::vector<int64_t>& tokens) { return std::set<int64_t>(tokens.begin(), tokens.end()).size(); }

TEST(RequestParams, PenaltiesChangeWhatIsGenerated) {
  auto& f = fixture();
  const auto plain = run(f.model.spec, requests(12));
  size_t plain_distinct = 0;
  for (const auto& r : plain) plain_distinct += distinct(r.tokens);
  for (const char* which : {"presence", "frequency", "repetition"}) {
    auto penalized = requests(12);
    for (auto& r : penalized) {
      if (std::string(which) == "presence") r.sampling.presence_penalty = 2.0;
      if (std::string(which) == "frequency") r.sampling.frequency_penalty = 2.0;
      if (std::string(which) == "repetition") r.sampling.repetition_penalty = 3.0;
    }
    const auto got = run(f.model.spec, penalized);
    size_t got_distinct = 0;
    bool differs = false;
    for (size_t i = 0; i < got.size(); ++i) {
      got_distinct += distinct(got[i].tokens);
      differs = differs || got[i].tokens != plain[i].tokens;
    }
    EXPECT_TRUE(differs) << which;
    EXPECT_GT(got_distinct, plain_distinct) << which << ": penalizing repeats gives more distinct tokens";
  }
}

TEST(RequestParams, LogprobsAreTheSameForEveryPlacement) {
  auto& f = fixture();
  auto base = requests(5);
  for (auto& r : base) r.sampling.logprobs = 4;
  const runtime::Policy placements[] = {
      make_policy(2, 2, A{100, 0, 100, 0, 100, 0}, false),
      make_policy(1, 4, A{0, 100, 0, 100, 0, 100}, true),
      make_policy(4, 1, A{50, 50, 0, 100, 100, 0}, false),
  };
  std::vector<std::vector<runtime::SequenceResult>> all;
  for (const auto& p : placements) all.push_back(run(f.model.spec, base, p));
  for (const auto& results : all) {
    for (size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      ASSERT_EQ(r.logprobs.size(), r.tokens.size());
      for (size_t t = 0; t < r.tokens.size(); ++t) {
        const auto& lp = r.logprobs[t];
        EXPECT_EQ(lp.token, r.tokens[t]);
        EXPECT_LE(lp.logprob, 0.0f);
        ASSERT_EQ(lp.top.size(), 4u);
        EXPECT_EQ(lp.top[0].first, r.tokens[t]);  // greedy: the chosen token is the most likely
        EXPECT_FLOAT_EQ(lp.top[0].second, lp.logprob);
        for (size_t k = 1; k < lp.top.size(); ++k) EXPECT_GE(lp.top[k - 1].second, lp.top[k].second);
        double mass = 0;
        for (const auto& [id, logprob] : lp.top) mass += std::exp(logprob);
        EXPECT_LE(mass, 1.0 + 1e-6);
      }
    }
  }
  for (size_t p = 1; p < all.size(); ++p) {
    for (size_t i = 0; i < base.size(); ++i) {
      ASSERT_EQ(all[p][i].tokens, all[0][i].tokens) << "placement " << p;
      for (size_t t = 0; t < all[0][i].logprobs.size(); ++t) {
        const auto& a = all[0][i].logprobs[t];
        const auto& b = all[p][i].logprobs[t];
        EXPECT_NEAR(a.logprob, b.logprob, 1e-5) << "placement " << p << " prompt " << i << " token " << t;
        for (size_t k = 0; k < a.top.size(); ++k) {
          EXPECT_EQ(a.top[k].first, b.top[k].first);
          EXPECT_NEAR(a.top[k].second, b.top[k].second, 1e-5);
        }
      }
    }
  }
}

}  // namespace
}  // namespace tiergen::test
