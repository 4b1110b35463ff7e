#pragma once
// The LP's linear memory model (policy/memory_model.h), evaluated at the fractions a
// policy really realises, against the runtime's exact accounting (plan_memory): within
// 2% plus 1 MB on every tier.
#include <gtest/gtest.h>

#include "policy/cost_model.h"
#include "policy/memory_model.h"

namespace tiergen::test {

inline void expect_memory_model_tracks_plan(const model::Spec& spec, const runtime::Policy& policy,
                                            const runtime::Workload& workload) {
  const policy::ModelSizes sizes(spec, 2);
  const auto model = policy::build_memory_model(sizes, policy, workload);
  const auto plan = runtime::plan_memory(spec, policy, workload, 2).total();
  const policy::Fractions f = policy::effective_fractions(sizes, policy);
  for (auto tier : {runtime::Tier::Gpu, runtime::Tier::Cpu, runtime::Tier::Disk}) {
    const double exact = double(plan[tier]);
    EXPECT_NEAR(model.of(tier).at(f), exact, 0.02 * exact + 1e6) << runtime::tier_name(tier);
  }
}

}  // namespace tiergen::test
