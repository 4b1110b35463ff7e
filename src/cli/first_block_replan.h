#pragma once
// `generate` re-plans a long job after its first block (policy/replan.h): the first
// block runs alone on the searched plan, the profile is fitted to what it measured,
// and the remaining blocks run on the plan searched again on the fitted profile when
// that one is predicted to win by more than its plan class's band and to save more
// than placing the weights again costs. The engine is then rebuilt with the new
// placement. Results are those of the job run whole: the remaining blocks keep the
// whole job's gpu batches (Engine::generate_blocks) unless the plan changed the block
// shape, which only a batch-invariant scope allows.
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <optional>
#include <vector>

#include "policy/replan.h"
#include "src/cli/engine_flags.h"
#include "tiergen/runtime/engine.h"

namespace tiergen::cli {

// What a re-plan may change on this device (replan.h): any plan where rows are
// batch-invariant (the CPU's small-row products for every row count, exact weights and
// cache), else the tensors' homes only.
policy::ReplanScope replan_scope(const runtime::DeviceContext& device, const runtime::Policy& policy);

// Whether a job re-plans: its plan was searched (not given), it runs in one process,
// it has more than one block, --no-replan is not set, and running its first block on
// its own computes every row as the whole job would. Where products follow their batch
// that excludes CPU weight compute in one phase only: run whole, the job refills the
// first block's finished gpu batches while its other batches decode, and such a mixed
// pass takes the prefill's weights for both (block_runner.h), loaded or at home; run
// alone, the first block's decode would take the decode's.
bool job_replans(bool placement_searched, bool no_replan, size_t sequences, const runtime::Policy& policy,
                 policy::ReplanScope scope);

// The first block's decode as calibration reads a recorded run: the block's mean
// prompt and longest generation, its decode passes (each a step of every layer, the
// embedding and head included, over every gpu batch), and the
// measured seconds of the tasks calibration fits, its compute and CPU attention scaled
// to a full block where sequences ended early (the cost model prices full blocks).
policy::CalibrationRun first_block_run(const model::Spec& spec, const runtime::Policy& policy,
                                       const runtime::Stats& stats, const std::vector<runtime::SequenceRequest>& block,
                                       const std::string& dtype);

// What the job needs to re-plan beyond its requests and engine.
struct ReplanContext {
  const EngineFlags& flags;
  const model::Spec& spec;
  const runtime::EngineOptions& options;
  const model::WeightSource& weights;
  const policy::HardwareProfile& planned_on;  // the profile the first plan was searched on
  runtime::Workload max_workload;             // the whole job's, as the first engine was built for
  double placement_seconds = 0;               // how long the engine took to place the weights
  // Whole runs of the same requests after this one, which the chosen plan runs too
  // (bench's measured runs): the savings and the searched workload count them.
  int64_t later_runs = 0;
  // What to do when neither plan's engine can be built after the first block.
  std::string when_unrecoverable = "the finished results are kept: rerun the job with --resume";
};

// A job run so: the decision, the plan of its first block, and when the engine was
// rebuilt, the first block's stats (the engine's own are then the later blocks').
struct ReplannedJob {
  policy::ReplanDecision decision;
  runtime::Policy first_plan;
  // The first engine's stats outlive it (Stats holds a mutex: neither copied nor moved).
  std::unique_ptr<runtime::Stats> first_plan_stats;  // null: one engine ran every block
  size_t sequences_on_last_plan = 0;
  int64_t first_block_decode_passes = 0;  // what the fit read: the first block's passes
};

// Runs `requests` on `engine` (built for `policy`): its first block, the decision, then
// the rest, on an engine rebuilt for the new plan when the decision re-plans (`policy`
// becomes it). A decision that fails, or a new engine that cannot be built, keeps the
// current plan and says so.
ReplannedJob run_with_replan(const ReplanContext& context, const std::vector<runtime::SequenceRequest>& requests,
                             std::optional<runtime::Engine>& engine, runtime::Policy& policy,
                             const runtime::ResultCallback& on_result, const runtime::TokenCallback& on_token);

// The decision as the --stats-json "replan" object.
nlohmann::json replan_json(const ReplannedJob& job);

}  // namespace tiergen::cli
