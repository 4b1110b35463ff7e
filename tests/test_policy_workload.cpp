// Plans fit the job: the search never builds a block larger than the job, a partial
// block runs at its own size with the same tokens, the searched plan gives the tokens of
// a fixed one, compression is chosen only when allowed, the thread search never
// returns 0 threads, and an infeasible request names the binding tier.
#include <gtest/gtest.h>

#include "policy/hardware_profile.h"
#include "policy/profiler.h"
#include "policy/search.h"
#include "policy/thread_search.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_model.h"
#include "tiergen/common/bytes.h"
#include "tiergen/common/error.h"
#include "tiergen/model/presets.h"
#include "tiergen/runtime/engine.h"

namespace tiergen::test {
namespace {

using policy::CompressionMode;
using policy::SearchOptions;

policy::HardwareProfile t4() { return *policy::builtin_profile("t4-flexgen"); }

runtime::Budgets budgets(const std::string& gpu, const std::string& cpu, const std::string& disk) {
  return {parse_bytes(gpu, "gpu"), parse_bytes(cpu, "cpu"), parse_bytes(disk, "disk")};
}

TEST(PolicyWorkload, BlockNeverExceedsTheJob) {
  const auto spec = model::resolve_spec("opt-125m");
  for (int64_t n : {1, 3, 4, 7, 100}) {
    const runtime::Workload w{16, 32, n};
    const auto r = policy::search_policy(spec, w, budgets("5GiB", "18GiB", "50GiB"), t4());
    EXPECT_LE(r.policy.block_size(), n) << n << " sequences: " << r.policy.describe();
    EXPECT_GE(r.policy.block_size(), 1);
  }
  // A 70B model with few prompts: the block is the job, not 1792 sequences.
  const auto llama = model::resolve_spec("llama-2-70b");
  const auto r = policy::search_policy(llama, {256, 64, 8}, budgets("24GiB", "200GiB", "1000GiB"), t4());
  EXPECT_LE(r.policy.block_size(), 8);
}

TEST(PolicyWorkload, UnknownJobSizeKeepsLargeBlocks) {
  const auto spec = model::resolve_spec("opt-6.7b");
  const auto b = budgets("15GiB", "200GiB", "1500GiB");
  const auto unknown = policy::search_policy(spec, {512, 32, 0}, b, t4());
  EXPECT_GT(unknown.policy.block_size(), 4);
  EXPECT_LE(policy::search_policy(spec, {512, 32, 4}, b, t4()).policy.block_size(), 4);
}

TEST(PolicyWorkload, FittedPolicyHoldsTheBlockAndIsNeverLarger) {
  runtime::Policy p;
  p.gpu_batch_size = 32;
  p.num_gpu_batches = 20;
  p.w_gpu_percent = 40;
  p.w_cpu_percent = 60;
  for (int64_t n : {1, 4, 31, 32, 33, 100, 639, 640, 700}) {
    const runtime::Policy f = p.fitted_to(n);
    EXPECT_LE(f.gpu_batch_size, p.gpu_batch_size) << n;
    EXPECT_LE(f.num_gpu_batches, p.num_gpu_batches) << n;
    if (n >= p.block_size()) {
      EXPECT_EQ(f.block_size(), p.block_size()) << n;
      continue;
    }
    EXPECT_GE(f.block_size(), n) << n;
    EXPECT_LT(f.block_size() - n, f.num_gpu_batches) << n << ": padding beyond one row per batch";
    EXPECT_EQ(f.w_gpu_percent, 40);
    EXPECT_EQ(f.w_cpu_percent, 60);
  }
  EXPECT_EQ(p.fitted_to(4).gpu_batch_size, 4);
  EXPECT_EQ(p.fitted_to(4).num_gpu_batches, 1);
}

// 5 prompts through a 4 x 3 block (12): the only block is partial and runs as 5 x 1,
// whose KV cache and activations are far smaller than the full block's.
TEST(PolicyWorkload, PartialBlockRunsAtItsOwnSizeWithTheSameTokens) {
  const TinyModel m = make_tiny_model(tiny_opt(41));
  const auto requests = greedy_requests(make_prompts({5, 9, 3, 12, 7}, m.spec.vocab_size, 7), {6, 5});
  TempDir offload("offload");
  using A = std::array<double, 6>;
  const runtime::Policy big = make_policy(4, 3, A{100, 0, 0, 100, 0, 100}, false);
  const runtime::Policy exact = make_policy(1, 1, A{100, 0, 100, 0, 100, 0}, false);
  runtime::Engine engine(m.spec, *m.weights, big, cpu_engine_options(offload.path), workload_of(requests));
  const auto tokens = tokens_of(engine.generate(requests));
  EXPECT_EQ(tokens, engine_tokens(m.spec, *m.weights, exact, cpu_engine_options(offload.path), requests));
  const runtime::Workload w = workload_of(requests);
  const auto full = runtime::plan_memory(m.spec, big, w, 4);
  const auto fitted = runtime::plan_memory(m.spec, big.fitted_to(5), w, 4);
  ASSERT_LT(fitted.kv_cache[runtime::Tier::Cpu], full.kv_cache[runtime::Tier::Cpu]);
  // The cpu tier holds the KV cache and the activations: its peak is the fitted block's.
  EXPECT_LE(engine.stats().peak_bytes[runtime::Tier::Cpu], fitted.total()[runtime::Tier::Cpu]);
}

TEST(PolicyWorkload, SearchedPlanGivesTheTokensOfAFixedOne) {
  const TinyModel m = make_tiny_model(tiny_llama(42));
  const auto requests = greedy_requests(make_prompts({4, 11, 6, 2, 9, 5, 13}, m.spec.vocab_size, 8), {7, 4, 6});
  runtime::Workload w = workload_of(requests);
  w.num_sequences = static_cast<int64_t>(requests.size());
  TempDir offload("offload");
  const auto options = cpu_engine_options(offload.path, 64ull << 20);
  SearchOptions search;
  search.dtype_bytes = 4;
  const auto searched = policy::search_policy(m.spec, w, options.budgets, t4(), search);
  EXPECT_LE(searched.policy.block_size(), w.num_sequences);
  EXPECT_TRUE(searched.policy.exact());
  using A = std::array<double, 6>;
  EXPECT_EQ(engine_tokens(m.spec, *m.weights, searched.policy, options, requests),
            engine_tokens(m.spec, *m.weights, make_policy(2, 1, A{100, 0, 100, 0, 100, 0}, false), options, requests));
}

// The case where compression wins on FlexGen's T4 (opt-175b, weights mostly on disk).
TEST(PolicyWorkload, CompressionOnlyWhenAllowed) {
  const auto spec = model::resolve_spec("opt-175b");
  const runtime::Workload w{512, 32, 0};
  const auto b = budgets("15GiB", "200GiB", "1500GiB");
  EXPECT_EQ(SearchOptions{}.compression, CompressionMode::Off);
  const auto by_default = policy::search_policy(spec, w, b, t4());
  EXPECT_TRUE(by_default.policy.exact());
  EXPECT_NE(by_default.policy.exactness().find("exact"), std::string::npos);
  SearchOptions allowed;
  allowed.compression = CompressionMode::Auto;
  const auto lossy = policy::search_policy(spec, w, b, t4(), allowed);
  ASSERT_FALSE(lossy.policy.exact());
  EXPECT_NE(lossy.policy.exactness().find("LOSSY"), std::string::npos);
}

TEST(PolicyWorkload, ThreadSearchNeverReturnsZeroThreads) {
  for (int cores : {1, 2, 4, 5}) {
    policy::HardwareProfile hw;
    hw.cpu_threads = cores;
    policy::ThreadSearchInput in;
    in.max_threads = cores;
    in.compute_ops = {{"qk", 1.0, {}}, {"pv", 1.0, {0}}};
    in.io_bytes = {1e8, 1e6, 1e6, 1e6, 1e6};
    in.io_bandwidth_per_thread = 1e9;
    runtime::Policy p;
    policy::apply_threads(policy::choose_threads(in, hw), p);
    EXPECT_GE(p.threads.compute_intra_op, 1) << cores;
    EXPECT_LE(p.threads.compute_intra_op, cores) << cores;
    EXPECT_GE(p.threads.compute_inter_op, 1) << cores;
    EXPECT_GE(p.threads.io_threads, 5) << cores;
  }
  // Through the whole search, on a 2-core profile.
  auto hw = t4();
  hw.cpu_threads = 2;
  hw.cpu_thread_scaling = {{1, 1.0}, {2, 1.7}};
  const auto r = policy::search_policy(model::resolve_spec("opt-125m"), {16, 32, 4},
                                       budgets("1GiB", "4GiB", "10GiB"), hw);
  EXPECT_GE(r.policy.threads.compute_intra_op, 1);
  EXPECT_GE(r.policy.threads.io_threads, 1);
}

// The engine's CPU attention is one fused kernel on the compute intra-op threads.
// With decode bound by it (the 16-core H100 host's plan for opt-6.7b: 64 sequences,
// 85% of the cache on the cpu), the thread search gives attention most cores and no
// inter-op split; LM-Offload's unfused graph gave it 2 of 16 and the run's attention
// took 7.6x the prediction.
// The T4 profile on the H100 host's 16 cores (its measured thread scaling).
policy::HardwareProfile sixteen_core_host() {
  auto hw = t4();
  hw.cpu_threads = 16;
  hw.cpu_thread_scaling = {{1, 1.0}, {16, 7.7}};
  return hw;
}

TEST(PolicyWorkload, FusedCpuAttentionGetsMostCores) {
  const auto hw = sixteen_core_host();
  const model::Spec spec = model::resolve_spec("opt-6.7b");
  using A = std::array<double, 6>;
  const runtime::Policy p = make_policy(64, 1, A{40, 60, 15, 85, 0, 100}, true);
  const runtime::Workload w{512, 32, 64};
  const auto in = policy::thread_input_for(spec, p, w, policy::predict(spec, p, w, hw), hw);
  const auto choice = policy::choose_threads(in, hw);
  ASSERT_TRUE(choice.found);
  EXPECT_EQ(choice.compute_inter_op, 1);
  EXPECT_GE(choice.compute_intra_op, 8);
  // The chosen threads run attention within a small factor of the all-core rate.
  const double attention = policy::predict(spec, p, w, hw).decode.tasks[static_cast<int>(policy::Task::CpuAttention)];
  EXPECT_LT(choice.layer_seconds, 2.5 * std::max(attention, in.other_compute_seconds));

  // A policy that runs attention on fewer intra-op threads is predicted at that many.
  runtime::Policy two = p;
  two.threads.compute_intra_op = 2;
  const double at_two = policy::predict(spec, two, w, hw).decode.tasks[static_cast<int>(policy::Task::CpuAttention)];
  EXPECT_NEAR(at_two / attention, hw.thread_speedup(16) / hw.thread_speedup(2), 1e-9);

  // On a cpu-only host the layer's matmuls share those threads: a matmul-bound plan
  // without cpu attention keeps every core but the five load/store workers.
  auto host = hw;
  host.gpu_is_host = true;
  const runtime::Policy gpu_tier = make_policy(8, 1, A{100, 0, 100, 0, 100, 0}, false);
  const auto host_in = policy::thread_input_for(spec, gpu_tier, w, policy::predict(spec, gpu_tier, w, host), host);
  EXPECT_EQ(host_in.other_compute_seconds, 0.0);
  EXPECT_EQ(policy::choose_threads(host_in, host).compute_intra_op, 16 - policy::kNumIoTasks);
}

// Everything on the GPU and no CPU attention: the search has no CPU operator to trade
// threads for, and leaves the host its cores (the search once gave such a plan 1
// intra-op thread, which made the weights' placement single-threaded). Its workers only
// queue device copies: one core stays theirs, not five.
TEST(PolicyWorkload, APlanWithoutCpuComputeKeepsTheCoresTheWorkersLeave) {
  const auto hw = sixteen_core_host();
  const model::Spec spec = model::resolve_spec("opt-6.7b");
  const runtime::Workload w{512, 32, 16};
  using A = std::array<double, 6>;
  // The cpu-attention flag alone does nothing with the cache on the GPU (the H100
  // host's auto plan for opt-6.7b at 24 GiB had it set).
  for (bool cpu_attention_flag : {false, true}) {
    const runtime::Policy all_gpu = make_policy(16, 1, A{100, 0, 100, 0, 100, 0}, cpu_attention_flag);
    const auto in = policy::thread_input_for(spec, all_gpu, w, policy::predict(spec, all_gpu, w, hw), hw);
    EXPECT_TRUE(in.compute_ops.empty()) << cpu_attention_flag;
    EXPECT_EQ(policy::choose_threads(in, hw).compute_intra_op, 15) << cpu_attention_flag;
  }
}

TEST(PolicyWorkload, ImplausibleThreadScalingIsRefused) {
  EXPECT_NE(policy::implausible_thread_scaling({{1, 1.0}, {2, 0.04}}), "");
  EXPECT_NE(policy::implausible_thread_scaling({{1, 1.0}, {2, 9.0}}), "");
  EXPECT_EQ(policy::implausible_thread_scaling({{1, 1.0}, {2, 1.8}}), "");
  EXPECT_EQ(policy::implausible_thread_scaling({{1, 1.0}, {2, 0.9}}), "");
}

std::string infeasible_message(const std::string& model, const runtime::Workload& w, const runtime::Budgets& b,
                               int dtype_bytes) {
  SearchOptions o;
  o.dtype_bytes = dtype_bytes;
  try {
    policy::search_policy(model::resolve_spec(model), w, b, t4(), o);
  } catch (const InfeasibleError& e) {
    return e.what();
  }
  return "";
}

TEST(PolicyWorkload, InfeasibleNamesTheBindingTierAndComponent) {
  // Plenty of cpu and disk for opt-125m's weights, but a gpu tier too small for one
  // layer's working memory.
  const std::string gpu = infeasible_message("opt-125m", {16, 32, 4}, budgets("1MiB", "8GiB", "8GiB"), 4);
  ASSERT_NE(gpu, "");
  EXPECT_NE(gpu.find("gpu tier: working memory"), std::string::npos) << gpu;
  EXPECT_NE(gpu.find("short by"), std::string::npos) << gpu;
  // opt-175b at 4 GiB of gpu: two layers in flight (4.8 GB) already exceed the gpu tier.
  const std::string layer = infeasible_message("opt-175b", {512, 32, 0}, budgets("4GiB", "32GiB", "64GiB"), 2);
  EXPECT_NE(layer.find("gpu tier: working memory"), std::string::npos) << layer;
  // With room for the working memory, 325 GB of weights in 112 GiB of tiers: the homes do not fit.
  const std::string homes = infeasible_message("opt-175b", {512, 32, 0}, budgets("16GiB", "32GiB", "64GiB"), 2);
  ASSERT_NE(homes, "");
  EXPECT_NE(homes.find("all tiers together"), std::string::npos) << homes;
  EXPECT_NE(homes.find("largest part: weights"), std::string::npos) << homes;
}

}  // namespace
}  // namespace tiergen::test
