#include "src/cli/first_block_replan.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "kernels/cpu/small_matmul.h"
#include "tiergen/common/error.h"
#include "tiergen/common/torch_compat.h"

namespace tiergen::cli {

policy::ReplanScope replan_scope(const runtime::DeviceContext& device, const runtime::Policy& policy) {
  const bool invariant_products = device.compute.is_cpu() && kernels::small_matmul_for_every_row_count() &&
                                  kernels::small_matmul_max_rows_setting() < 0;
  return invariant_products && policy.exact() ? policy::ReplanScope::AnyPlan : policy::ReplanScope::PlacementOnly;
}

bool job_replans(bool placement_searched, bool no_replan, size_t sequences, const runtime::Policy& policy,
                 policy::ReplanScope scope) {
  if (!placement_searched || no_replan || sequences <= static_cast<size_t>(policy.block_size())) return false;
  return scope == policy::ReplanScope::AnyPlan ||
         policy.cpu_weight_compute_prefill == policy.cpu_weight_compute_decode;
}

policy::CalibrationRun first_block_run(const model::Spec& spec, const runtime::Policy& policy,
                                       const runtime::Stats& stats, const std::vector<runtime::SequenceRequest>& block,
                                       const std::string& dtype) {
  policy::CalibrationRun run;
  run.source = "the job's first block";
  run.spec = spec;
  run.policy = policy;
  run.dtype = dtype;
  run.dtype_bytes = dtype == "float32" ? 4 : 2;
  double prompt_tokens = 0;
  int64_t longest_generation = 1;
  for (const auto& r : block) {
    prompt_tokens += static_cast<double>(r.prompt.size());
    longest_generation = std::max(longest_generation, r.max_new_tokens);
  }
  const auto sequences = static_cast<int64_t>(block.size());
  // The mean prompt: a decode step's attention reads every sequence's own cache.
  const auto mean_prompt = static_cast<int64_t>(std::ceil(prompt_tokens / std::max<double>(1, block.size())));
  run.workload = {std::max<int64_t>(1, mean_prompt), longest_generation, sequences};
  run.decode_steps = static_cast<double>(stats.decode_passes);
  // Rows that decoded, of the block's rows over its decode passes: sequences that ended
  // early leave their rows, and the products and attention time with them.
  const double full_rows = static_cast<double>(stats.decode_passes) * static_cast<double>(sequences);
  const double live = full_rows > 0 ? std::clamp(static_cast<double>(stats.decode_tokens) / full_rows, 1e-3, 1.0) : 1;
  run.weight_load_seconds = stats.seconds(runtime::Task::LoadWeight, false);
  run.cpu_attention_seconds = stats.seconds(runtime::Task::CpuAttention, false) / live;
  run.compute_seconds = stats.seconds(runtime::Task::Compute, false) / live;
  return run;
}

namespace {

// Runs the requests `part` names (indices into `requests`) as a job of their own.
void run_part(runtime::Engine& engine, const std::vector<runtime::SequenceRequest>& requests,
              const std::vector<size_t>& part, const runtime::ResultCallback& on_result,
              const runtime::TokenCallback& on_token) {
  std::vector<runtime::SequenceRequest> subset;
  subset.reserve(part.size());
  for (const size_t i : part) subset.push_back(requests[i]);
  runtime::TokenCallback mapped_token;
  if (on_token) mapped_token = [&](size_t k, int64_t token) { on_token(part[k], token); };
  engine.generate(subset, [&](size_t k, const runtime::SequenceResult& r) { on_result(part[k], r); }, mapped_token);
}

// --trace holds the new plan's blocks; the first plan's block goes beside it, with
// ".first-block" before the extension. Never fails the job: a trace is not a result.
void write_first_block_trace(const runtime::Engine& engine, const std::string& trace_path) {
  const std::filesystem::path trace(trace_path);
  const std::filesystem::path first =
      trace.parent_path() / (trace.stem().string() + ".first-block" + trace.extension().string());
  try {
    engine.write_trace(first.string());
    spdlog::info("trace of the first block's tasks (the first plan): {}", first.string());
  } catch (const std::exception& e) {
    spdlog::warn("the first block's trace could not be written to {}: {}", first.string(), e.what());
  }
}

// The decision after the first block (`first`), for the remaining requests (`rest`).
policy::ReplanDecision decide_replan(const ReplanContext& c, const std::vector<runtime::SequenceRequest>& requests,
                                     const std::vector<size_t>& first, const std::vector<size_t>& rest,
                                     const runtime::Policy& current, const runtime::Stats& first_block_stats) {
  std::vector<runtime::SequenceRequest> first_requests;
  for (const size_t i : first) first_requests.push_back(requests[i]);
  policy::ReplanInput in;
  in.current = current;
  // Later runs of the whole job outweigh this run's rest: the plan is then searched for
  // the whole job, as those runs are.
  const size_t planned_sequences = c.later_runs > 0 ? requests.size() : rest.size();
  in.remaining = {c.max_workload.prompt_len, c.max_workload.gen_len, static_cast<int64_t>(planned_sequences)};
  in.profile = c.planned_on;
  in.first_block = first_block_run(c.spec, current, first_block_stats, first_requests,
                                   compat::dtype_name(c.options.device.dtype));
  in.scope = replan_scope(c.options.device, current);
  for (const size_t i : rest) in.remaining_tokens += static_cast<double>(requests[i].max_new_tokens);
  for (const auto& r : requests) in.remaining_tokens += static_cast<double>(c.later_runs * r.max_new_tokens);
  in.rebuild_seconds = c.placement_seconds;
  const bool placement_only = in.scope == policy::ReplanScope::PlacementOnly;
  return policy::replan_after_first_block(in, [&](const policy::HardwareProfile& hw) {
    return search_policy_again(c.flags, c.spec, in.remaining, c.options, hw, current, placement_only);
  });
}

}  // namespace

ReplannedJob run_with_replan(const ReplanContext& c, const std::vector<runtime::SequenceRequest>& requests,
                             std::optional<runtime::Engine>& engine, runtime::Policy& policy,
                             const runtime::ResultCallback& on_result, const runtime::TokenCallback& on_token) {
  ReplannedJob job;
  job.first_plan = policy;
  job.sequences_on_last_plan = requests.size();
  // The whole job's blocks: the first runs now, the rest as they would have run.
  const std::vector<std::vector<size_t>> blocks = engine->blocks(requests);
  const std::vector<std::vector<size_t>> rest_blocks(blocks.begin() + 1, blocks.end());
  std::vector<size_t> rest;
  for (const auto& block : rest_blocks) rest.insert(rest.end(), block.begin(), block.end());
  engine->generate_blocks(requests, {blocks.front()}, requests.size(), on_result, on_token);
  job.first_block_decode_passes = engine->stats().decode_passes;
  try {
    job.decision = decide_replan(c, requests, blocks.front(), rest, policy, engine->stats());
  } catch (const std::exception& e) {
    job.decision = {};
    job.decision.policy = policy;
    job.decision.reason = fmt::format("plan kept: the re-plan after the first block failed: {}", e.what());
  }
  spdlog::info("{}", job.decision.reason);
  if (job.decision.replanned) {
    job.first_plan_stats = std::make_unique<runtime::Stats>();
    job.first_plan_stats->absorb(engine->stats());
    job.sequences_on_last_plan = rest.size();
    if (!c.flags.trace.empty()) write_first_block_trace(*engine, c.flags.trace);
    engine.reset();  // its weights' memory goes before the new placement takes any
    try {
      engine.emplace(c.spec, c.weights, job.decision.policy, c.options, c.max_workload);
      policy = job.decision.policy;
      spdlog::info("policy for the remaining {} sequences: {}", rest.size(), policy.describe());
    } catch (const std::exception& e) {
      spdlog::warn("the re-planned engine could not be built ({}); the remaining blocks keep the first plan", e.what());
      job.decision.replanned = false;
      job.decision.policy = policy;
      job.decision.reason = fmt::format("plan kept: the re-planned engine could not be built: {}", e.what());
      try {
        engine.emplace(c.spec, c.weights, policy, c.options, c.max_workload);
      } catch (const std::exception& again) {
        throw Error(fmt::format("after the first block, the engine could not be built again for the first plan "
                                "either: {}; {}", again.what(), c.when_unrecoverable));
      }
    }
  }
  const bool same_block_shape = policy.gpu_batch_size == job.first_plan.gpu_batch_size &&
                                policy.num_gpu_batches == job.first_plan.num_gpu_batches;
  if (same_block_shape) {
    engine->generate_blocks(requests, rest_blocks, requests.size(), on_result, on_token);
  } else {
    run_part(*engine, requests, rest, on_result, on_token);  // a batch-invariant scope only
  }
  return job;
}

nlohmann::json replan_json(const ReplannedJob& job) {
  const policy::ReplanDecision& d = job.decision;
  nlohmann::json terms = nlohmann::json::array();
  for (const auto& t : d.calibration.terms) {
    if (t.runs == 0 || !t.identifiable) continue;
    terms.push_back({{"term", t.name}, {"factor", t.factor}, {"measured_s", t.measured_seconds},
                     {"predicted_s", t.predicted_before}});
  }
  return {{"replanned", d.replanned},
          {"first_block_policy", runtime::policy_to_json(job.first_plan)},
          {"first_block_decode_passes", job.first_block_decode_passes},
          {"fitted_terms", terms},
          {"current_predicted_total", d.current_throughput},
          {"searched_predicted_total", d.searched_throughput},
          {"band", d.band},
          {"reason", d.reason}};
}

}  // namespace tiergen::cli
