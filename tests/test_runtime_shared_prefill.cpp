// Rows of a gpu batch with the same prompt (the n samples of one request) compute the
// prefill once and share it: fewer rows (and prefill positions) are computed, greedy
// samples are identical to the prompt run alone, and sampled ones still follow their
// own random streams.
#include <gtest/gtest.h>

#include <set>

#include "tests/support/tiny_model.h"
#include "tiergen/runtime/engine.h"

namespace tiergen::test {
namespace {

using A = std::array<double, 6>;

struct Outcome {
  std::vector<runtime::SequenceResult> results;
  int64_t prefill_steps = 0, prefill_rows = 0;
};

Outcome run(const TinyModel& model, const std::vector<runtime::SequenceRequest>& requests, const runtime::Policy& policy) {
  TempDir offload("offload");
  runtime::Engine engine(model.spec, *model.weights, policy, cpu_engine_options(offload.path), workload_of(requests));
  Outcome r;
  r.results = engine.generate(requests);
  r.prefill_steps = engine.stats().compute_steps(true);
  r.prefill_rows = engine.stats().computed_rows(true);
  return r;
}

// prompts[p] repeated `copies[p]` times, in the order given.
std::vector<runtime::SequenceRequest> with_copies(const std::vector<std::vector<int64_t>>& prompts,
                                                  const std::vector<int>& copies, int64_t max_new) {
  std::vector<runtime::SequenceRequest> requests;
  for (size_t p = 0; p < prompts.size(); ++p) {
    for (int c = 0; c < copies[p]; ++c) {
      runtime::SequenceRequest r;
      r.index = static_cast<int64_t>(p) + (static_cast<int64_t>(c) << 40);
      r.prompt = prompts[p];
      r.max_new_tokens = max_new;
      requests.push_back(std::move(r));
    }
  }
  return requests;
}

TEST(SharedPrefill, SamplesOfOnePromptComputeItsPrefillOnce) {
  for (const auto& options : {tiny_llama(51), tiny_opt(52)}) {
    const TinyModel model = make_tiny_model(options);
    const auto prompts = make_prompts({5, 5}, model.spec.vocab_size, 7);
    // One gpu batch of 4: three samples of prompt 0 and one of prompt 1.
    const auto policy = make_policy(4, 1, A{100, 0, 100, 0, 100, 0}, false);
    const Outcome shared = run(model, with_copies(prompts, {3, 1}, 4), policy);
    ASSERT_GT(shared.prefill_steps, 0);
    EXPECT_EQ(shared.prefill_rows, 2 * shared.prefill_steps) << "two distinct prompts, four rows";

    const Outcome alone = run(model, with_copies(prompts, {1, 1}, 4), make_policy(2, 1, A{100, 0, 100, 0, 100, 0}, false));
    for (size_t s = 0; s < 3; ++s) EXPECT_EQ(shared.results[s].tokens, alone.results[0].tokens) << "sample " << s;
    EXPECT_EQ(shared.results[3].tokens, alone.results[1].tokens);
  }
}

TEST(SharedPrefill, CopiesAnywhereInTheBatchAndAcrossPlacementsGiveTheSameTokens) {
  const TinyModel model = make_tiny_model(tiny_llama(53));
  const auto prompts = make_prompts({4, 7, 2}, model.spec.vocab_size, 9);
  // Interleaved copies: rows A B A C B A across two gpu batches of 3.
  std::vector<runtime::SequenceRequest> requests;
  for (int p : {0, 1, 0, 2, 1, 0}) {
    runtime::SequenceRequest r;
    r.index = static_cast<int64_t>(requests.size());
    r.prompt = prompts[static_cast<size_t>(p)];
    r.max_new_tokens = 5;
    requests.push_back(std::move(r));
  }
  const auto reference = run(model, greedy_requests(prompts, {5}), make_policy(1, 3, A{100, 0, 100, 0, 100, 0}, false));
  const runtime::Policy placements[] = {
      make_policy(3, 2, A{100, 0, 100, 0, 100, 0}, false),
      make_policy(3, 2, A{0, 100, 0, 100, 0, 100}, true),
      make_policy(6, 1, A{0, 0, 0, 0, 50, 0}, true),
  };
  for (const auto& policy : placements) {
    const Outcome shared = run(model, requests, policy);
    EXPECT_LT(shared.prefill_rows, 6 * shared.prefill_steps / policy.num_gpu_batches);
    // The engine groups rows its own way; each sequence is found by its prompt.
    for (size_t i = 0; i < requests.size(); ++i) {
      size_t p = 0;
      while (prompts[p] != requests[i].prompt) ++p;
      EXPECT_EQ(shared.results[i].tokens, reference.results[p].tokens) << "request " << i;
    }
  }
}

// With ragged prefill groups (test_ragged_prefill.cpp), the groups are formed over the
// distinct prompts only: a copy adds neither rows nor positions.
TEST(SharedPrefill, CopiesAddNoPrefillPositionsToTheRaggedGroups) {
  const TinyModel model = make_tiny_model(tiny_opt(55));
  const auto prompts = make_prompts({4, 12, 12}, model.spec.vocab_size, 11);
  const auto policy = make_policy(5, 1, A{100, 0, 100, 0, 100, 0}, false);
  TempDir offload("offload");
  const auto requests = with_copies(prompts, {2, 1, 2}, 3);
  runtime::Engine engine(model.spec, *model.weights, policy, cpu_engine_options(offload.path), workload_of(requests));
  const auto results = engine.generate(requests);
  const int64_t NL = model.spec.num_weight_layers();
  EXPECT_EQ(engine.stats().computed_rows(true), 3 * NL);
  EXPECT_EQ(engine.stats().prefill_positions(), (4 + 12 + 12) * NL) << "not (4 + 4 + 12 x 3) per layer";
  EXPECT_EQ(tokens_of(results), greedy_references(model, requests));
}

TEST(SharedPrefill, SampledCopiesFollowTheirOwnStreams) {
  const TinyModel model = make_tiny_model(tiny_llama(54));
  const auto prompts = make_prompts({6}, model.spec.vocab_size, 3);
  auto requests = with_copies(prompts, {4}, 12);
  for (auto& r : requests) r.sampling.temperature = 1.5;
  const Outcome shared = run(model, requests, make_policy(4, 1, A{100, 0, 100, 0, 100, 0}, false));
  EXPECT_EQ(shared.prefill_rows, shared.prefill_steps);
  std::set<std::vector<int64_t>> distinct;
  for (const auto& r : shared.results) distinct.insert(r.tokens);
  EXPECT_GE(distinct.size(), 3u) << "four samples at temperature 1.5 should mostly differ";
  // Sample 0 is what the prompt alone gives with the same stream.
  const Outcome alone = run(model, {requests[0]}, make_policy(1, 1, A{100, 0, 100, 0, 100, 0}, false));
  EXPECT_EQ(shared.results[0].tokens, alone.results[0].tokens);
}

}  // namespace
}  // namespace tiergen::test
