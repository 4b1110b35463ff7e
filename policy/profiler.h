#pragma once
// Measures this host into a HardwareProfile: memcpy bandwidth, pinned host↔device
// copies (when a CUDA device exists), disk writes under an offload directory
// (O_DIRECT when the filesystem allows it) and reads as the runtime's disk tier makes
// them, with what those reads cost compute beside them (disk_read_probe.h), matmul
// and batched-matmul FLOP rates for prefill- and decode-shaped problems, CPU decode-attention bandwidth and its thread
// scaling, the (de)quantization kernels' rates, and the schedule's fixed cost per step
// (runner_probe.h). On a CPU-only host the "gpu"
// numbers describe the host standing in for the GPU (the engine's --device cpu mode).
#include <string>
#include <utility>
#include <vector>

#include "policy/hardware_profile.h"

namespace tiergen::policy {

struct ProfilerOptions {
  std::string offload_dir = "/tmp";  // where the disk test file goes (removed afterwards)
  bool quick = false;                // small problems, few repetitions (about 10 s)
  // Threads the thread scaling is measured up to; 0 = every core. Tests pass 1: on a
  // machine another process is using, a 2-thread run is rightly refused as implausible.
  int max_threads = 0;
  // The dtypes whose CPU products are timed (HardwareProfile::cpu_product_tables);
  // empty: float32, float16 and bfloat16.
  std::vector<std::string> product_dtypes;
};

// One measured number: its median over `runs` timed repetitions and how far the
// repetitions lay apart ((slowest - fastest) / median of the times), of the quietest
// of `attempts` at it (a noisy point is timed again: quietest_attempt.h).
struct Measurement {
  std::string name;
  double value = 0;
  std::string unit;
  int runs = 0;
  double spread = 0;
  int attempts = 1;
};

// Measures every number (each repeated, median kept). Throws tiergen::Error when a
// result is implausible (a thread count slower than half a thread, or faster than
// 1.5x per thread), after measuring it again: a busy machine gives such numbers, and
// a profile built on them would steer every plan wrong. A number whose repetitions
// disagree is timed again, within a budget per profile (quietest_attempt.h).
// `measurements`, when given, receives every number with its spread.
HardwareProfile measure_host(const ProfilerOptions& options, std::vector<Measurement>* measurements = nullptr);

// The CPU's products over host weights in `dtype` ("float32", "float16", "bfloat16"),
// timed as measure_host times them (on every compute thread, through the kernel path a
// run takes now): for a profile that lacks the dtype a job computes in, with a budget
// of its own for timing noisy points again (quietest_attempt.h). Rates empty when this
// LibTorch cannot multiply in `dtype` on the CPU. `stand_in`: the profile's host stands
// in for the GPU (HardwareProfile::gpu_is_host), whose attention over a loaded cache in
// `dtype` the table then times too (LoadedCacheAttention).
CpuProductTable measure_cpu_products(const std::string& dtype, bool quick, bool stand_in,
                                     std::vector<Measurement>* measurements = nullptr);

// The plausibility rule above for a thread-scaling table; "" when plausible, else why not.
std::string implausible_thread_scaling(const std::vector<std::pair<int, double>>& scaling);

}  // namespace tiergen::policy
