#pragma once
// What the cost model predicted for a run beside what the run measured: the
// feedback that tells whether a hardware profile still describes the machine.
#include <nlohmann/json.hpp>

#include <string>

#include "policy/cost_model.h"
#include "tiergen/runtime/stats.h"

namespace tiergen::cli {

struct PredictionScale {
  int64_t num_layers = 0;  // decoder layers
  int64_t gen_len = 0;     // n: decode runs (n - 1) steps
  int64_t blocks = 0;      // blocks the run executed
};

std::string predicted_vs_measured(const policy::Prediction& predicted, const runtime::Stats& measured,
                                  const PredictionScale& scale);
nlohmann::json predicted_vs_measured_json(const policy::Prediction& predicted, const runtime::Stats& measured,
                                          const PredictionScale& scale);
// The same record's measured half, "predicted" null: for runs without a profile of this host.
nlohmann::json measured_only_json(const runtime::Stats& measured);

}  // namespace tiergen::cli
