#include "src/cli/measurements_table.h"

#include <fmt/format.h>

#include "policy/quietest_attempt.h"

namespace tiergen::cli {

// A number whose repetitions lie further apart than policy::kNoisySpread, in every
// attempt at it, is flagged: its median is then a weak estimate.
std::string measurements_table(const std::vector<policy::Measurement>& measurements) {
  std::string out = fmt::format("{:<28}{:>14} {:<7}{:>6}{:>9}\n", "measurement", "median", "unit", "runs", "spread");
  for (const auto& m : measurements) {
    const std::string attempts = m.attempts > 1 ? fmt::format("  (timed {} times)", m.attempts) : "";
    out += fmt::format("{:<28}{:>14.4g} {:<7}{:>6}{:>8.0f}%{}{}\n", m.name, m.value, m.unit, m.runs, m.spread * 100,
                       attempts, m.spread > policy::kNoisySpread ? "  noisy: rerun on a quiet machine" : "");
  }
  return out;
}

}  // namespace tiergen::cli
