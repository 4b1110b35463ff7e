// Placement never changes results: every policy (weights, KV cache and activations on
// any mix of tiers, CPU attention, overlap, gpu batch splits) gives the greedy tokens
// of a plain full-forward reference, on tiny OPT and tiny LLaMA with GQA; with CPU
// copies done at once, and again with every worker's stream emulated asynchronously
// (copies delayed on their own threads, emulated_stream.h), where a read that does not
// wait for its writer's event sees stale data.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "tests/support/tiny_model.h"
#include "tiergen/runtime/engine.h"

namespace tiergen::test {
namespace {

struct PolicyCase {
  std::string name;
  runtime::Policy policy;
  bool copy_disk_weights = false;  // disk weights go through the offload file, not read in place
};

void PrintTo(const PolicyCase& c, std::ostream* os) { *os << c.name; }

std::vector<PolicyCase> policy_cases() {
  using A = std::array<double, 6>;
  const A gpu{100, 0, 100, 0, 100, 0};
  return {
      {"all_gpu_1x1", make_policy(1, 1, gpu, false)},
      {"all_gpu_2x4", make_policy(2, 4, gpu, false)},
      {"all_gpu_8x2", make_policy(8, 2, gpu, false)},
      {"all_gpu_2x4_no_overlap", make_policy(2, 4, gpu, false, false)},
      {"all_gpu_4x3", make_policy(4, 3, gpu, false)},
      {"activations_gpu_cpu_2x2", make_policy(2, 2, A{100, 0, 100, 0, 50, 50}, false)},
      {"activations_gpu_cpu_4x1", make_policy(4, 1, A{100, 0, 100, 0, 50, 50}, false)},
      {"activations_gpu_disk_2x3", make_policy(2, 3, A{100, 0, 100, 0, 50, 0}, false)},
      {"weights_cpu", make_policy(2, 4, A{0, 100, 100, 0, 100, 0}, false)},
      {"weights_half_gpu", make_policy(2, 4, A{50, 50, 100, 0, 100, 0}, false)},
      {"weights_disk_in_place", make_policy(2, 4, A{0, 0, 100, 0, 100, 0}, false)},
      {"weights_disk_offload_file", make_policy(2, 4, A{0, 0, 100, 0, 100, 0}, false), true},
      {"weights_0_50_50", make_policy(8, 2, A{0, 50, 100, 0, 100, 0}, false)},
      {"cache_cpu", make_policy(2, 4, A{100, 0, 0, 100, 100, 0}, false)},
      {"cache_cpu_cpu_attention", make_policy(2, 4, A{100, 0, 0, 100, 100, 0}, true)},
      {"cache_disk", make_policy(2, 4, A{100, 0, 0, 0, 100, 0}, false)},
      {"cache_disk_cpu_attention", make_policy(8, 2, A{100, 0, 0, 0, 100, 0}, true)},
      {"cache_mixed", make_policy(2, 4, A{100, 0, 30, 40, 100, 0}, false)},
      {"cache_mixed_cpu_attention", make_policy(8, 2, A{100, 0, 30, 40, 100, 0}, true)},
      {"activations_cpu", make_policy(2, 4, A{100, 0, 100, 0, 0, 100}, false)},
      {"activations_disk", make_policy(2, 4, A{100, 0, 100, 0, 0, 0}, false)},
      {"activations_mixed", make_policy(8, 2, A{100, 0, 100, 0, 25, 50}, false)},
      {"all_tiers_overlap", make_policy(2, 4, A{20, 30, 25, 25, 0, 50}, true, true), true},
      {"all_tiers_no_overlap", make_policy(2, 4, A{20, 30, 25, 25, 0, 50}, true, false), true},
      {"all_disk_1x1_no_overlap", make_policy(1, 1, A{0, 0, 0, 0, 0, 0}, false, false)},
      {"all_disk_8x2_cpu_attention", make_policy(8, 2, A{0, 0, 0, 0, 0, 0}, true)},
      // Weights multiplied where they live (cpu/disk) instead of loaded, per phase.
      {"weights_cpu_host_matmul_decode", with_cpu_weight_compute(make_policy(2, 4, A{0, 100, 100, 0, 100, 0}, false), false, true)},
      {"weights_disk_host_matmul_all", with_cpu_weight_compute(make_policy(2, 4, A{0, 0, 100, 0, 100, 0}, false), true, true)},
      {"weights_0_50_50_host_matmul_prefill", with_cpu_weight_compute(make_policy(8, 2, A{0, 50, 100, 0, 100, 0}, false), true, false)},
      {"weights_cpu_host_matmul_half_the_layers", [] {
         auto p = with_cpu_weight_compute(make_policy(2, 4, A{0, 100, 100, 0, 100, 0}, false), true, true);
         p.cpu_weight_compute_layer_percent = 50;
         return p;
       }()},
      {"all_tiers_host_matmul_all", with_cpu_weight_compute(make_policy(2, 4, A{20, 30, 25, 25, 0, 50}, true), true, true), true},
  };
}

// One model per family for the whole suite, with its reference tokens.
struct FamilyFixture {
  TinyModel model;
  std::vector<runtime::SequenceRequest> requests;
  std::vector<std::vector<int64_t>> expected;
};

const FamilyFixture& family(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<FamilyFixture>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = cache[name];
  if (!slot) {
    slot = std::make_unique<FamilyFixture>();
    slot->model = make_tiny_model(name == "opt" ? tiny_opt(21) : tiny_llama(22));
    // 20 prompts of 1..13 tokens: several blocks for every split, a partial last one.
    const auto prompts = make_prompts({5, 1, 9, 13, 2, 7, 4, 11, 3, 8, 6, 12, 1, 10, 5, 2, 9, 4, 7, 3},
                                      slot->model.spec.vocab_size, 99);
    slot->requests = greedy_requests(prompts, {6, 8, 7});
    const auto layers = load_all_layers(slot->model.spec, *slot->model.weights);
    for (const auto& r : slot->requests) {
      slot->expected.push_back(greedy_reference(slot->model.spec, layers, r.prompt, r.max_new_tokens));
    }
  }
  return *slot;
}

class PolicyTest : public ::testing::TestWithParam<std::tuple<PolicyCase, std::string, bool>> {};

TEST_P(PolicyTest, GreedyTokensEqualTheReference) {
  const auto& [c, family_name, emulated] = GetParam();
  const FamilyFixture& f = family(family_name);
  TempDir offload("offload");
  const NoFileWeights file_less(*f.model.weights);
  const model::WeightSource& source =
      c.copy_disk_weights ? static_cast<const model::WeightSource&>(file_less) : *f.model.weights;
  runtime::EngineOptions options = cpu_engine_options(offload.path);
  if (emulated) options.device.emulation = emulated_streams(c.name.size());
  std::vector<runtime::SequenceResult> results;
  {
    runtime::Engine engine(f.model.spec, source, c.policy, options, workload_of(f.requests));
    results = engine.generate(f.requests);
    EXPECT_EQ(engine.stats().sequences, static_cast<int64_t>(f.requests.size()));
  }
  ASSERT_EQ(results.size(), f.requests.size());
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].tokens, f.expected[r]) << "prompt " << r << " (length " << f.requests[r].prompt.size() << ")";
    EXPECT_EQ(results[r].finish_reason, "length");
  }
  EXPECT_TRUE(files_in(offload.path).empty());
}

INSTANTIATE_TEST_SUITE_P(Placements, PolicyTest,
                         ::testing::Combine(::testing::ValuesIn(policy_cases()), ::testing::Values("opt", "llama"),
                                            ::testing::Values(false, true)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" + std::get<1>(info.param) +
                                  (std::get<2>(info.param) ? "_emulated_streams" : "");
                         });

// The reference chains are not degenerate (otherwise equal tokens would prove little).
TEST(PolicyReference, ReferenceTokensVary) {
  for (const char* name : {"opt", "llama"}) {
    const FamilyFixture& f = family(name);
    std::set<int64_t> distinct;
    for (const auto& tokens : f.expected) distinct.insert(tokens.begin(), tokens.end());
    EXPECT_GT(distinct.size(), 10u) << name;
  }
}

// A prompt's sampled tokens do not depend on its block or batch: each sequence has
// its own random stream.
TEST(PolicySampling, SampledTokensDoNotDependOnPlacement) {
  const FamilyFixture& f = family("llama");
  auto requests = f.requests;
  for (auto& r : requests) {
    r.sampling.temperature = 0.8;
    r.sampling.top_k = 20;
    r.sampling.seed = 5;
  }
  TempDir offload("offload");
  using A = std::array<double, 6>;
  const auto a = engine_tokens(f.model.spec, *f.model.weights, make_policy(1, 1, A{100, 0, 100, 0, 100, 0}, false),
                               cpu_engine_options(offload.path), requests);
  const auto b = engine_tokens(f.model.spec, *f.model.weights, make_policy(8, 2, A{0, 50, 30, 40, 0, 50}, true),
                               cpu_engine_options(offload.path), requests);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, f.expected);  // sampling, not greedy
}

}  // namespace
}  // namespace tiergen::test
