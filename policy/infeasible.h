#pragma once
// Why no placement fits: the runtime's exact byte accounting (runtime::plan_memory) of
// the least demanding policy the search may choose (one sequence per batch, every home
// on disk, compression and CPU attention where allowed) against the budgets. Names the
// binding tier, the component that overflows it, and the shortfall.
#include <string>

#include "tiergen/model/spec.h"
#include "tiergen/runtime/placement.h"
#include "tiergen/runtime/policy.h"

namespace tiergen::policy {

struct InfeasibleInput {
  const model::Spec* spec = nullptr;
  runtime::Workload workload;
  runtime::Budgets budgets;
  int dtype_bytes = 2;
  bool allow_compression = false;
  runtime::CompressionConfig compression{true, 4, 64};
  bool allow_cpu_attention = true;
  bool allow_cpu_weight_compute = false;  // the search may multiply host weights at home
  double memory_cap_fraction = 0.8;  // the planner's share of each budget
  int64_t groups = 1;                // blocks resident at once (SearchOptions::groups)
};

// One paragraph: "<tier> tier: <component> needs X, budget Y (short by Z)" and what to change.
std::string explain_infeasible(const InfeasibleInput& input);

}  // namespace tiergen::policy
