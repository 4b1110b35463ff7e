// A gpu batch whose sequences are all done takes the job's next sequences at once,
// while the other batches of its block still generate (EngineOptions::refill_batches,
// RunFeed): its prefill shares a pass with their decode tokens, so the schedule runs
// fewer passes (each loads every weight layer once) than one block after another.
// Results come out as each gpu batch finishes, and the tokens are those of any other
// schedule, for every placement (tests/test_ragged_blocks.cpp runs its ragged job with
// refills too).
#include <gtest/gtest.h>

#include "tests/support/tiny_model.h"
#include "tiergen/runtime/engine.h"

namespace tiergen::test {
namespace {

using A = std::array<double, 6>;
const A kAllGpu{100, 0, 100, 0, 100, 0};

struct JobRun {
  std::vector<std::vector<int64_t>> tokens;
  std::vector<size_t> arrival;  // request indices in the order on_result saw them
  int64_t passes = 0, refilled = 0, prefill_steps = 0;
};

JobRun run_job(const TinyModel& m, const runtime::Policy& policy, runtime::EngineOptions options,
            const std::vector<runtime::SequenceRequest>& requests, bool refill) {
  options.refill_batches = refill;
  runtime::Engine engine(m.spec, *m.weights, policy, options, workload_of(requests));
  JobRun run;
  run.tokens.resize(requests.size());
  engine.generate(requests, [&](size_t i, const runtime::SequenceResult& r) {
    run.tokens[i] = r.tokens;
    run.arrival.push_back(i);
  });
  run.passes = engine.stats().passes;
  run.refilled = engine.stats().refilled_batches;
  run.prefill_steps = engine.stats().compute_steps(true);
  return run;
}

// Two blocks of 2 x 2 with equal prompts; in each, one gpu batch of max_tokens 2 and
// one of 12 (sequences with similar max_tokens share a batch).
std::vector<runtime::SequenceRequest> two_short_two_long_twice(const TinyModel& m) {
  return greedy_requests(make_prompts({6, 6, 6, 6, 6, 6, 6, 6}, m.spec.vocab_size, 21), {2, 2, 12, 12});
}

TEST(BatchRefill, AFinishedBatchTakesTheNextSequencesWhileTheOthersGenerate) {
  const TinyModel m = make_tiny_model(tiny_opt(81));
  const auto requests = two_short_two_long_twice(m);
  TempDir offload("offload");
  const runtime::Policy policy = make_policy(2, 2, kAllGpu, false);
  const JobRun refilled = run_job(m, policy, cpu_engine_options(offload.path), requests, true);
  const JobRun blocks = run_job(m, policy, cpu_engine_options(offload.path), requests, false);

  // One block after another: 12 passes each. With refills, batch slot 0 runs requests
  // 0-1 (passes 0-1), 4-5 (2-3) and 6-7 (4-15) while slot 1 runs 2-3 (0-11).
  EXPECT_EQ(blocks.passes, 24);
  EXPECT_EQ(blocks.refilled, 0);
  EXPECT_EQ(refilled.passes, 16);
  EXPECT_EQ(refilled.refilled, 2);
  // Every gpu batch still runs its prefill once, over every layer.
  EXPECT_EQ(refilled.prefill_steps, 4 * m.spec.num_weight_layers());
  EXPECT_EQ(blocks.prefill_steps, refilled.prefill_steps);

  EXPECT_EQ(refilled.tokens, blocks.tokens);
  EXPECT_EQ(refilled.tokens, greedy_references(m, requests));
  // Results come out as their gpu batch finishes: the short ones first, each batch's
  // pair together; 2-3 end at pass 11, before 6-7 at pass 15.
  ASSERT_EQ(refilled.arrival.size(), 8u);
  const std::vector<size_t> batches_in_order = {0, 4, 2, 6};
  for (size_t b = 0; b < batches_in_order.size(); ++b) {
    const size_t first = batches_in_order[b];
    EXPECT_TRUE((refilled.arrival[2 * b] == first && refilled.arrival[2 * b + 1] == first + 1) ||
                (refilled.arrival[2 * b] == first + 1 && refilled.arrival[2 * b + 1] == first))
        << "batch " << b << " arrived as " << refilled.arrival[2 * b] << ", " << refilled.arrival[2 * b + 1];
  }
  EXPECT_TRUE(files_in(offload.path).empty());
}

// A refilled batch's prompts may be longer than any its slot held before, and its
// max_tokens larger: the homes are made for the job's longest.
TEST(BatchRefill, ARefillLongerThanItsSlotsFirstBatchGetsTheSameTokens) {
  const TinyModel m = make_tiny_model(tiny_llama(82));
  // Sorted by length: the first block holds the short prompts, the second the long.
  auto requests = greedy_requests(make_prompts({2, 3, 14, 15, 3, 2, 13, 16}, m.spec.vocab_size, 23), {1});
  for (size_t r = 0; r < requests.size(); ++r) requests[r].max_new_tokens = r < 2 || (r >= 4 && r < 6) ? 1 + r % 2 : 9;
  TempDir offload("offload");
  const JobRun refilled = run_job(m, make_policy(2, 2, A{100, 0, 0, 0, 100, 0}, true), cpu_engine_options(offload.path),
                               requests, true);
  EXPECT_GT(refilled.refilled, 0);
  EXPECT_EQ(refilled.tokens, greedy_references(m, requests));
}

struct RefillCase {
  std::string name;
  runtime::Policy policy;
};

void PrintTo(const RefillCase& c, std::ostream* os) { *os << c.name; }

// Where the refilled batch's prefill and the others' decode tokens share a pass:
// every home of weights, cache and activations; CPU attention; compressed weights and
// cache; weights multiplied where they live in decode only (the shared pass loads them
// as for the prefill).
std::vector<RefillCase> refill_cases() {
  runtime::Policy compressed = make_policy(2, 2, A{40, 30, 30, 40, 50, 50}, true);
  compressed.compress_weight = {true, 4, 16};
  compressed.compress_cache = {true, 4, 16};
  return {
      {"all_gpu", make_policy(2, 2, kAllGpu, false)},
      {"weights_cpu_disk_cache_cpu_attention", make_policy(2, 2, A{0, 50, 0, 100, 100, 0}, true)},
      {"cache_disk_activations_disk", make_policy(2, 2, A{100, 0, 0, 0, 0, 0}, false)},
      {"all_tiers_compressed", compressed},
      {"cpu_weight_compute_decode_only",
       with_cpu_weight_compute(make_policy(2, 2, A{0, 60, 50, 50, 100, 0}, true), false, true)},
  };
}

class BatchRefillPlacement : public ::testing::TestWithParam<std::tuple<RefillCase, bool>> {};

TEST_P(BatchRefillPlacement, TokensEqualOneBlockAfterAnother) {
  const auto& [c, emulated] = GetParam();
  const TinyModel m = make_tiny_model(tiny_llama(83));
  const auto requests =
      greedy_requests(make_prompts({4, 9, 5, 7, 3, 8, 6, 2, 10, 5}, m.spec.vocab_size, 29), {3, 1, 8, 5, 2, 7});
  TempDir offload("offload");
  runtime::EngineOptions options = cpu_engine_options(offload.path);
  if (emulated) options.device.emulation = emulated_streams(c.name.size() + 3);
  const JobRun refilled = run_job(m, c.policy, options, requests, true);
  const JobRun blocks = run_job(m, c.policy, options, requests, false);
  EXPECT_GT(refilled.refilled, 0);
  EXPECT_LT(refilled.passes, blocks.passes);
  EXPECT_EQ(refilled.tokens, blocks.tokens);
  if (!c.policy.compress_weight.enabled) EXPECT_EQ(refilled.tokens, greedy_references(m, requests));
  EXPECT_TRUE(files_in(offload.path).empty());
}

INSTANTIATE_TEST_SUITE_P(Placements, BatchRefillPlacement,
                         ::testing::Combine(::testing::ValuesIn(refill_cases()), ::testing::Values(false, true)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + (std::get<1>(info.param) ? "_emulated_streams" : "");
                         });

}  // namespace
}  // namespace tiergen::test
