#include "tiergen/runtime/engine.h"

#include <sched.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <thread>

#include <ATen/Parallel.h>

#include "tiergen/common/bytes.h"
#include "tiergen/common/error.h"

namespace tiergen::runtime {

namespace {

bool uses_disk(const MemoryPlan& plan) { return plan.total()[Tier::Disk] > 0; }

// Cores this process may run on (its CPU affinity), at least 1.
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// The policy's thread counts (LM-Offload's Algorithm 3): intra-op threads for compute
// and CPU attention, inter-op threads for LibTorch's scheduler. Without a count in the
// policy, compute uses every usable core unless OMP_NUM_THREADS says otherwise:
// LibTorch's own default comes from its count of physical cores, which on some virtual
// machines is 1 (Debian's LibTorch 1.13 on a 2-core KVM guest), leaving decode
// matmuls and CPU attention on one core.
void apply_threads(const ThreadConfig& threads) {
  const int cores = usable_cores();
  if (threads.compute_intra_op > 0) {
    at::set_num_threads(std::min(threads.compute_intra_op, cores));
  } else if (const char* env = std::getenv("OMP_NUM_THREADS"); env == nullptr || *env == '\0') {
    at::set_num_threads(cores);
  }
  if (threads.compute_inter_op > 0) {
    // Settable once per process, before any inter-op work; later calls are refused.
    try {
      at::set_num_interop_threads(std::min(threads.compute_inter_op, cores));
    } catch (const std::exception&) {
      spdlog::debug("inter-op threads already fixed for this process");
    }
  }
}

}  // namespace

Engine::Engine(const model::Spec& spec, const model::WeightSource& source, const Policy& policy,
               const EngineOptions& options, const Workload& max_workload)
    : spec_(spec), policy_(policy), options_(options) {
  policy_.validate();
  plan_ = plan_memory(spec_, policy_, max_workload, options_.device.dtype_bytes());
  const std::string over = plan_.over_budget(options_.budgets);
  if (!over.empty()) {
    throw InfeasibleError(fmt::format(
        "policy does not fit for prompt length {} and {} new tokens: {}. Lower the gpu batch size or number of "
        "gpu batches, move more to cpu/disk (--percent), enable compression, or raise the budget; "
        "`tiergen policy` searches for one that fits",
        max_workload.prompt_len, max_workload.gen_len, over));
  }
  apply_threads(policy_.threads);
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
                                           options_.device.compute.is_cpu() && !options_.dequantize_weights_on_cpu);
}

Engine::~Engine() = default;

std::vector<std::vector<size_t>> Engine::make_blocks(const std::vector<SequenceRequest>& requests) const {
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
      // batch whose sequences are done drops out of the schedule while longer ones still
      // generate. (Prompt lengths within a gpu batch are left mixed: its prefill runs
      // by groups of similar length, block_compute.cpp.)
      std::stable_sort(block.begin(), block.end(), [&](size_t a, size_t b) {
        return requests[a].max_new_tokens < requests[b].max_new_tokens;
      });
      blocks.push_back(std::move(block));
    }
  }
  return blocks;
}

void Engine::generate(const std::vector<SequenceRequest>& requests, const ResultCallback& on_result,
                      const TokenCallback& on_token) {
  BlockRunner runner(spec_, policy_, *weights_, *tiers_, options_.device, stats_, options_.faults);
  // A block with fewer sequences than the policy's (the job's last one) runs at its
  // own size rather than padded to the full block: same placement, fewer rows.
  Policy partial_policy;
  std::unique_ptr<BlockRunner> partial_runner;
  auto runner_for = [&](size_t sequences) -> BlockRunner& {
    const Policy fitted = policy_.fitted_to(static_cast<int64_t>(sequences));
    if (fitted.block_size() == policy_.block_size()) return runner;
    if (!partial_runner || partial_policy.gpu_batch_size != fitted.gpu_batch_size ||
        partial_policy.num_gpu_batches != fitted.num_gpu_batches) {
      partial_runner.reset();
      partial_policy = fitted;
      partial_runner = std::make_unique<BlockRunner>(spec_, partial_policy, *weights_, *tiers_, options_.device, stats_,
                                                     options_.faults);
      spdlog::debug("block of {} sequences runs as {} x {}", sequences, fitted.gpu_batch_size, fitted.num_gpu_batches);
    }
    return *partial_runner;
  };
  for (const auto& indices : make_blocks(requests)) {
    std::vector<SequenceRequest> block;
    int64_t padded_len = 0;
    for (size_t i : indices) {
      block.push_back(requests[i]);
      padded_len = std::max<int64_t>(padded_len, static_cast<int64_t>(requests[i].prompt.size()));
    }
    const uint64_t disk_mark = tiers_->disk ? tiers_->disk->mark() : 0;
    TokenCallback block_on_token;  // the runner's block slot -> the request's index
    if (on_token) block_on_token = [&](size_t slot, int64_t token) { on_token(indices[slot], token); };
    const auto results = runner_for(block.size()).run(block, block_on_token);
    if (tiers_->disk) tiers_->disk->reset_to(disk_mark);
    for (size_t s = 0; s < indices.size(); ++s) {
      stats_.sequences += 1;
      stats_.prompt_tokens += padded_len;
      const auto n = static_cast<int64_t>(results[s].tokens.size());
      stats_.generated_tokens += n;
      stats_.decode_tokens += std::max<int64_t>(0, n - 1);
      on_result(indices[s], results[s]);
    }
  }
  stats_.peak_bytes = tiers_->peaks();
  stats_.budgets[Tier::Gpu] = options_.budgets.gpu;
  stats_.budgets[Tier::Cpu] = options_.budgets.cpu;
  stats_.budgets[Tier::Disk] = options_.budgets.disk;
}

std::vector<SequenceResult> Engine::generate(const std::vector<SequenceRequest>& requests) {
  std::vector<SequenceResult> results(requests.size());
  generate(requests, [&](size_t i, const SequenceResult& r) { results[i] = r; });
  return results;
}

}  // namespace tiergen::runtime
