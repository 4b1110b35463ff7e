#pragma once
// Measures the runtime's fixed cost per step of the schedule (one weight layer for one
// gpu batch, runtime/block_schedule.h): launching its operators, handing its tasks to
// the workers and waiting for them. The real block runner decodes over a model whose
// layers do almost no work (dummy weights, hidden size 64), every tier on the compute
// device, so each step's time is its fixed cost (HardwareProfile::step_seconds).
#include <string>

namespace tiergen::policy {

// Seconds per step on `device` ("cpu" or "cuda"); the median over `reps` runs.
double measure_step_seconds(const std::string& device, int reps);

}  // namespace tiergen::policy
