#include "tiergen/runtime/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <numeric>

#include <ATen/Parallel.h>

#include "kernels/cpu/small_matmul.h"
#include "tiergen/common/bytes.h"
#include "tiergen/common/kernel_elem_type.h"
#include "tiergen/common/torch_compat.h"
#include "tiergen/common/compute_threads.h"
#include "src/runtime/block_state.h"
#include "tiergen/common/error.h"
#include "tiergen/runtime/task_timeline.h"

namespace tiergen::runtime {

namespace {

bool uses_disk(const MemoryPlan& plan) { return plan.total()[Tier::Disk] > 0; }

// The policy's thread counts (LM-Offload's Algorithm 3): intra-op threads for compute
// and CPU attention, inter-op threads for LibTorch's scheduler. Without a count in the
// policy, compute uses every usable core unless OMP_NUM_THREADS says otherwise
// (common/compute_threads.h).
void apply_threads(const ThreadConfig& threads) {
  set_compute_threads(threads.compute_intra_op);
  const int cores = usable_cores();
  if (threads.compute_inter_op > 0) {
    // Settable once per process, before any inter-op work; later calls are refused.
    try {
      at::set_num_interop_threads(std::min(threads.compute_inter_op, cores));
    } catch (const std::exception&) {
      spdlog::debug("inter-op threads already fixed for this process");
    }
  }
}

// The plan's small-row limit (Policy::small_matmul) for this run's CPU products; other
// types, and every policy without one, keep the kernels' defaults. It is ignored where
// this CPU's default for the type has no limit: there LibTorch's GEMM is a fallback
// several times slower (kernels::default_small_matmul_max_rows), and a plan searched on
// another machine's profile must not send products to it.
void apply_small_row_limit(const SmallRowLimit& limit) {
  kernels::clear_measured_small_matmul_max_rows();
  // Batch-invariant products (the default) take every row count on the small-row kernel.
  if (limit.max_rows == 0 || kernels::small_matmul_for_every_row_count()) return;
  const kernels::ElemType type = kernel_elem_type(compat::parse_dtype(limit.dtype));
  const int64_t default_rows = kernels::default_small_matmul_max_rows(type);
  if (kernels::small_matmul_max_rows_under(type, limit.max_rows) == default_rows) return;
  kernels::set_measured_small_matmul_max_rows(type, limit.max_rows);
  spdlog::info("CPU products of {} weights: the small-row kernel up to {} rows (default {}), as the policy's hardware "
               "profile measured",
               limit.dtype, limit.max_rows, default_rows);
}

}  // namespace

Engine::Engine(const model::Spec& spec, const model::WeightSource& source, const Policy& policy,
               const EngineOptions& options, const Workload& max_workload)
    : spec_(spec), policy_(policy), options_(options) {
  policy_.validate();
  stage_.layers = StageLayers::whole(spec_);
  if (options_.link) {
    const StageLink& link = *options_.link;
    stage_.layers = split_stages(spec_, link.world_size())[static_cast<size_t>(link.rank())];
    stage_.groups = link.world_size();
    spdlog::info("pipeline stage {} of {}: {}", link.rank(), link.world_size(), stage_.layers.describe(spec_));
  }
  plan_ = plan_memory(spec_, policy_, max_workload, options_.device.dtype_bytes(), stage_);
  const std::string over = plan_.over_budget(options_.budgets);
  if (!over.empty()) {
    throw InfeasibleError(fmt::format(
        "policy does not fit for prompt length {} and {} new tokens: {}. Lower the gpu batch size or number of "
        "gpu batches, move more to cpu/disk (--percent), enable compression, or raise the budget; "
        "`tiergen policy` searches for one that fits",
        max_workload.prompt_len, max_workload.gen_len, over));
  }
  // Placing the weights (reading, converting, generating dummy ones) uses every core;
  // the policy's compute threads apply to the run, from the end of this constructor.
  apply_threads(ThreadConfig{});
  // On CUDA a task's host time is its queueing: its stream time is what counts.
  const bool device_timing = options_.device.is_cuda() && !options_.device.emulation;
  if (device_timing || options_.keep_trace) {
    timeline_ = std::make_unique<TaskTimeline>(options_.device, options_.keep_trace);
    stats_.attach_timeline(timeline_.get(), timeline_->on_device());
  }
  if (policy_.threads.io_threads > 0) options_.io_threads = policy_.threads.io_threads;
  tiers_ = std::make_unique<Tiers>(options_.budgets, options_.offload_dir, uses_disk(plan_), options_.io_threads);
  // LibTorch allocates compute temporaries itself; the plan's bound for them is held
  // on the gpu tier for the whole run so the other allocations cannot use it.
  scratch_.push_back(tiers_->gpu.reserve(compute_scratch_bytes(spec_, policy_, max_workload, options_.device.dtype_bytes()),
                                         "compute scratch"));
  spdlog::info("placing weights ({}) on gpu {}, cpu {}, disk {}", source.describe(),
               format_bytes(plan_.weights[Tier::Gpu]), format_bytes(plan_.weights[Tier::Cpu]),
               format_bytes(plan_.weights[Tier::Disk]));
  weights_ = std::make_unique<WeightStore>(spec_, policy_, source, *tiers_, options_.device,
                                           options_.device.compute.is_cpu() && !options_.dequantize_weights_on_cpu,
                                           stage_.layers);
  // Before the runner starts its copy queues: a new thread takes LibTorch's thread count
  // as it stands when the thread first uses it.
  apply_threads(policy_.threads);
  runner_ = std::make_unique<BlockRunner>(spec_, policy_, *weights_, *tiers_, options_.device, stats_, options_.faults,
                                          pipeline_stage());
  apply_small_row_limit(policy_.small_matmul);
}

Engine::~Engine() = default;

std::vector<std::vector<size_t>> Engine::blocks(const std::vector<SequenceRequest>& requests) const {
  const size_t block_size = static_cast<size_t>(policy_.block_size());
  const size_t window = block_size * static_cast<size_t>(std::max<int64_t>(1, options_.length_window_blocks));
  std::vector<std::vector<size_t>> blocks;
  for (size_t start = 0; start < requests.size(); start += window) {
    std::vector<size_t> order(std::min(window, requests.size() - start));
    std::iota(order.begin(), order.end(), start);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return requests[a].prompt.size() < requests[b].prompt.size();
    });
    for (size_t i = 0; i < order.size(); i += block_size) {
      std::vector<size_t> block(order.begin() + static_cast<std::ptrdiff_t>(i),
                                order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), i + block_size)));
      // Within the block, sequences with similar max_tokens share a gpu batch, so a
      // batch whose sequences are done hands its slot to the job's next batch while
      // longer ones still generate. (Prompt lengths within a gpu batch are left mixed:
      // its prefill runs by groups of similar length, block_compute.cpp.)
      std::stable_sort(block.begin(), block.end(), [&](size_t a, size_t b) {
        return requests[a].max_new_tokens < requests[b].max_new_tokens;
      });
      blocks.push_back(std::move(block));
    }
  }
  return blocks;
}

PipelineStage Engine::pipeline_stage() const { return PipelineStage{stage_.layers, options_.link.get()}; }

// A job with fewer sequences than the policy's block runs at its own size rather than
// padded to the full block: same placement, fewer rows.
BlockRunner& Engine::runner_for(size_t sequences) {
  const Policy fitted = policy_.fitted_to(static_cast<int64_t>(sequences));
  if (fitted.block_size() == policy_.block_size()) return *runner_;
  if (!partial_runner_ || partial_policy_.gpu_batch_size != fitted.gpu_batch_size ||
      partial_policy_.num_gpu_batches != fitted.num_gpu_batches) {
    partial_runner_.reset();
    partial_policy_ = fitted;
    partial_runner_ = std::make_unique<BlockRunner>(spec_, partial_policy_, *weights_, *tiers_, options_.device, stats_,
                                                    options_.faults, pipeline_stage());
    spdlog::debug("a job of {} sequences runs as {} x {}", sequences, fitted.gpu_batch_size, fitted.num_gpu_batches);
  }
  return *partial_runner_;
}

namespace {

// The job's gpu batches in the order the runs take them: each block's sequences,
// gpu_batch_size at a time.
std::vector<std::vector<size_t>> gpu_batches_of(const std::vector<std::vector<size_t>>& blocks,
                                                int64_t gpu_batch_size) {
  std::vector<std::vector<size_t>> batches;
  const auto size = static_cast<size_t>(gpu_batch_size);
  for (const auto& block : blocks) {
    for (size_t i = 0; i < block.size(); i += size) {
      batches.emplace_back(block.begin() + static_cast<std::ptrdiff_t>(i),
                           block.begin() + static_cast<std::ptrdiff_t>(std::min(block.size(), i + size)));
    }
  }
  return batches;
}

}  // namespace

void Engine::generate(const std::vector<SequenceRequest>& requests, const ResultCallback& on_result,
                      const TokenCallback& on_token) {
  generate_blocks(requests, blocks(requests), requests.size(), on_result, on_token);
}

void Engine::generate_blocks(const std::vector<SequenceRequest>& requests,
                             const std::vector<std::vector<size_t>>& blocks, size_t job_sequences,
                             const ResultCallback& on_result, const TokenCallback& on_token) {
  if (!blocks.empty()) run_job(requests, blocks, job_sequences, on_result, on_token);
  if (timeline_) timeline_->collect(stats_, true);
  stats_.peak_bytes = tiers_->peaks();
  stats_.budgets[Tier::Gpu] = options_.budgets.gpu;
  stats_.budgets[Tier::Cpu] = options_.budgets.cpu;
  stats_.budgets[Tier::Disk] = options_.budgets.disk;
}

// One run per pipeline group (a single process runs one), each taking the job's gpu
// batches from one queue: the same order on every stage, so their messages match.
// The runs go a pass at a time, in turn.
void Engine::run_job(const std::vector<SequenceRequest>& requests, const std::vector<std::vector<size_t>>& blocks,
                     size_t job_sequences, const ResultCallback& on_result, const TokenCallback& on_token) {
  BlockRunner& runner = runner_for(std::min<size_t>(job_sequences, static_cast<size_t>(policy_.block_size())));
  const auto batches = gpu_batches_of(blocks, runner.policy().gpu_batch_size);
  size_t next_batch = 0;
  int64_t longest_prompt = 0, most_tokens = 0;
  for (const auto& r : requests) {
    longest_prompt = std::max<int64_t>(longest_prompt, static_cast<int64_t>(r.prompt.size()));
    most_tokens = std::max(most_tokens, r.max_new_tokens);
  }
  struct Group {
    std::vector<size_t> request_of_slot;  // the run's slot -> the request's index
    std::unique_ptr<BlockRun> run;
  };
  const uint64_t disk_mark = tiers_->disk ? tiers_->disk->mark() : 0;
  // Groups hold pointers to each other's slot tables: sized once, never moved.
  std::vector<Group> groups(static_cast<size_t>(stage_.groups));
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<size_t>* slots = &groups[g].request_of_slot;
    RunFeed feed;
    feed.next_batch = [&requests, &batches, &next_batch, slots] {
      std::vector<SequenceRequest> batch;
      if (next_batch == batches.size()) return batch;
      for (size_t i : batches[next_batch]) {
        batch.push_back(requests[i]);
        slots->push_back(i);
      }
      ++next_batch;
      return batch;
    };
    feed.refill_each_batch = options_.refill_batches;
    feed.max_prompt_len = longest_prompt;
    feed.max_new_tokens = most_tokens;
    if (on_token) feed.on_token = [&on_token, slots](size_t slot, int64_t token) { on_token((*slots)[slot], token); };
    feed.on_result = [&on_result, slots](size_t slot, SequenceResult&& result) { on_result((*slots)[slot], result); };
    feed.group = static_cast<int64_t>(g);
    groups[g].run = runner.start(std::move(feed));
  }
  for (bool running = true; running;) {
    running = false;
    for (Group& group : groups) running = runner.run_token(*group.run) || running;
  }
  for (Group& group : groups) runner.finish(*group.run);
  groups.clear();  // the runs' caches go before their disk space is reused
  if (tiers_->disk) tiers_->disk->reset_to(disk_mark);
}

void Engine::write_trace(const std::string& path) const {
  TG_CHECK(timeline_ && timeline_->keeps_trace(), "internal: no trace kept (EngineOptions::keep_trace)");
  timeline_->write_chrome_trace(path);
}

void Engine::clear_trace() {
  if (timeline_) timeline_->clear_trace();
}

std::vector<SequenceResult> Engine::generate(const std::vector<SequenceRequest>& requests) {
  std::vector<SequenceResult> results(requests.size());
  generate(requests, [&](size_t i, const SequenceResult& r) { results[i] = r; });
  return results;
}

}  // namespace tiergen::runtime
