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

// The phase's layer time is first + (ngb − 1)·rest + serial (see PhaseModel); adds the
// two step columns with their rows, weighted by `weight` in the objective.
void add_phase(LinearProgram& lp, const PhaseModel& phase, double ngb, double weight, const char* name) {
  const int first = lp.add_column(std::string(name) + "_first_step", 0.0, LinearProgram::kInfinity, weight);
  const int rest = lp.add_column(std::string(name) + "_other_steps", 0.0, LinearProgram::kInfinity, weight * (ngb - 1));
  for (int stream = 0; stream < kNumStreams; ++stream) {
    const std::string id = std::string(name) + "_" + stream_name(static_cast<Stream>(stream));
    const Linear per_batch = phase.stream_block(stream) / ngb;
    add_bound_row(lp, id + "_first", first, phase.stream_once(stream) + per_batch + phase.serial);
    if (ngb > 1) add_bound_row(lp, id + "_other", rest, per_batch);
  }
}

double phase_seconds(const PhaseModel& phase, double ngb, const Fractions& p) {
  double first = 0, rest = 0;
  for (int stream = 0; stream < kNumStreams; ++stream) {
    const double per_batch = phase.stream_block(stream).at(p) / ngb;
    first = std::max(first, phase.stream_once(stream).at(p) + per_batch);
    rest = std::max(rest, per_batch);
  }
  return first + (ngb - 1) * rest + phase.serial.at(p);
}

// The tie-break term: the sum of all lane times over the whole block, per token.
Linear total_traffic(const CostModel& cost) {
  const double l = double(cost.num_layers), n = double(cost.gen_len);
  Linear sum;
  for (int lane = 0; lane < kNumLanes; ++lane) {
    sum += cost.prefill.lane_total(lane) * l;
    sum += cost.decode.lane_total(lane) * (l * (n - 1));
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
  const double ngb = double(cost.num_gpu_batches);

  lp.add_row("weights", {{kWg, 1}, {kWc, 1}, {kWn, 1}}, RowSense::Equal, 1.0);
  lp.add_row("cache", {{kCg, 1}, {kCc, 1}, {kCn, 1}}, RowSense::Equal, 1.0);
  lp.add_row("activations", {{kHg, 1}, {kHc, 1}, {kHn, 1}}, RowSense::Equal, 1.0);
  add_phase(lp, cost.prefill, ngb, l / bls, "prefill");
  add_phase(lp, cost.decode, ngb, l * (n - 1) / bls, "decode");
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
  answer.seconds_per_token =
      (l * phase_seconds(cost.prefill, ngb, answer.fractions) + l * (n - 1) * phase_seconds(cost.decode, ngb, answer.fractions)) / bls;
  return answer;
}

}  // namespace tiergen::policy
