#pragma once
// From the LP's fractions to a policy the runtime accepts: percentages rounded, then
// repaired against the exact byte accounting (runtime::plan_memory) by moving tensors
// one step down the hierarchy (gpu → cpu → disk) until every tier fits its budget.
#include <optional>

#include "policy/linear.h"
#include "policy/model_sizes.h"
#include "tiergen/runtime/placement.h"
#include "tiergen/runtime/policy.h"

namespace tiergen::policy {

// `shape` carries batch sizes, compression and attention placement; its percentages
// are replaced. Returns nothing when no repair fits the budgets.
std::optional<runtime::Policy> round_to_executable(const ModelSizes& sizes, const runtime::Policy& shape,
                                                   const Fractions& fractions, const runtime::Workload& workload,
                                                   const runtime::Budgets& budgets);

}  // namespace tiergen::policy
