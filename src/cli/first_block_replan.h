#pragma once
// `generate` re-plans a long job after its first block (policy/replan.h): the first
// block runs alone on the searched plan, the profile is fitted to what it measured,
// and the remaining blocks run on the plan searched again on the fitted profile when
// that one is predicted to win by more than its plan class's band. The engine is then
// rebuilt with the new placement; every result is the same as without the re-plan.
#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <vector>

#include "policy/replan.h"
#include "src/cli/engine_flags.h"
#include "tiergen/runtime/engine.h"

namespace tiergen::cli {

// Whether a job re-plans: its plan was searched (not given), it runs in one process,
// it has more than one block, and --no-replan is not set.
bool job_replans(bool placement_searched, bool no_replan, size_t sequences, const runtime::Policy& policy);

// What a re-plan may change on this device (replan.h): any plan where rows are
// batch-invariant (the CPU's small-row products for every row count, exact weights and
// cache), else the tensors' homes only.
policy::ReplanScope replan_scope(const runtime::DeviceContext& device, const runtime::Policy& policy);

// The first block's decode as calibration reads a recorded run: the block's longest
// prompt and generation, its decode passes over every decoder layer, and the measured
// seconds of the tasks calibration fits.
policy::CalibrationRun first_block_run(const model::Spec& spec, const runtime::Policy& policy,
                                       const runtime::Stats& stats, const std::vector<runtime::SequenceRequest>& block,
                                       int dtype_bytes);

// The decision for the remaining `remaining` workload, searched as make_policy searched
// the first plan (research_policy) on `profile` fitted to `first_block`.
policy::ReplanDecision decide_replan(const EngineFlags& flags, const model::Spec& spec,
                                     const runtime::EngineOptions& options, const runtime::Policy& current,
                                     const runtime::Workload& remaining, const policy::HardwareProfile& profile,
                                     const policy::CalibrationRun& first_block);

// A job run so: the decision, the plan of its first block, and when the engine was
// rebuilt, the first block's stats (the engine's own are then the later blocks').
struct ReplannedJob {
  policy::ReplanDecision decision;
  runtime::Policy first_plan;
  std::shared_ptr<runtime::Stats> first_plan_stats;  // null: one engine ran every block
  size_t sequences_on_last_plan = 0;
};

// Runs `requests` on `engine` (built for `policy`): its first block, the decision, then
// the rest, on an engine rebuilt for the new plan when the decision re-plans (`policy`
// becomes it). A decision that fails, or a new engine that cannot be built, keeps the
// current plan and says so: the re-plan never fails a job.
ReplannedJob run_with_replan(const EngineFlags& flags, const model::Spec& spec, const runtime::EngineOptions& options,
                             const model::WeightSource& weights, const runtime::Workload& max_workload,
                             const std::vector<runtime::SequenceRequest>& requests,
                             std::optional<runtime::Engine>& engine, runtime::Policy& policy,
                             const runtime::ResultCallback& on_result, const runtime::TokenCallback& on_token);

// The decision as the --stats-json "replan" object.
nlohmann::json replan_json(const policy::ReplanDecision& decision, const runtime::Policy& first_plan);

}  // namespace tiergen::cli
