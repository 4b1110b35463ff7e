#pragma once
// The cost model: FlexGen's appendix A.3 (per-layer prefill and decode latency as the
// max of the five overlapped tasks ctog, gtoc, dtoc, ctod, comp; T = T_pre·l +
// T_gen·(n−1)·l) with sizes from model::Spec, LM-Offload's (de)quantization terms
// (section 3.2, equations 3–24, with measured kernel rates) and CPU attention priced
// by bytes over the measured CPU attention bandwidth.
//
// For a fixed batch shape, compression and attention placement, every term is a
// linear function of the nine placement fractions (see linear.h); the same functions
// serve the LP (search.h) and predictions for a concrete runtime::Policy.
#include <array>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "policy/hardware_profile.h"
#include "policy/linear.h"
#include "policy/model_sizes.h"
#include "tiergen/model/spec.h"
#include "tiergen/runtime/placement.h"
#include "tiergen/runtime/policy.h"

namespace tiergen::policy {

// FlexGen's five tasks of one layer (A.3: ctog, gtoc, dtoc, ctod, comp).
enum class Lane { CpuToGpu, GpuToCpu, DiskToCpu, CpuToDisk, Compute };
constexpr int kNumLanes = 5;
const char* lane_name(Lane lane);

// The runtime's workers that run them concurrently: one loader (disk→cpu→gpu reads,
// as FlexGen's load stream does), one storer (gpu→cpu→disk writes) and the compute
// device. Within a worker the tasks add up; the workers overlap. Where the host stands
// in for the GPU (HardwareProfile::gpu_is_host), copies between the gpu and cpu tiers
// are memcpys on the cores that compute: they add to the compute stream's time.
enum class Stream { Loader, Storer, Compute };
constexpr int kNumStreams = 3;
Stream stream_of(Lane lane, bool gpu_is_host);
const char* stream_name(Stream stream);

// The runtime's tasks (LM-Offload's Algorithm 1 plus the compression work).
enum class Task {
  WeightLoad, CacheLoad, CacheStore, ActivationLoad, ActivationStore,
  Compute, CpuAttention, Dequantize, Quantize
};
constexpr int kNumTasks = 9;
const char* task_name(Task task);

// One phase (prefill layer or average decode layer) of one block, all gpu batches.
//
// The lanes overlap, but the block schedule synchronises after every gpu batch (FlexGen's
// generation_loop_overlap_multi_batch): the next layer's weights load during the first
// gpu batch's step, the batch-sized work (cache, activations, compute) splits evenly
// over the steps. So a layer takes
//   max_lane(once + block/ngb) + (ngb − 1)·max_lane(block/ngb) + serial,
// where each max runs over the three streams (see Stream).
struct PhaseModel {
  std::array<Linear, kNumLanes> once;   // once per layer: the next layer's weights
  std::array<Linear, kNumLanes> block;  // summed over the block's gpu batches
  std::array<Linear, kNumTasks> tasks;  // the same times broken down by task
  Linear serial;                        // not overlapped with anything
  bool gpu_is_host = false;             // stream_of's placement of the gpu<->cpu copies
  void add(Lane lane, Task task, const Linear& seconds);       // per block
  void add_once(Lane lane, Task task, const Linear& seconds);  // per layer
  Linear lane_total(int lane) const { return once[lane] + block[lane]; }
  Linear stream_once(int stream) const;
  Linear stream_block(int stream) const;
};

struct CostModel {
  PhaseModel prefill, decode;
  int64_t num_layers = 0;
  int64_t prompt_len = 0, gen_len = 0;
  int64_t block_size = 0;
  int64_t num_gpu_batches = 1;
  double init_seconds = 0;  // one-off: weight quantization at load (LM-Offload eq. 3)
};

// Batch shape, compression and attention placement come from `policy`; its
// percentages are ignored (they are the LP's variables).
CostModel build_cost_model(const ModelSizes& sizes, const runtime::Policy& policy,
                           const runtime::Workload& workload, const HardwareProfile& hw);

struct PhaseTimes {
  double layer_seconds = 0;             // with the per-batch synchronisation
  std::array<double, kNumLanes> lanes{};  // each lane's busy time in the layer
  std::array<double, kNumStreams> streams{};
  std::array<double, kNumTasks> tasks{};
  Stream bottleneck = Stream::Compute;  // the busiest worker
};

struct Prediction {
  PhaseTimes prefill, decode;  // per layer
  double prefill_seconds = 0, decode_seconds = 0, total_seconds = 0, init_seconds = 0;
  // FlexGen's definitions with N = gpu_batch_size × num_gpu_batches sequences:
  // prefill N·s/t_prefill, decode N·(n−1)/t_decode, total N·n/(t_prefill + t_decode).
  double prefill_throughput = 0, decode_throughput = 0, total_throughput = 0;
};

// Evaluates a cost model at placement fractions.
Prediction evaluate(const CostModel& model, const Fractions& fractions);

// The fractions the runtime really realises for `policy`: weights by the bytes of a
// decoder layer's tensors placed by FlexGen's midpoint rule, KV cache and activations
// by the runtime's unit splits.
Fractions effective_fractions(const ModelSizes& sizes, const runtime::Policy& policy);

// Predicted per-task times and throughput of running `policy` (what `generate` and
// `bench` print beside the measured times).
Prediction predict(const model::Spec& spec, const runtime::Policy& policy, const runtime::Workload& workload,
                   const HardwareProfile& hw, int dtype_bytes = 2);

nlohmann::json prediction_to_json(const Prediction& prediction);

}  // namespace tiergen::policy
