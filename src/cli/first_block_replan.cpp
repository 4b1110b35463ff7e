#include "src/cli/first_block_replan.h"

#include <fmt/format.h>

#include <algorithm>

#include <spdlog/spdlog.h>

#include "kernels/cpu/small_matmul.h"
#include "src/cli/host_profile.h"

namespace tiergen::cli {

bool job_replans(bool placement_searched, bool no_replan, size_t sequences, const runtime::Policy& policy) {
  return placement_searched && !no_replan && sequences > static_cast<size_t>(policy.block_size());
}

policy::ReplanScope replan_scope(const runtime::DeviceContext& device, const runtime::Policy& policy) {
  const bool invariant_products = device.compute.is_cpu() && kernels::small_matmul_for_every_row_count() &&
                                  kernels::small_matmul_max_rows_setting() < 0;
  return invariant_products && policy.exact() ? policy::ReplanScope::AnyPlan : policy::ReplanScope::PlacementOnly;
}

policy::CalibrationRun first_block_run(const model::Spec& spec, const runtime::Policy& policy,
                                       const runtime::Stats& stats, const std::vector<runtime::SequenceRequest>& block,
                                       int dtype_bytes) {
  policy::CalibrationRun run;
  run.source = "the job's first block";
  run.spec = spec;
  run.policy = policy;
  run.dtype_bytes = dtype_bytes;
  run.workload = {1, 1, static_cast<int64_t>(block.size())};
  for (const auto& r : block) {
    run.workload.prompt_len = std::max<int64_t>(run.workload.prompt_len, static_cast<int64_t>(r.prompt.size()));
    run.workload.gen_len = std::max<int64_t>(run.workload.gen_len, r.max_new_tokens);
  }
  run.decode_layer_runs = static_cast<double>(spec.num_layers * stats.decode_passes);
  run.weight_load_seconds = stats.seconds(runtime::Task::LoadWeight, false);
  run.cpu_attention_seconds = stats.seconds(runtime::Task::CpuAttention, false);
  run.compute_seconds = stats.seconds(runtime::Task::Compute, false);
  return run;
}

policy::ReplanDecision decide_replan(const EngineFlags& flags, const model::Spec& spec,
                                     const runtime::EngineOptions& options, const runtime::Policy& current,
                                     const runtime::Workload& remaining, const policy::HardwareProfile& profile,
                                     const policy::CalibrationRun& first_block) {
  policy::ReplanInput in;
  in.current = current;
  in.remaining = remaining;
  in.profile = profile;
  in.first_block = first_block;
  in.scope = replan_scope(options.device, current);
  const runtime::Policy* keep_shape = in.scope == policy::ReplanScope::PlacementOnly ? &current : nullptr;
  return policy::replan_after_first_block(in, [&](const policy::HardwareProfile& hw) {
    return research_policy(flags, spec, remaining, options, hw, keep_shape);
  });
}

namespace {

// Runs the requests `part` names (indices into `requests`) on `engine`.
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

runtime::Workload workload_of(const std::vector<runtime::SequenceRequest>& requests, const std::vector<size_t>& part) {
  runtime::Workload w{1, 1, static_cast<int64_t>(part.size())};
  for (const size_t i : part) {
    w.prompt_len = std::max<int64_t>(w.prompt_len, static_cast<int64_t>(requests[i].prompt.size()));
    w.gen_len = std::max<int64_t>(w.gen_len, requests[i].max_new_tokens);
  }
  return w;
}

}  // namespace

ReplannedJob run_with_replan(const EngineFlags& flags, const model::Spec& spec, const runtime::EngineOptions& options,
                             const model::WeightSource& weights, const runtime::Workload& max_workload,
                             const std::vector<runtime::SequenceRequest>& requests,
                             std::optional<runtime::Engine>& engine, runtime::Policy& policy,
                             const runtime::ResultCallback& on_result, const runtime::TokenCallback& on_token) {
  ReplannedJob job;
  job.first_plan = policy;
  const std::vector<size_t> first = engine->first_block(requests);
  std::vector<bool> in_first(requests.size(), false);
  for (const size_t i : first) in_first[i] = true;
  std::vector<size_t> rest;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!in_first[i]) rest.push_back(i);
  }
  run_part(*engine, requests, first, on_result, on_token);
  job.sequences_on_last_plan = requests.size();
  try {
    std::vector<runtime::SequenceRequest> first_requests;
    for (const size_t i : first) first_requests.push_back(requests[i]);
    const policy::CalibrationRun measured =
        first_block_run(spec, policy, engine->stats(), first_requests, options.device.dtype_bytes());
    job.decision = decide_replan(flags, spec, options, policy, workload_of(requests, rest),
                                 profile_for_planning(flags.hw), measured);
  } catch (const std::exception& e) {
    job.decision = {};
    job.decision.policy = policy;
    job.decision.reason = fmt::format("plan kept: the re-plan after the first block failed: {}", e.what());
  }
  spdlog::info("{}", job.decision.reason);
  if (job.decision.replanned) {
    job.first_plan_stats = std::make_shared<runtime::Stats>();
    job.first_plan_stats->absorb(engine->stats());
    engine.reset();
    job.sequences_on_last_plan = rest.size();
    try {
      engine.emplace(spec, weights, job.decision.policy, options, max_workload);
      policy = job.decision.policy;
      spdlog::info("policy for the remaining {} sequences: {}", rest.size(), policy.describe());
    } catch (const std::exception& e) {
      spdlog::warn("the re-planned engine could not be built ({}); the remaining blocks keep the first plan", e.what());
      job.decision.replanned = false;
      job.decision.policy = policy;
      job.decision.reason += fmt::format("; not applied: {}", e.what());
      engine.reset();
      engine.emplace(spec, weights, policy, options, max_workload);
    }
  }
  run_part(*engine, requests, rest, on_result, on_token);
  return job;
}

nlohmann::json replan_json(const policy::ReplanDecision& d, const runtime::Policy& first_plan) {
  nlohmann::json terms = nlohmann::json::array();
  for (const auto& t : d.calibration.terms) {
    if (t.runs == 0 || !t.identifiable) continue;
    terms.push_back({{"term", t.name}, {"factor", t.factor}, {"measured_s", t.measured_seconds},
                     {"predicted_s", t.predicted_before}});
  }
  return {{"replanned", d.replanned},
          {"first_block_policy", runtime::policy_to_json(first_plan)},
          {"fitted_terms", terms},
          {"current_predicted_total", d.current_throughput},
          {"searched_predicted_total", d.searched_throughput},
          {"band", d.band},
          {"reason", d.reason}};
}

}  // namespace tiergen::cli
