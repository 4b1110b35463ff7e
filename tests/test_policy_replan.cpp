// The re-plan after a job's first block (policy/replan.h): a first block that measured
// a link 10x slower than the profile said re-plans to the plan the true link gives; a
// block measured as predicted keeps its plan; a plan the scope forbids (a new block
// shape where products follow their batch), a search that finds nothing and a block
// with no decode keep the plan and say why; compression never changes.
#include <gtest/gtest.h>

#include "policy/cost_model.h"
#include "policy/plan_class.h"
#include "policy/replan.h"
#include "policy/search.h"
#include "tiergen/common/error.h"
#include "tiergen/model/presets.h"

namespace tiergen::policy {
namespace {

constexpr uint64_t kGiB = uint64_t(1) << 30;

HardwareProfile with_link_times(HardwareProfile hw, double factor) {
  hw.cpu_to_gpu *= factor;
  return hw;
}

// OPT-30B at 16 GiB of GPU memory on the h100-spr profile (`truth`), planned on the same
// profile with a weight link 10x too fast (`wrong`), CPU weight compute left out so that
// the weight link prices every streamed weight.
struct Job {
  model::Spec spec = model::resolve_spec("opt-30b");
  HardwareProfile truth = *builtin_profile("h100-spr");
  HardwareProfile wrong = with_link_times(truth, 10);
  runtime::Workload workload{512, 32, 1024};
  runtime::Budgets budgets{16 * kGiB, 200 * kGiB, 0};
  SearchOptions options;
  Job() { options.allow_cpu_weight_compute = false; }

  runtime::Policy search(const HardwareProfile& hw) const {
    return search_policy(spec, workload, budgets, hw, options).policy;
  }
  // The first block of `policy` as `truth` would have measured it (every task at its
  // predicted seconds, the embedding's and head's steps among them; the layer's compute
  // span holds CPU attention, as the runtime times it).
  CalibrationRun first_block(const HardwareProfile& truth, const runtime::Policy& policy) const {
    CalibrationRun r;
    r.source = "first block";
    r.spec = spec;
    r.policy = policy;
    r.workload = {workload.prompt_len, workload.gen_len, policy.block_size()};
    r.decode_steps = double(workload.gen_len - 1);
    const Prediction p = predict(spec, policy, r.workload, truth);
    const auto seconds = [&](Task t) { return task_seconds(p, t, false, r.spec.num_layers, r.decode_steps); };
    r.weight_load_seconds = seconds(Task::WeightLoad);
    r.cpu_attention_seconds = seconds(Task::CpuAttention);
    r.compute_seconds = seconds(Task::Compute) + r.cpu_attention_seconds;
    return r;
  }
  // The re-plan of `current`, searched on the wrong link, after a first block on the true one.
  ReplanInput wrong_link_input(const runtime::Policy& current) const {
    return {current, workload, wrong, first_block(truth, current)};
  }
  ReplanDecision replan(const runtime::Policy& current, const HardwareProfile& planned_on,
                        const HardwareProfile& truth, ReplanScope scope = ReplanScope::AnyPlan) const {
    ReplanInput in{current, workload, planned_on, first_block(truth, current), scope};
    return replan_after_first_block(in, [&](const HardwareProfile& hw) { return search(hw); });
  }
};

double factor_of(const ReplanDecision& d, const std::string& term) {
  for (const CalibrationTerm& t : d.calibration.terms) {
    if (t.name == term) return t.factor;
  }
  return 0;
}

TEST(Replan, ALinkSlowerThanProfiledReplansToThePlanOfTheTrueLink) {
  const Job job;
  const HardwareProfile& truth = job.truth;
  const HardwareProfile& wrong = job.wrong;
  const runtime::Policy current = job.search(wrong);
  ASSERT_GT(current.w_cpu_percent, 0) << "the plan on a fast link streams weights: " << current.describe();
  const runtime::Policy right = job.search(truth);
  ASSERT_NE(right.describe(), current.describe());

  const ReplanDecision d = job.replan(current, wrong, truth);
  EXPECT_NEAR(factor_of(d, "weight link"), 0.1, 0.001);
  ASSERT_TRUE(d.replanned) << d.reason;
  EXPECT_EQ(d.policy.describe(), right.describe());
  EXPECT_NE(d.reason.find("re-planned the remaining blocks"), std::string::npos) << d.reason;
  EXPECT_GT(d.searched_throughput, d.current_throughput * (1 + d.band));
  EXPECT_DOUBLE_EQ(d.band, plan_class_band(plan_class(d.policy)));
  // Priced on the truth, the new plan is the faster one.
  EXPECT_GT(predict(job.spec, d.policy, job.workload, truth).total_throughput,
            predict(job.spec, current, job.workload, truth).total_throughput);
}

// A new plan must save more than placing the weights again costs.
TEST(Replan, AWinSmallerThanTheRebuildKeepsThePlan) {
  const Job job;
  const runtime::Policy current = job.search(job.wrong);
  ReplanInput in = job.wrong_link_input(current);
  in.remaining_tokens = 1000.0 * 32;
  const auto search = [&](const HardwareProfile& hw) { return job.search(hw); };
  in.rebuild_seconds = 1;
  const ReplanDecision cheap = replan_after_first_block(in, search);
  ASSERT_TRUE(cheap.replanned) << cheap.reason;
  const double saved =
      in.remaining_tokens / cheap.current_throughput - in.remaining_tokens / cheap.searched_throughput;
  in.rebuild_seconds = saved * 1.01;
  const ReplanDecision costly = replan_after_first_block(in, search);
  EXPECT_FALSE(costly.replanned);
  EXPECT_NE(costly.reason.find("placing the weights again"), std::string::npos) << costly.reason;
}

TEST(Replan, AFirstBlockMeasuredAsPredictedKeepsThePlan) {
  const Job job;
  const HardwareProfile& truth = job.truth;
  const runtime::Policy current = job.search(truth);
  const ReplanDecision d = job.replan(current, truth, truth);
  EXPECT_FALSE(d.replanned) << d.reason;
  EXPECT_EQ(d.policy.describe(), current.describe());
  EXPECT_NE(d.reason.find("plan kept"), std::string::npos) << d.reason;
}

TEST(Replan, WhereProductsFollowTheirBatchOnlyTheHomesMayMove) {
  const Job job;
  const HardwareProfile& truth = job.truth;
  const HardwareProfile& wrong = job.wrong;
  const runtime::Policy current = job.search(wrong);
  ASSERT_NE(replan_forbidden_change(current, job.search(truth), ReplanScope::PlacementOnly), "");
  const ReplanDecision d = job.replan(current, wrong, truth, ReplanScope::PlacementOnly);
  EXPECT_FALSE(d.replanned) << d.reason;
  EXPECT_EQ(d.policy.describe(), current.describe());
  EXPECT_NE(d.reason.find("which would change results here"), std::string::npos) << d.reason;
}

TEST(Replan, ForbiddenChangesAreNamed) {
  runtime::Policy a;
  a.gpu_batch_size = 8;
  a.num_gpu_batches = 2;
  a.w_gpu_percent = 50;
  a.w_cpu_percent = 50;
  runtime::Policy homes = a;
  homes.w_gpu_percent = 20;
  homes.w_cpu_percent = 80;
  homes.act_gpu_percent = 0;
  homes.act_cpu_percent = 100;
  EXPECT_EQ(replan_forbidden_change(a, homes, ReplanScope::PlacementOnly), "");
  // Attention runs per tier of the cache; products of weights at home where they live.
  runtime::Policy cache = a;
  cache.cache_gpu_percent = 0;
  cache.cache_cpu_percent = 100;
  EXPECT_EQ(replan_forbidden_change(a, cache, ReplanScope::PlacementOnly), "the KV cache's split between tiers");
  EXPECT_EQ(replan_forbidden_change(a, cache, ReplanScope::AnyPlan), "");
  runtime::Policy at_home = a;
  at_home.cpu_weight_compute_prefill = at_home.cpu_weight_compute_decode = true;
  runtime::Policy at_home_moved = at_home;
  at_home_moved.w_gpu_percent = 20;
  at_home_moved.w_cpu_percent = 80;
  EXPECT_EQ(replan_forbidden_change(at_home, at_home_moved, ReplanScope::PlacementOnly),
            "the split of weights multiplied where they live");
  runtime::Policy threads = a;
  threads.threads.compute_intra_op = 3;
  EXPECT_EQ(replan_forbidden_change(a, threads, ReplanScope::PlacementOnly), "the compute threads 0 -> 3");
  EXPECT_EQ(replan_forbidden_change(a, threads, ReplanScope::AnyPlan), "");
  runtime::Policy shape = homes;
  shape.gpu_batch_size = 16;
  EXPECT_EQ(replan_forbidden_change(a, shape, ReplanScope::PlacementOnly), "the gpu batch size 8 -> 16");
  EXPECT_EQ(replan_forbidden_change(a, shape, ReplanScope::AnyPlan), "");
  runtime::Policy batches = a;
  batches.num_gpu_batches = 4;
  EXPECT_EQ(replan_forbidden_change(a, batches, ReplanScope::PlacementOnly), "the number of gpu batches 2 -> 4");
  runtime::Policy attention = a;
  attention.cpu_cache_compute = true;
  EXPECT_EQ(replan_forbidden_change(a, attention, ReplanScope::PlacementOnly), "where attention is computed");
  runtime::Policy products = a;
  products.cpu_weight_compute_decode = true;
  EXPECT_EQ(replan_forbidden_change(a, products, ReplanScope::PlacementOnly), "where the weights' products run");
  // Lossy choices are the user's, in every scope.
  runtime::Policy compressed = a;
  compressed.compress_weight.enabled = true;
  EXPECT_EQ(replan_forbidden_change(a, compressed, ReplanScope::AnyPlan), "the weights' compression");
  runtime::Policy cache_bits = a;
  cache_bits.compress_cache.enabled = true;
  runtime::Policy other_bits = cache_bits;
  other_bits.compress_cache.bits = 8;
  EXPECT_EQ(replan_forbidden_change(cache_bits, other_bits, ReplanScope::AnyPlan), "the KV cache's compression");
}

TEST(Replan, NothingToFitOrNothingThatFitsKeepsThePlan) {
  const Job job;
  const runtime::Policy current = job.search(job.wrong);

  ReplanInput no_decode = job.wrong_link_input(current);
  no_decode.first_block.decode_steps = 0;
  no_decode.first_block.weight_load_seconds = no_decode.first_block.cpu_attention_seconds =
      no_decode.first_block.compute_seconds = 0;
  int searches = 0;
  const auto search = [&](const HardwareProfile& hw) {
    ++searches;
    return job.search(hw);
  };
  ReplanDecision d = replan_after_first_block(no_decode, search);
  EXPECT_FALSE(d.replanned);
  EXPECT_EQ(searches, 0);
  EXPECT_NE(d.reason.find("measured no decode task"), std::string::npos) << d.reason;

  const ReplanInput measured = job.wrong_link_input(current);
  d = replan_after_first_block(measured, [](const HardwareProfile&) -> runtime::Policy {
    throw InfeasibleError("nothing fits");
  });
  EXPECT_FALSE(d.replanned);
  EXPECT_EQ(d.policy.describe(), current.describe());
  EXPECT_NE(d.reason.find("no plan fits"), std::string::npos) << d.reason;
}

}  // namespace
}  // namespace tiergen::policy
