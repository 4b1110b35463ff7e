#include "policy/placement_lp.h"

#include "policy/lp_solver.h"

#include <algorithm>
#include <string>

namespace tiergen::policy {

namespace {

std::vector<std::pair<int, double>> terms_of(const Linear& l, double scale) {
  std::vector<std::pair<int, double>> terms;
  for (int v = 0; v < kNumVars; ++v) terms.emplace_back(v, l.coef[v] * scale);
  return terms;
}

// column ≥ bound, i.e. column − bound·p ≥ bound's constant.
void add_bound_row(LinearProgram& lp, const std::string& name, int column, const Linear& bound) {
  auto terms = terms_of(bound, -1.0);
  terms.emplace_back(column, 1.0);
  lp.add_row(name, terms, RowSense::AtLeast, bound.constant);
}

// The phase's time under the schedule (PhaseModel, phase_bounds): a step column at
// least each per-step bound, a layer column at least each whole-layer bound (its
// seconds plus its multiple of the step, plus the serial part); the layer column
// weighted by `weight` in the objective.
void add_phase(LinearProgram& lp, const PhaseModel& phase, double weight, const std::string& name) {
  const int step = lp.add_column(name + "_step", 0.0, LinearProgram::kInfinity, 0.0);
  const int layer = lp.add_column(name + "_layer", 0.0, LinearProgram::kInfinity, weight);
  int row = 0;
  for (const PhaseBound& b : phase_bounds(phase)) {
    const std::string id = name + "_" + bound_name(b.bound) + "_" + std::to_string(row++);
    if (b.per_step) {
      add_bound_row(lp, id, step, b.seconds);
      continue;
    }
    // layer − steps_after·step ≥ seconds + serial
    const Linear bound = b.seconds + phase.serial;
    auto terms = terms_of(bound, -1.0);
    terms.emplace_back(layer, 1.0);
    terms.emplace_back(step, -b.steps_after);
    lp.add_row(id, terms, RowSense::AtLeast, bound.constant);
  }
}

// The tie-break term: the sum of all lane times over the whole block, per token.
Linear total_traffic(const CostModel& cost) {
  const double l = double(cost.num_layers), n = double(cost.gen_len);
  Linear sum;
  for (int lane = 0; lane < kNumLanes; ++lane) {
    sum += cost.prefill.lanes[lane] * l + cost.prefill_edges.lanes[lane];
    sum += (cost.decode.lanes[lane] * l + cost.decode_edges.lanes[lane]) * (n - 1);
  }
  return sum / double(cost.block_size);
}

}  // namespace

std::optional<PlacementAnswer> solve_placement_lp(const CostModel& cost, const MemoryModel& memory,
                                                  const std::array<double, runtime::kNumTiers>& capacities,
                                                  double tie_break) {
  // Quick reject: the placement-independent bytes alone overflow a tier.
  for (int tier = 0; tier < runtime::kNumTiers; ++tier) {
    if (memory.peak[tier].constant > capacities[tier]) return std::nullopt;
  }
  LinearProgram lp("placement");
  const Linear traffic = total_traffic(cost);
  for (int v = 0; v < kNumVars; ++v) lp.add_column(var_name(v), 0.0, 1.0, tie_break * traffic.coef[v]);
  const double l = double(cost.num_layers), n = double(cost.gen_len), bls = double(cost.block_size);

  lp.add_row("weights", {{kWg, 1}, {kWc, 1}, {kWn, 1}}, RowSense::Equal, 1.0);
  lp.add_row("cache", {{kCg, 1}, {kCc, 1}, {kCn, 1}}, RowSense::Equal, 1.0);
  lp.add_row("activations", {{kHg, 1}, {kHc, 1}, {kHn, 1}}, RowSense::Equal, 1.0);
  add_phase(lp, cost.prefill, l / bls, "prefill");
  add_phase(lp, cost.decode, l * (n - 1) / bls, "decode");
  add_phase(lp, cost.prefill_edges, 1 / bls, "prefill_edges");
  add_phase(lp, cost.decode_edges, (n - 1) / bls, "decode_edges");
  static const char* tier_rows[] = {"gpu_peak", "cpu_peak", "disk_peak"};
  for (int tier = 0; tier < runtime::kNumTiers; ++tier) {
    const Linear& peak = memory.peak[tier];
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;  // rows in GiB keep the matrix well scaled
    lp.add_row(tier_rows[tier], terms_of(peak, 1.0 / kGiB), RowSense::AtMost,
               (capacities[tier] - peak.constant) / kGiB);
  }

  const LpSolution solution = lp.minimize();
  if (!solution.optimal()) return std::nullopt;
  PlacementAnswer answer;
  for (int v = 0; v < kNumVars; ++v) answer.fractions[v] = std::min(1.0, std::max(0.0, solution.values[v]));
  answer.seconds_per_token = evaluate(cost, answer.fractions).total_seconds / bls;
  return answer;
}

}  // namespace tiergen::policy
