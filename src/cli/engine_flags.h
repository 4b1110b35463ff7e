#pragma once
// Flags shared by `generate` and `bench`: the model, the device, budgets and the
// policy (a file, FlexGen-compatible flags, or the defaults), and how to turn them
// into an Engine.
#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "policy/search.h"
#include "src/cli/policy_field_flags.h"
#include "tiergen/dist/launch.h"
#include "tiergen/model/spec.h"
#include "tiergen/model/weight_source.h"
#include "tiergen/runtime/engine.h"

namespace tiergen::cli {

struct EngineFlags {
  std::string model;
  std::string path;  // FlexGen's --path: _DUMMY_ (dummy weights) or a checkpoint directory
  bool dummy = false;
  uint64_t dummy_seed = 0;
  std::string device = "auto";
  std::string dtype = "auto";
  std::string gpu_mem, cpu_mem, disk_mem;
  std::string offload_dir = "/tmp/tiergen-offload";
  int io_threads = 4;
  // Policy.
  std::string policy_file;  // a file, or "auto" for the cost-model search
  std::string hw;           // hardware profile for the search and the predictions
  std::vector<double> percent;
  int64_t gpu_batch_size = 0;  // -b/--gpu-batch-size; 0: not given (the command's default)
  int64_t num_gpu_batches = 0;
  bool cpu_attention = false;
  bool cpu_gemm = false;  // many-row CPU products on a packed GEMM: faster, not batch-invariant
  double attn_sparsity = 1.0;         // FlexGen's; only 1 (exact attention) is supported
  int verbose = -1;                   // FlexGen's --verbose N; -1: not given
  std::string compress = "off";  // what --policy auto may choose: off, auto or on
  bool no_guardrails = false;     // a searched plan is the LP's, not weighed against the guardrails
  PolicyFieldFlags fields;        // CPU weight compute, overlap, FlexGen's layout flags, compression
  // A pipeline of one process per stage (tiergen/dist/launch.h).
  dist::LaunchFlags launch;
  std::string trace;  // a Chrome trace of every task, written here (runtime/task_timeline.h)
};

// Where a command puts the model when neither --percent nor --policy says: `generate`
// searches a plan for the job (it must fit), `bench` keeps FlexGen's default (all on
// the GPU tier, batch `default_batch_size`).
enum class UnplacedDefault { AllOnGpu, Searched };
// The flags every engine command takes; `default_batch_size` and `unplaced` for --help.
void add_engine_flags(CLI::App* command, EngineFlags& flags, int64_t default_batch_size,
                      UnplacedDefault unplaced);
// --world-size, --rank, --dist-init, --dist-timeout: where this process sits in a
// multi-process job (dist::resolve_launch adds the launchers' environments).
void add_launch_flags(CLI::App* command, dist::LaunchFlags& launch);
// First thing a command's callback does: resolves --path and -m into the model and
// applies --verbose N (flexgen_flags.h).
void prepare_engine_flags(EngineFlags& flags);

// The model's spec: a directory with config.json, or a preset name.
model::Spec load_spec(const EngineFlags& flags);
// `generate` runs a checkpoint: a preset name without --dummy is refused, naming where
// the Hugging Face cache was looked in (prepare_engine_flags resolves hub ids there).
void require_checkpoint_or_dummy(const EngineFlags& flags);
// Checkpoint weights from the model directory, or dummy weights (--dummy, or a preset).
std::unique_ptr<model::WeightSource> load_weights(const EngineFlags& flags, const model::Spec& spec);
// -b / --num-gpu-batches (<= 0: not given) as the block `search` plans for; a shape no
// policy may have is refused here.
void plan_for_block_shape(int64_t gpu_batch_size, int64_t num_gpu_batches, policy::SearchOptions& search);
// Whether the placement is searched by the cost model: --policy auto, or nothing given
// where the command's default is the search.
bool placement_is_searched(const EngineFlags& flags, UnplacedDefault unplaced);
// The policy from --policy FILE / flags, or searched for `workload` (--policy auto, or
// the Searched default: that search never compresses; --compress-weight/-cache apply
// over its plan as over a fixed one). A search plans for -b / --num-gpu-batches when
// given; --cpu-attention and --cpu-weight-compute are set over its plan.
// `planned_on`, when given, receives the profile a searched plan was priced on.
runtime::Policy make_policy(const EngineFlags& flags, int64_t default_batch_size, const model::Spec& spec,
                            const runtime::Workload& workload, const runtime::EngineOptions& options,
                            UnplacedDefault unplaced, std::optional<policy::HardwareProfile>* planned_on = nullptr);
// make_policy's search again, on another profile (a re-plan after a job's first block,
// policy/replan.h), with the same options and flag refinements and the lossy choices of
// `current`; `placement_only`: with `current`'s block shape and compute threads, and CPU
// attention and CPU weight compute only where `current` has them (replan.h says what
// else must stay; a plan that moves it is refused there).
runtime::Policy search_policy_again(const EngineFlags& flags, const model::Spec& spec,
                                    const runtime::Workload& workload, const runtime::EngineOptions& options,
                                    const policy::HardwareProfile& hw, const runtime::Policy& current,
                                    bool placement_only);
runtime::DeviceContext make_device(const EngineFlags& flags);

// `local_ranks`: processes of one pipeline on this host; the default host budgets
// (RAM, and free disk) are their shares of it.
runtime::Budgets make_budgets(const EngineFlags& flags, const runtime::DeviceContext& device, int local_ranks = 1);
// "CUDA allocator: ...": the caching allocator's peak reserved bytes
// (runtime::cuda_peak_reserved_bytes) beside the gpu tier's own peak and budget.
// Reserved minus the tier's peak is what the tier's accounting does not see (allocator
// rounding, per-stream pools, workspaces): what the default tier's reserve must cover.
std::string cuda_allocator_report(uint64_t peak_reserved, uint64_t gpu_tier_peak, uint64_t gpu_tier_budget);
// Joins the pipeline when the flags or the launcher's environment say there is more
// than one rank (EngineOptions::link), and prefixes every log line with the rank.
runtime::EngineOptions make_engine_options(const EngineFlags& flags);

}  // namespace tiergen::cli
