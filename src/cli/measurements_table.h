#pragma once
// The table `tiergen profile` prints on stderr: each measured number with its runs and
// their spread, a number timed more than once says so, and a noisy one is flagged.
#include <string>
#include <vector>

#include "policy/profiler.h"

namespace tiergen::cli {

std::string measurements_table(const std::vector<policy::Measurement>& measurements);

}  // namespace tiergen::cli
