// Scoring prompts (OpenAI's echo with logprobs): the log-probability of every prompt
// token after the first, through the engine. Each score lines up with the position it
// belongs to (a prompt extended by its own greedy token scores that token as the
// generation did), top alternatives are ordered, and the scores are the same whatever
// the placement. The float64 reference check is in test_model_reference.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/support/tiny_model.h"
#include "tiergen/runtime/engine.h"

namespace tiergen::test {
namespace {

using A = std::array<double, 6>;

struct Fixture {
  TinyModel llama = make_tiny_model(tiny_llama(41));
  TinyModel opt = make_tiny_model(tiny_opt(42));
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

std::vector<runtime::SequenceResult> run(const TinyModel& model, const std::vector<runtime::SequenceRequest>& requests,
                                         const runtime::Policy& policy = make_policy(2, 2, A{100, 0, 100, 0, 100, 0}, false)) {
  TempDir offload("offload");
  runtime::Engine engine(model.spec, *model.weights, policy, cpu_engine_options(offload.path), workload_of(requests));
  return engine.generate(requests);
}

std::vector<runtime::SequenceRequest> scoring_requests(const TinyModel& model, int64_t top_k) {
  auto requests = greedy_requests(make_prompts({6, 1, 11, 3}, model.spec.vocab_size, 23), {2});
  for (auto& r : requests) {
    r.prompt_logprobs = top_k;
    r.sampling.logprobs = top_k;
  }
  return requests;
}

TEST(PromptLogprobs, OneScorePerPromptTokenAfterTheFirstWithOrderedAlternatives) {
  for (const TinyModel* model : {&fixture().llama, &fixture().opt}) {
    const auto requests = scoring_requests(*model, 3);
    const auto results = run(*model, requests);
    for (size_t i = 0; i < requests.size(); ++i) {
      const auto& prompt = requests[i].prompt;
      const auto& scores = results[i].prompt_logprobs;
      ASSERT_EQ(scores.size(), prompt.size() - 1) << "prompt " << i;
      for (size_t t = 0; t < scores.size(); ++t) {
        EXPECT_EQ(scores[t].token, prompt[t + 1]);
        EXPECT_LE(scores[t].logprob, 0.0f);
        ASSERT_EQ(scores[t].top.size(), 3u);
        for (size_t k = 1; k < 3; ++k) EXPECT_GE(scores[t].top[k - 1].second, scores[t].top[k].second);
        // The prompt token is either among the top 3 with the same score, or below them.
        bool listed = false;
        for (const auto& [id, logprob] : scores[t].top) {
          if (id != scores[t].token) continue;
          listed = true;
          EXPECT_FLOAT_EQ(logprob, scores[t].logprob);
        }
        if (!listed) EXPECT_LE(scores[t].logprob, scores[t].top.back().second);
      }
    }
  }
}

TEST(PromptLogprobs, NotAskedNotComputed) {
  auto requests = scoring_requests(fixture().llama, 2);
  requests[1].prompt_logprobs = -1;
  const auto results = run(fixture().llama, requests);
  EXPECT_TRUE(results[1].prompt_logprobs.empty());
  EXPECT_EQ(results[2].prompt_logprobs.size(), requests[2].prompt.size() - 1);
}

// Position t scores token t + 1: a prompt extended by its greedy first token scores
// that token exactly as the generation did. An off-by-one would compare two different
// positions' distributions.
TEST(PromptLogprobs, TheLastScoreOfAnExtendedPromptIsTheGeneratedTokensLogprob) {
  for (const TinyModel* model : {&fixture().llama, &fixture().opt}) {
    const auto requests = scoring_requests(*model, 0);
    const auto generated = run(*model, requests);
    auto extended = requests;
    for (size_t i = 0; i < extended.size(); ++i) extended[i].prompt.push_back(generated[i].tokens[0]);
    const auto scored = run(*model, extended);
    for (size_t i = 0; i < requests.size(); ++i) {
      ASSERT_FALSE(generated[i].logprobs.empty());
      const auto& last = scored[i].prompt_logprobs.back();
      EXPECT_EQ(last.token, generated[i].tokens[0]);
      EXPECT_NEAR(last.logprob, generated[i].logprobs[0].logprob, 1e-4) << "prompt " << i;
      // and the earlier positions score the same whether or not the prompt goes on
      for (size_t t = 0; t < generated[i].prompt_logprobs.size(); ++t) {
        EXPECT_NEAR(scored[i].prompt_logprobs[t].logprob, generated[i].prompt_logprobs[t].logprob, 1e-4);
      }
    }
  }
}

TEST(PromptLogprobs, TheSameForEveryPlacement) {
  const TinyModel& model = fixture().llama;
  const auto requests = scoring_requests(model, 4);
  const runtime::Policy placements[] = {
      make_policy(2, 2, A{100, 0, 100, 0, 100, 0}, false),
      make_policy(1, 4, A{0, 100, 0, 100, 0, 100}, true),
      make_policy(4, 1, A{50, 50, 0, 100, 100, 0}, false),
      make_policy(2, 2, A{0, 0, 0, 0, 0, 0}, true),  // everything on disk
  };
  std::vector<std::vector<runtime::SequenceResult>> all;
  for (const auto& p : placements) all.push_back(run(model, requests, p));
  for (size_t p = 1; p < all.size(); ++p) {
    for (size_t i = 0; i < requests.size(); ++i) {
      const auto& a = all[0][i].prompt_logprobs;
      const auto& b = all[p][i].prompt_logprobs;
      ASSERT_EQ(a.size(), b.size());
      for (size_t t = 0; t < a.size(); ++t) {
        EXPECT_NEAR(a[t].logprob, b[t].logprob, 1e-5) << "placement " << p << " prompt " << i << " token " << t;
        for (size_t k = 0; k < a[t].top.size(); ++k) {
          EXPECT_EQ(a[t].top[k].first, b[t].top[k].first);
          EXPECT_NEAR(a[t].top[k].second, b[t].top[k].second, 1e-5);
        }
      }
    }
  }
}

}  // namespace
}  // namespace tiergen::test
