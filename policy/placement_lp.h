#pragma once
// The inner problem of the policy search (FlexGen eq. 1): for a fixed batch shape,
// compression and attention placement, find the placement fractions p minimising T/bls
// subject to the peak-memory constraints of every tier and wg+wc+wn = cg+cc+cn =
// hg+hc+hn = 1. The max of the lanes is linearised with T_pre ≥ lane^p and
// T_gen ≥ lane^g.
#include <array>
#include <optional>

#include "policy/cost_model.h"
#include "policy/memory_model.h"

namespace tiergen::policy {

struct PlacementAnswer {
  Fractions fractions{};
  double seconds_per_token = 0;  // T / bls at the optimum
};

// `capacities` are the bytes the LP may plan on gpu, cpu and disk. Returns nothing
// when the constraints cannot be met.
std::optional<PlacementAnswer> solve_placement_lp(const CostModel& cost, const MemoryModel& memory,
                                                  const std::array<double, runtime::kNumTiers>& capacities,
                                                  double tie_break);

}  // namespace tiergen::policy
