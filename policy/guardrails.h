#pragma once
// Guardrails: FlexGen-shaped policies that the search prices exactly beside the LP's
// answers. The LP plans within a share of each budget and over a grid of block shapes,
// so FlexGen's own hand policies (OPT-6.7B 2x1 and 24x1, OPT-30B 24x2 on a 16 GiB GPU)
// can fall outside what it sees, and the cost model is most optimistic about the plans
// it then picks (one gpu batch with activations off the GPU: measured/predicted 0.45 on
// OPT-30B against 0.77-0.79 for the hand policy, bench/RESULTS.md). A guardrail is a
// whole policy in the families those hand policies come from: weights split between
// gpu and cpu in steps of 10%, the KV cache and the activations together whole on the
// gpu or whole on the cpu, CPU attention exactly where the cache is on the cpu, no compression, no
// weights multiplied on the CPU, and activations off the GPU only with two or more gpu
// batches (where the runtime overlaps their copies). On a host standing in for the GPU
// (--device cpu) each policy with weights on the cpu tier comes also with them
// multiplied where they live: there the device's products are the CPU's own kernels
// over the same memory, so that variant is the same policy less a copy within host
// memory, and the copies, which take the compute's cores, were what separated the
// family from the best hand policies of the CPU sweep (bench/RESULTS.md). A stand-in
// also gets the KV cache on the cpu tier with attention there and the activations on
// the gpu tier, at any number of gpu batches: its "gpu" attention is LibTorch's
// operators on the same cores, slower than the CPU attention kernel, and without this
// the family had no plan with one gpu batch and CPU attention (llama-768 s8 n32 on a
// 2-core Zen 4: the family's best ran at 0.80 of the sweep's best; bench/RESULTS.md).
// The search takes its LP plan only
// when that plan is predicted faster than the best guardrail that fits the full budgets
// by more than SearchOptions::guardrail_margin (by default its plan class's band,
// plan_class.h).
#include <cstdint>
#include <vector>

#include "tiergen/runtime/policy.h"

namespace tiergen::policy {

struct GuardrailShape {
  std::vector<int64_t> gpu_batch_sizes;  // already bounded by the job
  int64_t max_num_gpu_batches = 8;       // the most gpu batches per block to try
  int64_t num_gpu_batches = 0;           // > 0: only this many (a pipeline's stages)
  int64_t num_sequences = 0;             // the job's sequences (0: unknown), bounds a block
  bool allow_cpu_attention = true;
  bool host_weights_multiplied_at_home = false;  // a stand-in's variants (above)
};

// Every guardrail policy for these shapes; memory is not checked here.
std::vector<runtime::Policy> guardrail_policies(const GuardrailShape& shape);

}  // namespace tiergen::policy
