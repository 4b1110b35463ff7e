#pragma once
// Peak memory per tier as linear functions of the placement fractions: FlexGen's
// appendix A.3 constraints (home bytes of weights, KV cache and activations plus the
// working memory of streaming and compute), with the sizes and buffer counts of the
// runtime's own accounting (runtime::plan_memory) so that the LP's fractional answer
// lands close to what the exact check accepts after rounding.
#include <array>

#include "policy/linear.h"
#include "policy/model_sizes.h"
#include "tiergen/runtime/placement.h"
#include "tiergen/runtime/policy.h"

namespace tiergen::policy {

struct MemoryModel {
  // Indexed by runtime::Tier (gpu, cpu, disk); bytes.
  std::array<Linear, runtime::kNumTiers> peak;
  const Linear& of(runtime::Tier tier) const { return peak[static_cast<int>(tier)]; }
};

// Batch shape, compression and attention placement come from `policy`; its
// percentages are ignored.
MemoryModel build_memory_model(const ModelSizes& sizes, const runtime::Policy& policy,
                               const runtime::Workload& workload);

}  // namespace tiergen::policy
