#pragma once
// Measures this host into a HardwareProfile: memcpy bandwidth, pinned host↔device
// copies (when a CUDA device exists), disk read/write under an offload directory
// (O_DIRECT when the filesystem allows it), matmul and batched-matmul FLOP rates for
// prefill- and decode-shaped problems, CPU decode-attention bandwidth and its thread
// scaling, and the (de)quantization kernels' rates. On a CPU-only host the "gpu"
// numbers describe the host standing in for the GPU (the engine's --device cpu mode).
#include <string>

#include "policy/hardware_profile.h"

namespace tiergen::policy {

struct ProfilerOptions {
  std::string offload_dir = "/tmp";  // where the disk test file goes (removed afterwards)
  bool quick = false;                // small problems, few repetitions (about 10 s)
};

HardwareProfile measure_host(const ProfilerOptions& options);

}  // namespace tiergen::policy
