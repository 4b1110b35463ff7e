#pragma once
// Re-planning a long job after its first block. A plan is only as good as the profile
// it was priced on, and a profile's probes time each operation alone; the first block
// of a job times them as the job runs them. After it, the profile is calibrated on the
// block's measured decode tasks (calibration.h), the current plan and a plan searched
// on the calibrated profile are both priced on it, and the remaining blocks switch to
// the new plan only when it is predicted faster by more than its plan class's error
// band (plan_class.h): a difference the model cannot tell apart is no reason to move;
// and only when the time it saves over the remaining blocks exceeds what placing the
// weights again costs.
//
// A re-plan must not change a single output token or score. Where every row's numbers
// are independent of the rows around it (the CPU's batch-invariant products on exact
// weights) any plan may follow; elsewhere (CUDA, --cpu-gemm, compressed tensors) only
// homes that no computation follows may move: the weights' (unless multiplied where they
// live) and the activations'. The block shape, the KV cache's split (attention runs per
// tier), attention and product locations, compute threads and compression stay, so that
// every product and attention call sees the same rows.
#include <functional>
#include <string>

#include "policy/calibration.h"
#include "policy/hardware_profile.h"
#include "tiergen/runtime/policy.h"

namespace tiergen::policy {

enum class ReplanScope {
  AnyPlan,        // rows are batch-invariant: block shape and compute locations may change
  PlacementOnly,  // only the homes of weights no product follows there, and of activations
};
const char* replan_scope_name(ReplanScope scope);

struct ReplanInput {
  runtime::Policy current;           // the plan the first block ran
  runtime::Workload remaining;       // the blocks still to run
  HardwareProfile profile;           // the profile the current plan was searched on
  CalibrationRun first_block;        // what the first block measured
  ReplanScope scope = ReplanScope::AnyPlan;
  // The remaining blocks' generated tokens, and what building the engine again costs
  // (the first placement of the weights, measured): a new plan must save more than that.
  // 0: not counted.
  double remaining_tokens = 0;
  double rebuild_seconds = 0;
};

struct ReplanDecision {
  bool replanned = false;
  runtime::Policy policy;            // the plan for the remaining blocks
  Calibration calibration;           // the profile fitted on the first block
  double current_throughput = 0;     // the current plan, priced on the calibrated profile
  double searched_throughput = 0;    // the plan searched on it (0: none searched)
  double band = 0;                   // the searched plan's class band
  std::string reason;                // one line for the log: what changed and why, or why not
};

// `plan_on` searches the remaining blocks' plan on a profile, with the same options and
// flag refinements the first plan had (it may throw InfeasibleError: then the current
// plan stays). Never throws for a measurement the model cannot be fitted on: the
// decision then keeps the current plan and says why.
ReplanDecision replan_after_first_block(const ReplanInput& input,
                                        const std::function<runtime::Policy(const HardwareProfile&)>& plan_on);

// Whether `candidate` differs from `current` only where `scope` allows; otherwise the
// first difference it may not make, named ("the gpu batch size 8 -> 16").
std::string replan_forbidden_change(const runtime::Policy& current, const runtime::Policy& candidate,
                                    ReplanScope scope);

}  // namespace tiergen::policy
