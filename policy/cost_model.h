#pragma once
// The cost model: FlexGen's appendix A.3 (per-layer prefill and decode latency from the
// overlapped tasks ctog, gtoc, dtoc, ctod, comp; T = T_pre·l + T_gen·(n−1)·l), composed
// the way the runtime's schedule composes them (runtime/block_schedule.h: who runs
// each task, what each step waits for, which copies share a link), with a fixed cost
// per step and the embedding and head as layers; sizes from model::Spec, LM-Offload's (de)quantization terms
// (section 3.2, equations 3–24, with measured kernel rates) and CPU attention priced
// by bytes over the measured CPU attention bandwidth.
//
// For a fixed batch shape, compression and attention placement, every term is a
// linear function of the nine placement fractions (see linear.h); the same functions
// serve the LP (search.h) and predictions for a concrete runtime::Policy.
#include <array>
#include <optional>
#include <vector>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "policy/hardware_profile.h"
#include "policy/linear.h"
#include "policy/model_sizes.h"
#include "tiergen/model/spec.h"
#include "tiergen/runtime/block_schedule.h"
#include "tiergen/runtime/placement.h"
#include "tiergen/runtime/policy.h"

namespace tiergen::policy {

// The lanes a layer's work crosses: the links between the tiers (each one engine that
// every copy over it shares, whichever queue issues it) and the compute device.
enum class Lane { CpuToGpu, GpuToCpu, DiskToCpu, CpuToDisk, Compute };
constexpr int kNumLanes = 5;
const char* lane_name(Lane lane);

// The kinds of work the model prices (LM-Offload's Algorithm 1 plus the compression
// work), for reports and the thread search. Which queue runs each piece is the
// schedule's fact (runtime/block_schedule.h), given with the runtime task it is.
enum class Task {
  WeightLoad, CacheLoad, CacheStore, ActivationLoad, ActivationStore,
  Compute, CpuAttention, Dequantize, Quantize
};
constexpr int kNumTasks = 9;
const char* task_name(Task task);

// What can bound a layer's time: one of the schedule's queues, or a resource that work
// of several queues shares (a link's engine; on a host standing in for the GPU, the
// cores that both compute and copy between its tiers).
enum class Bound {
  WeightLoader, CacheLoader, Storer, Compute, LinkToGpu, LinkFromGpu, DiskRead, DiskWrite, HostCores, InTurn
};
constexpr int kNumBounds = 10;
const char* bound_name(Bound bound);

// One layer's work (a prefill layer, an average decode layer, or the embedding and
// head of one token), all gpu batches, sorted by the schedule's queues and by lane.
//
// Under the schedule (block_schedule.h) the queues awaited at each step's end share
// `steps` steps (one per gpu batch and weight layer), each as long as its busiest such
// queue plus the step's fixed cost, while the weight loader runs across all of them.
// So a layer takes
//   serial + max(steps · step,  weight loader [+ step],  every shared link or core total)
// with step = max over the step-awaited queues of queue_q / steps, the compute queue's
// with step_fixed added (the host dispatches and waits there); "+ step" where the compute queue
// copies over the weights' link in line (schedule::inline_copies_wait_for_weights).
// (phase_bounds lists the terms; evaluation and the LP both read them).
struct PhaseModel {
  std::array<Linear, runtime::schedule::kNumQueues> queues;  // each queue's work in the layer
  std::array<Linear, kNumLanes> lanes;  // each lane's work in the layer
  std::array<Linear, kNumTasks> tasks;  // the same times broken down by task
  Linear host_cores;                    // a stand-in host's cores: compute plus its tier copies
  Linear inline_to_gpu;                 // copies the compute queue makes over the weights' link
  Linear serial;                        // not overlapped with anything
  double step_fixed = 0;                // seconds each step costs beyond its work
  int64_t steps = 1;                    // steps of the layer: gpu batches × weight layers
  int64_t batches = 1;                  // gpu batches in the pass (the schedule's queue choice)
  bool gpu_is_host = false;             // copies between the gpu and cpu tiers use the cores
  bool queues_concurrent = true;        // schedule::queues_run_concurrently (overlap on)
  // Seconds of the stand-in's cores each second of a disk read beside compute takes
  // (HardwareProfile::disk_read_core_bandwidth, per read rate): 0 where free or unmeasured.
  double disk_read_core_share = 0;
  double disk_cache_read_core_share = 0;  // the same for KV cache reads (their own rate)
  // `seconds` of `task` over `lane`, run as the runtime's `runs_as` (its queue is the
  // schedule's queue_of, its place on the compute path the schedule's on_compute_path).
  void add(Lane lane, Task task, runtime::Task runs_as, const Linear& seconds);
};

// One term of a layer's time: per step (a queue the step waits for, with the step's
// fixed cost on the compute queue), or for the whole layer: seconds + steps_after ×
// the step (the steps themselves; the weight loader, a link).
// A bound may hold only where `applies_where` is positive at the placement (the weights
// delay a step only where it copies in line): evaluation checks that; the LP, which
// cannot, keeps the bound everywhere, pessimistic where the fractions leave no such
// copy (its rounded plans are priced exactly by evaluation before any is chosen).
struct PhaseBound {
  Bound bound;
  bool per_step;
  Linear seconds;
  double steps_after = 0;
  std::optional<Linear> applies_where = std::nullopt;
};
std::vector<PhaseBound> phase_bounds(const PhaseModel& phase);

struct CostModel {
  PhaseModel prefill, decode;              // one average decoder layer
  PhaseModel prefill_edges, decode_edges;  // the embedding and the head of one token
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
  double layer_seconds = 0;               // under the schedule (PhaseModel)
  std::array<double, kNumLanes> lanes{};  // each lane's busy time in the layer
  std::array<double, runtime::schedule::kNumQueues> queues{};  // each queue's work
  std::array<double, kNumTasks> tasks{};
  double fixed_seconds = 0;               // the steps' fixed costs
  Bound bottleneck = Bound::Compute;      // the term that sets layer_seconds
};

struct Prediction {
  PhaseTimes prefill, decode;  // per decoder layer
  PhaseTimes prefill_edges, decode_edges;  // the embedding and head, per token
  double prefill_seconds = 0, decode_seconds = 0, total_seconds = 0, init_seconds = 0;
  // FlexGen's definitions with N = gpu_batch_size × num_gpu_batches sequences:
  // prefill N·s/t_prefill, decode N·(n−1)/t_decode, total N·n/(t_prefill + t_decode).
  double prefill_throughput = 0, decode_throughput = 0, total_throughput = 0;
};

// A task's seconds over `steps` steps of a block (prefill: one per block; decode: one
// per token after the first, per block), as the runtime measures them: every decoder
// layer's share and the embedding's and head's (the runtime times their steps' loads
// and products under the same tasks). Reports and calibration compare runs with this.
double task_seconds(const Prediction& prediction, Task task, bool prefill, int64_t num_layers, double steps);

// A prediction's total throughput over a whole job of `num_sequences` (0: unknown, one
// block) run in blocks of `block_size`: the last block partly empty, and a block costs
// about the same full or not (it streams the same weights through the same steps). So 32
// prompts in blocks of 24 take two blocks' time for 32 sequences: 0.67 of the block's own
// throughput, where blocks of 16 or 32 waste nothing (measured on a 2-core Zen 4 stand-in:
// 24x1 ran a 32-prompt job at 0.74 of its 24-prompt rate). The search and the re-plan
// compare plans by it.
double job_total_throughput(const Prediction& prediction, int64_t block_size, int64_t num_sequences);

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
