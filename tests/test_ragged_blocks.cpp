// Ragged work is not padded work. In a block of prompts with different lengths and
// different max_tokens, a sequence costs compute only while it generates: from its
// end (end-of-sequence, a stop token, its own max_tokens) its row leaves the gpu
// batch's matmuls, a gpu batch with no live row skips its steps (or takes the job's
// next sequences), and the block ends with its last sequence. Each gpu batch is padded
// to its own longest prompt. The tokens
// are those of running every prompt in a block of its own, for every placement, with
// every worker's stream emulated asynchronously too.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <tuple>

#include "tests/support/tiny_model.h"
#include "tiergen/runtime/engine.h"

namespace tiergen::test {
namespace {

using A = std::array<double, 6>;
const A kAllGpu{100, 0, 100, 0, 100, 0};

// Decode compute rows a run needs when finished rows cost nothing: each sequence
// computes every weight layer once per token after its first.
int64_t live_decode_rows(const model::Spec& spec, const std::vector<runtime::SequenceResult>& results) {
  int64_t rows = 0;
  for (const auto& r : results) rows += static_cast<int64_t>(r.tokens.size()) - 1;
  return rows * spec.num_weight_layers();
}

TEST(RaggedBlock, FinishedSequencesLeaveTheMatmulsAndFinishedBatchesTheSchedule) {
  const TinyModel m = make_tiny_model(tiny_opt(61));
  // One block of 2 x 2, equal prompt lengths; max_tokens 8, 2, 9, 3 in input order.
  auto requests = greedy_requests(make_prompts({5, 5, 5, 5}, m.spec.vocab_size, 3), {8, 2, 9, 3});
  TempDir offload("offload");
  runtime::Engine engine(m.spec, *m.weights, make_policy(2, 2, kAllGpu, false), cpu_engine_options(offload.path),
                         workload_of(requests));
  const auto results = engine.generate(requests);
  ASSERT_EQ(results.size(), 4u);
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(static_cast<int64_t>(results[r].tokens.size()), requests[r].max_new_tokens) << "request " << r;
  }
  const int64_t NL = m.spec.num_weight_layers();
  const runtime::Stats& stats = engine.stats();
  // The prefill computes both batches in full.
  EXPECT_EQ(stats.compute_steps(true), 2 * NL);
  EXPECT_EQ(stats.computed_rows(true), 4 * NL);
  // Decode: only live rows (1 + 7 + 8 + 2 tokens after the first), not 4 rows x 8 tokens.
  EXPECT_EQ(stats.computed_rows(false), live_decode_rows(m.spec, results));
  EXPECT_EQ(stats.computed_rows(false), 18 * NL);
  // The batch of max_tokens 2 and 3 (grouped by max_tokens) runs 2 decode tokens, the
  // batch of 8 and 9 runs 8: 10 batch-tokens rather than the padded 2 x 8.
  EXPECT_EQ(stats.compute_steps(false), 10 * NL);
}

TEST(RaggedBlock, AStopTokenEndsTheSequencesCompute) {
  const TinyModel m = make_tiny_model(tiny_opt(62));
  auto requests = greedy_requests(make_prompts({4, 6, 5}, m.spec.vocab_size, 5), {12});
  TempDir offload("offload");
  const runtime::EngineOptions options = cpu_engine_options(offload.path);
  const runtime::Policy policy = make_policy(3, 1, kAllGpu, false);
  // Request 1 stops at its third token.
  const auto plain = engine_tokens(m.spec, *m.weights, policy, options, requests);
  requests[1].stop_token_ids = {plain[1][2]};
  runtime::Engine engine(m.spec, *m.weights, policy, options, workload_of(requests));
  const auto results = engine.generate(requests);
  ASSERT_EQ(results[1].finish_reason, "stop");
  ASSERT_LE(results[1].tokens.size(), 3u);
  EXPECT_EQ(results[0].tokens, plain[0]);
  EXPECT_EQ(results[2].tokens, plain[2]);
  EXPECT_EQ(engine.stats().computed_rows(false), live_decode_rows(m.spec, results));
  EXPECT_LT(engine.stats().computed_rows(false), 3 * 11 * m.spec.num_weight_layers());
}

TEST(RaggedBlock, TheBlockEndsWithItsLastSequence) {
  const TinyModel m = make_tiny_model(tiny_opt(63));
  const auto requests = greedy_requests(make_prompts({3, 7}, m.spec.vocab_size, 9), {3, 5});
  TempDir offload("offload");
  runtime::Engine engine(m.spec, *m.weights, make_policy(2, 1, kAllGpu, false), cpu_engine_options(offload.path),
                         runtime::Workload{7, 40});  // planned for far longer generations
  engine.generate(requests);
  EXPECT_EQ(engine.stats().compute_steps(false), 4 * m.spec.num_weight_layers());
}

TEST(RaggedBlock, EachBlockIsPaddedToItsOwnLongestPrompt) {
  const TinyModel m = make_tiny_model(tiny_opt(64));
  // Sorted by length into blocks {2, 3} and {11, 12}.
  const auto requests = greedy_requests(make_prompts({2, 12, 3, 11}, m.spec.vocab_size, 13), {2});
  TempDir offload("offload");
  runtime::Engine engine(m.spec, *m.weights, make_policy(2, 1, kAllGpu, false), cpu_engine_options(offload.path),
                         workload_of(requests));
  const auto results = engine.generate(requests);
  EXPECT_EQ(engine.stats().padded_prompt_tokens, 2 * 3 + 2 * 12);
  EXPECT_EQ(engine.stats().prompt_tokens, 2 + 12 + 3 + 11);
  const auto layers = load_all_layers(m.spec, *m.weights);
  for (size_t r = 0; r < requests.size(); ++r) {
    EXPECT_EQ(results[r].tokens, greedy_reference(m.spec, layers, requests[r].prompt, 2)) << "request " << r;
  }
}

// ---- Tokens of a ragged job equal a block-per-prompt run, for every placement.

struct RaggedJob {
  TinyModel model;
  model::Spec spec;  // the model's, with an end-of-sequence token the prompts meet
  std::vector<runtime::SequenceRequest> requests;
  std::vector<runtime::SequenceResult> expected;  // one prompt per block (1 x 1)
};

// 14 prompts of 1..13 tokens with max_tokens 1..12; an end-of-sequence id that some
// greedy continuations produce early, a stop token on one request, ignore_eos on another.
RaggedJob make_ragged_job(const std::string& arch) {
  RaggedJob job;
  job.model = make_tiny_model(arch == "opt" ? tiny_opt(71) : tiny_llama(72));
  job.spec = job.model.spec;
  const auto prompts = make_prompts({5, 1, 9, 13, 2, 7, 4, 11, 3, 8, 6, 12, 10, 2}, job.spec.vocab_size, 17);
  job.requests = greedy_requests(prompts, {7, 1, 12, 3, 9, 5, 11, 2, 12, 6, 4, 10, 8});
  const auto layers = load_all_layers(job.spec, *job.model.weights);
  std::map<int64_t, int> later_tokens;  // how often each id appears after the second token
  std::vector<std::vector<int64_t>> greedy;
  for (const auto& r : job.requests) {
    greedy.push_back(greedy_reference(job.spec, layers, r.prompt, r.max_new_tokens));
    for (size_t t = 2; t < greedy.back().size(); ++t) later_tokens[greedy.back()[t]] += 1;
  }
  const auto most_frequent = std::max_element(later_tokens.begin(), later_tokens.end(),
                                              [](const auto& a, const auto& b) { return a.second < b.second; });
  job.spec.eos_token_ids = {most_frequent->first};
  job.requests[4].ignore_eos = true;
  job.requests[8].stop_token_ids = {greedy[8][4]};
  TempDir offload("offload");
  runtime::Engine engine(job.spec, *job.model.weights, make_policy(1, 1, kAllGpu, false, false),
                         cpu_engine_options(offload.path), workload_of(job.requests));
  job.expected = engine.generate(job.requests);
  return job;
}

const RaggedJob& ragged_job(const std::string& arch) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<RaggedJob>> jobs;
  std::lock_guard<std::mutex> lock(mutex);
  auto& job = jobs[arch];
  if (!job) job = std::make_unique<RaggedJob>(make_ragged_job(arch));
  return *job;
}

struct RaggedCase {
  std::string name;
  runtime::Policy policy;
};

void PrintTo(const RaggedCase& c, std::ostream* os) { *os << c.name; }

runtime::Policy compressed(runtime::Policy p) {
  p.compress_weight = {true, 4, 16};
  p.compress_cache = {true, 4, 16};
  return p;
}

std::vector<RaggedCase> ragged_cases() {
  return {
      {"all_gpu_2x4", make_policy(2, 4, kAllGpu, false)},
      {"all_gpu_4x3", make_policy(4, 3, kAllGpu, false)},
      {"all_gpu_8x2_no_overlap", make_policy(8, 2, kAllGpu, false, false)},
      {"activations_gpu_cpu_4x1", make_policy(4, 1, A{100, 0, 100, 0, 50, 50}, false)},
      {"activations_disk_2x3", make_policy(2, 3, A{100, 0, 100, 0, 0, 0}, false)},
      {"weights_disk_3x2", make_policy(3, 2, A{0, 0, 100, 0, 100, 0}, false)},
      {"cache_cpu_4x2", make_policy(4, 2, A{100, 0, 0, 100, 100, 0}, false)},
      {"cache_cpu_cpu_attention_4x2", make_policy(4, 2, A{100, 0, 0, 100, 100, 0}, true)},
      {"cache_mixed_cpu_attention_8x2", make_policy(8, 2, A{100, 0, 30, 40, 100, 0}, true)},
      {"cache_disk_2x4", make_policy(2, 4, A{100, 0, 0, 0, 100, 0}, false)},
      {"all_tiers_2x4", make_policy(2, 4, A{20, 30, 25, 25, 0, 50}, true)},
      {"all_disk_8x2_cpu_attention", make_policy(8, 2, A{0, 0, 0, 0, 0, 0}, true)},
  };
}

class RaggedPlacementTest : public ::testing::TestWithParam<std::tuple<RaggedCase, std::string, bool>> {};

TEST_P(RaggedPlacementTest, TokensEqualOneBlockPerPrompt) {
  const auto& [c, arch, emulated] = GetParam();
  const RaggedJob& job = ragged_job(arch);
  TempDir offload("offload");
  runtime::EngineOptions options = cpu_engine_options(offload.path);
  if (emulated) options.device.emulation = emulated_streams(c.name.size() + 7);
  std::vector<runtime::SequenceResult> results;
  int64_t decode_rows = 0, refilled = 0;
  {
    runtime::Engine engine(job.spec, *job.model.weights, c.policy, options, workload_of(job.requests));
    results = engine.generate(job.requests);
    decode_rows = engine.stats().computed_rows(false);
    refilled = engine.stats().refilled_batches;
  }
  // A job of more than one block of several gpu batches: batches that finish early
  // take the next ones while the others generate.
  if (static_cast<int64_t>(job.requests.size()) > c.policy.block_size() && c.policy.num_gpu_batches > 1) {
    EXPECT_GT(refilled, 0);
  }
  ASSERT_EQ(results.size(), job.requests.size());
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].tokens, job.expected[r].tokens) << "request " << r;
    EXPECT_EQ(results[r].finish_reason, job.expected[r].finish_reason) << "request " << r;
  }
  EXPECT_EQ(decode_rows, live_decode_rows(job.spec, results));
  EXPECT_TRUE(files_in(offload.path).empty());
}

INSTANTIATE_TEST_SUITE_P(Placements, RaggedPlacementTest,
                         ::testing::Combine(::testing::ValuesIn(ragged_cases()), ::testing::Values("opt", "llama"),
                                            ::testing::Values(false, true)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" + std::get<1>(info.param) +
                                  (std::get<2>(info.param) ? "_emulated_streams" : "");
                         });

// The job is really ragged: sequences end early on end-of-sequence and on the stop
// token, others at their own max_tokens, and ignore_eos runs past end-of-sequence.
TEST(RaggedJobShape, SequencesEndInEveryWay) {
  for (const char* arch : {"opt", "llama"}) {
    const RaggedJob& job = ragged_job(arch);
    int early_stops = 0, lengths = 0;
    for (size_t r = 0; r < job.expected.size(); ++r) {
      const auto& result = job.expected[r];
      const auto n = static_cast<int64_t>(result.tokens.size());
      if (result.finish_reason == "stop" && n < job.requests[r].max_new_tokens) ++early_stops;
      if (result.finish_reason == "length") ++lengths;
    }
    EXPECT_GE(early_stops, 2) << arch;
    EXPECT_GE(lengths, 4) << arch;
    EXPECT_EQ(job.expected[8].finish_reason, "stop") << arch;
    EXPECT_EQ(job.expected[4].finish_reason, "length") << arch;
    // The block-per-prompt run is the plain full-forward greedy continuation.
    const auto layers = load_all_layers(job.spec, *job.model.weights);
    for (size_t r = 0; r < job.expected.size(); ++r) {
      const auto& tokens = job.expected[r].tokens;
      const auto reference =
          greedy_reference(job.spec, layers, job.requests[r].prompt, static_cast<int64_t>(tokens.size()));
      EXPECT_EQ(tokens, reference) << arch << " request " << r;
    }
  }
}

// Compressed weights and KV cache: a ragged block gives the tokens of the same
// compression run one prompt per block.
TEST(RaggedCompressed, TokensEqualOneBlockPerPrompt) {
  for (const char* arch : {"opt", "llama"}) {
    const RaggedJob& job = ragged_job(arch);
    TempDir offload("offload");
    const runtime::EngineOptions options = cpu_engine_options(offload.path);
    const auto one_per_block =
        engine_tokens(job.spec, *job.model.weights, compressed(make_policy(1, 1, kAllGpu, false)), options, job.requests);
    const auto ragged = engine_tokens(job.spec, *job.model.weights,
                                      compressed(make_policy(4, 2, A{50, 20, 30, 40, 100, 0}, true)), options,
                                      job.requests);
    EXPECT_EQ(ragged, one_per_block) << arch;
  }
}

// Sampled (seeded) tokens do not depend on which rows are still live around them.
TEST(RaggedSampling, SampledTokensEqualOneBlockPerPrompt) {
  const RaggedJob& job = ragged_job("llama");
  auto requests = job.requests;
  for (auto& r : requests) {
    r.sampling.temperature = 0.9;
    r.sampling.top_k = 16;
    r.sampling.seed = 3;
  }
  TempDir offload("offload");
  const runtime::EngineOptions options = cpu_engine_options(offload.path);
  EXPECT_EQ(engine_tokens(job.spec, *job.model.weights, make_policy(4, 3, kAllGpu, false), options, requests),
            engine_tokens(job.spec, *job.model.weights, make_policy(1, 1, kAllGpu, false), options, requests));
}

}  // namespace
}  // namespace tiergen::test
