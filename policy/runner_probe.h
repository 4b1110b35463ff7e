#pragma once
// Measurements through the real block runner (runtime/block_runner.h) on the compute
// device, for what an idle micro-benchmark does not show:
// - the fixed cost per step of the schedule (one weight layer for one gpu batch,
//   runtime/block_schedule.h): launching its operators, handing its tasks to the
//   workers and waiting for them (HardwareProfile::step_seconds), timed over a model
//   whose layers do almost no work, every tier on the compute device;
// - the rate weights reach the compute device at as the runtime streams them from the
//   cpu tier (its own copies, from its own homes, while the runner works), which the
//   cost model uses as the host-to-device link rate (HardwareProfile::cpu_to_gpu).
#include <string>
#include <vector>

namespace tiergen::policy {

// Seconds per step on `device` ("cpu" or "cuda"), one sample per run (`reps` runs
// after a warm-up).
std::vector<double> measure_step_seconds(const std::string& device, int reps);

// Bytes per second of weight loads from the cpu tier on `device`, one sample per run.
std::vector<double> measure_weight_stream_rate(const std::string& device, int reps);

}  // namespace tiergen::policy
