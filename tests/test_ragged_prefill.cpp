// Ragged prompts are not padded prefill. Prompts are sorted by length into blocks
// (within a block, gpu batches group similar max_tokens); within a gpu batch, the rows
// are taken shortest first and rows whose prompts are within 25% of each other form a
// group whose prefill runs over its own longest
// prompt (the last positions of the block's left-padded layout), not the block's. KV
// cache positions before a group's window are never computed: they hold zeros and stay
// masked. The tokens are those of one prompt per block, for every placement.
#include <gtest/gtest.h>

#include <numeric>
#include <tuple>

#include "tests/support/tiny_model.h"
#include "tiergen/runtime/engine.h"

namespace tiergen::test {
namespace {

using A = std::array<double, 6>;
const A kAllGpu{100, 0, 100, 0, 100, 0};

int64_t sum_of(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

TEST(RaggedPrefill, EachGpuBatchPrefillsOverItsOwnLongestPrompt) {
  const TinyModel m = make_tiny_model(tiny_opt(81));
  // One block of 2 x 2; by length its batches are {2, 3} and {11, 12}.
  const auto requests = greedy_requests(make_prompts({3, 12, 2, 11}, m.spec.vocab_size, 19), {3, 2});
  TempDir offload("offload");
  runtime::Engine engine(m.spec, *m.weights, make_policy(2, 2, kAllGpu, false), cpu_engine_options(offload.path),
                         workload_of(requests));
  const auto results = engine.generate(requests);
  const int64_t NL = m.spec.num_weight_layers();
  EXPECT_EQ(engine.stats().compute_steps(true), 2 * NL);
  EXPECT_EQ(engine.stats().computed_rows(true), 4 * NL);
  // (Row, position) pairs per layer: 2 and 3 (more than 25% apart) each over their own
  // length, {11, 12} over 12; not the padded block's 4 x 12.
  EXPECT_EQ(engine.stats().prefill_positions(), (2 + 3 + 2 * 12) * NL);
  EXPECT_EQ(tokens_of(results), greedy_references(m, requests));
}

TEST(RaggedPrefill, ShortAndLongPromptsInOneGpuBatchPrefillApart) {
  const TinyModel m = make_tiny_model(tiny_opt(84));
  // One gpu batch, by length 1, 2, 5, 9, 14, 16: 1, 2, 5 and 9 each over their own
  // length (more than 25% apart), (14, 16) over 16.
  const std::vector<int64_t> lengths{9, 1, 16, 5, 2, 14};
  const auto requests = greedy_requests(make_prompts(lengths, m.spec.vocab_size, 31), {3, 1, 4});
  TempDir offload("offload");
  runtime::Engine engine(m.spec, *m.weights, make_policy(6, 1, kAllGpu, false), cpu_engine_options(offload.path),
                         workload_of(requests));
  const auto results = engine.generate(requests);
  const int64_t NL = m.spec.num_weight_layers();
  EXPECT_EQ(engine.stats().compute_steps(true), NL);
  EXPECT_EQ(engine.stats().prefill_positions(), (1 + 2 + 5 + 9 + 2 * 16) * NL);  // not 6 x 16
  EXPECT_EQ(engine.stats().padded_prompt_tokens, 6 * 16);  // the block's layout is still padded
  EXPECT_EQ(engine.stats().prompt_tokens, 1 + 2 + 5 + 9 + 14 + 16);  // what was asked
  EXPECT_EQ(tokens_of(results), greedy_references(m, requests));
}

TEST(RaggedPrefill, InterleavedPromptsFormBlocksByLength) {
  const TinyModel m = make_tiny_model(tiny_llama(82));
  const std::vector<int64_t> lengths{2, 12, 3, 11, 4, 10};
  const auto requests = greedy_requests(make_prompts(lengths, m.spec.vocab_size, 23), {4, 2, 5});
  TempDir offload("offload");
  const runtime::EngineOptions options = cpu_engine_options(offload.path);
  runtime::Engine blocks_of_two(m.spec, *m.weights, make_policy(2, 1, kAllGpu, false), options, workload_of(requests));
  const auto results = blocks_of_two.generate(requests);
  runtime::Engine one_per_block(m.spec, *m.weights, make_policy(1, 1, kAllGpu, false), options, workload_of(requests));
  const auto expected = one_per_block.generate(requests);
  const int64_t NL = m.spec.num_weight_layers();
  // Blocks {2, 3}, {4, 10}, {11, 12}: each padded to its own longest prompt, where
  // blocks in input order ({2, 12}, {3, 11}, {4, 10}) would be padded to 12, 11, 10.
  EXPECT_EQ(blocks_of_two.stats().padded_prompt_tokens, 2 * (3 + 10 + 12));
  EXPECT_EQ(blocks_of_two.stats().prompt_tokens, sum_of(lengths));
  // Prefill: 2, 3, 4 and 10 (more than 25% apart) each over their own length, {11, 12}
  // over 12.
  EXPECT_EQ(blocks_of_two.stats().prefill_positions(), (2 + 3 + 4 + 10 + 2 * 12) * NL);
  EXPECT_EQ(one_per_block.stats().prefill_positions(), sum_of(lengths) * NL);
  // Results come back in input order with the tokens of one prompt per block.
  ASSERT_EQ(results.size(), requests.size());
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].tokens, expected[r].tokens) << "request " << r;
    EXPECT_EQ(static_cast<int64_t>(results[r].tokens.size()), requests[r].max_new_tokens) << "request " << r;
  }
}

// ---- Windowed prefill under every placement: the positions before a batch's window
// are zeros in every home of the KV cache (gpu, cpu, disk, compressed), and the CPU
// attention kernel and the device attention both mask them.

struct PrefillCase {
  std::string name;
  runtime::Policy policy;
};

void PrintTo(const PrefillCase& c, std::ostream* os) { *os << c.name; }

runtime::Policy compressed(runtime::Policy p) {
  p.compress_weight = {true, 4, 16};
  p.compress_cache = {true, 4, 16};
  return p;
}

std::vector<PrefillCase> prefill_cases() {
  return {
      {"all_gpu_2x3", make_policy(2, 3, kAllGpu, false)},
      {"cache_cpu_cpu_attention_2x3", make_policy(2, 3, A{100, 0, 0, 100, 100, 0}, true)},
      {"cache_mixed_cpu_attention_3x2", make_policy(3, 2, A{100, 0, 30, 40, 100, 0}, true)},
      {"cache_disk_2x3", make_policy(2, 3, A{100, 0, 0, 0, 100, 0}, false)},
      {"all_tiers_2x3", make_policy(2, 3, A{20, 30, 25, 25, 0, 50}, true)},
      {"all_disk_cpu_attention_3x2", make_policy(3, 2, A{0, 0, 0, 0, 0, 0}, true)},
      {"all_gpu_one_batch_6x1", make_policy(6, 1, kAllGpu, false)},
      {"cache_disk_cpu_attention_one_batch_6x1", make_policy(6, 1, A{100, 0, 0, 0, 50, 50}, true)},
  };
}

class RaggedPrefillPlacementTest : public ::testing::TestWithParam<std::tuple<PrefillCase, bool, bool>> {};

TEST_P(RaggedPrefillPlacementTest, TokensEqualOneBlockPerPrompt) {
  const auto& [c, compress, emulated] = GetParam();
  const TinyModel m = make_tiny_model(tiny_llama(83));
  // One block of 6 with prompts of 1 to 16 tokens: batch and group windows far
  // shorter than 16.
  const auto requests = greedy_requests(make_prompts({1, 16, 2, 15, 3, 9}, m.spec.vocab_size, 29), {4, 6, 3, 5});
  TempDir offload("offload");
  runtime::EngineOptions options = cpu_engine_options(offload.path);
  const runtime::Policy single = make_policy(1, 1, kAllGpu, false);
  const auto expected =
      engine_tokens(m.spec, *m.weights, compress ? compressed(single) : single, options, requests);
  if (emulated) options.device.emulation = emulated_streams(c.name.size() + 11);
  runtime::Engine engine(m.spec, *m.weights, compress ? compressed(c.policy) : c.policy, options,
                         workload_of(requests));
  const auto results = engine.generate(requests);
  ASSERT_EQ(results.size(), requests.size());
  for (size_t r = 0; r < results.size(); ++r) EXPECT_EQ(results[r].tokens, expected[r]) << "request " << r;
  const int64_t block_rows = c.policy.gpu_batch_size * c.policy.num_gpu_batches;
  EXPECT_LT(engine.stats().prefill_positions(), block_rows * 16 * m.spec.num_weight_layers());
  EXPECT_TRUE(files_in(offload.path).empty());
}

INSTANTIATE_TEST_SUITE_P(Placements, RaggedPrefillPlacementTest,
                         ::testing::Combine(::testing::ValuesIn(prefill_cases()), ::testing::Bool(),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + (std::get<1>(info.param) ? "_compressed" : "") +
                                  (std::get<2>(info.param) ? "_emulated_streams" : "");
                         });

}  // namespace
}  // namespace tiergen::test
