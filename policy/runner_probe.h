#pragma once
// Measurements through the real block runner (runtime/block_runner.h) on the compute
// device, for what an idle micro-benchmark does not show:
// - the fixed cost per step of the schedule (one weight layer for one gpu batch,
//   runtime/block_schedule.h): launching its operators, handing its tasks to the
//   workers and waiting for them (HardwareProfile::step_seconds), timed over a model
//   whose layers do almost no work, every tier on the compute device;
// - the rate weights reach the compute device at as the runtime streams them from the
//   cpu tier (its own copies, from its own homes, while the runner works), which the
//   cost model uses as the host-to-device link rate (HardwareProfile::cpu_to_gpu);
// - what one call of CPU decode attention costs as the runtime makes it (its views of
//   the cache's homes, its output, the kernel's threads), over a cache of a few
//   positions on the cpu tier (HardwareProfile::cpu_attention_call_seconds).
#include <string>
#include <vector>

namespace tiergen::policy {

// Seconds per step on `device` ("cpu" or "cuda"), one sample per run (`reps` runs
// after a warm-up).
std::vector<double> measure_step_seconds(const std::string& device, int reps);

// Bytes per second of weight loads from the cpu tier on `device`, one sample per run.
std::vector<double> measure_weight_stream_rate(const std::string& device, int reps);

// What the runtime's CPU attention calls took, one sample per run: seconds per call
// (one layer's gpu batch) and the call's kernel tasks (sequences x kv heads) and KV
// bytes read, so that the caller can take out what its per-task and per-byte prices
// account for.
struct AttentionCallSample {
  double seconds_per_call = 0;
  double tasks_per_call = 0;
  double kv_bytes_per_call = 0;
};
std::vector<AttentionCallSample> measure_cpu_attention_calls(const std::string& device, int reps);

}  // namespace tiergen::policy
