#pragma once
// runtime::Engine: runs any number of sequences through the block schedule under a
// policy. Construction checks the policy against the budgets with the exact byte
// accounting (placement.h) before reading a single weight, then places the weights.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tiergen/model/weight_source.h"
#include "tiergen/runtime/block_runner.h"

namespace tiergen::runtime {

struct EngineOptions {
  DeviceContext device;
  Budgets budgets;
  std::string offload_dir = "/tmp/tiergen-offload";
  int io_threads = 4;
  // Prompts are sorted by length within windows of this many blocks to cut padding;
  // a gpu batch is padded to its own longest prompt, never to the job's.
  int64_t length_window_blocks = 4;
  // A gpu batch whose sequences are all done takes the job's next ones at once, while
  // the other batches of its block still generate (RunFeed::refill_each_batch); off:
  // the next block starts when every batch of the last one is done.
  bool refill_batches = true;
  ScheduleFaults faults;  // tests only (block_runner.h)
  // Tests only: compressed weights are dequantized to a dense copy at each layer load,
  // as on a GPU, even when the CPU computes (which otherwise reads them in place), so
  // the GPU's weight path runs in CI too.
  bool dequantize_weights_on_cpu = false;
  // A pipeline of one process per stage (stage_link.h): this process computes the
  // layers of stage link->rank() of link->world_size() (split_stages) and runs as
  // many runs at once as there are stages, so every stage has one to compute.
  // Null: one process, every layer.
  std::shared_ptr<StageLink> link;
  // Keep every task's span for write_trace (task_timeline.h). On CUDA, tasks are
  // timed on their streams either way; this only keeps the spans.
  bool keep_trace = false;
};

using ResultCallback = std::function<void(size_t request, const SequenceResult& result)>;

class TaskTimeline;

class Engine {
 public:
  // `max_workload` is the longest prompt and generation any block will see.
  Engine(const model::Spec& spec, const model::WeightSource& source, const Policy& policy,
         const EngineOptions& options, const Workload& max_workload);
  ~Engine();

  // Runs every request; `on_result` is called as each gpu batch finishes (any order).
  // `on_token`, when given, is called on this thread with a request's index and each
  // token as it is sampled (progress reporting; the result still comes in on_result).
  void generate(const std::vector<SequenceRequest>& requests, const ResultCallback& on_result,
                const TokenCallback& on_token = {});
  // Convenience: results in request order.
  std::vector<SequenceResult> generate(const std::vector<SequenceRequest>& requests);

  // A job run in parts (a re-planned job, src/cli/first_block_replan.h): the blocks
  // `generate(requests)` runs, in order (indices into `requests`; prompts sorted by
  // length within windows of blocks), and the run of some of them in the whole job's
  // gpu batches (the runner of a job of `job_sequences`). A part does not refill its
  // batches from the next part, so where a mixed refill pass computes differently
  // (first_block_replan.h: job_replans) the caller must not split the job.
  std::vector<std::vector<size_t>> blocks(const std::vector<SequenceRequest>& requests) const;
  void generate_blocks(const std::vector<SequenceRequest>& requests, const std::vector<std::vector<size_t>>& blocks,
                       size_t job_sequences, const ResultCallback& on_result, const TokenCallback& on_token = {});

  const Stats& stats() const { return stats_; }
  // Forgets the runs so far: stats() then counts from the next run on (a run that is
  // read alone, as bench's settling run). Not while a run is in progress.
  void clear_stats() { stats_.clear_counts(); }
  const MemoryPlan& memory_plan() const { return plan_; }
  const Policy& policy() const { return policy_; }
  const StageShape& stage() const { return stage_; }

  // The kept task spans (EngineOptions::keep_trace) as a Chrome trace; `clear_trace`
  // drops those kept so far (bench keeps its last measured run).
  void write_trace(const std::string& path) const;
  void clear_trace();

 private:
  // The runner for a job of `sequences` (a job smaller than a block runs at its own size).
  BlockRunner& runner_for(size_t sequences);
  PipelineStage pipeline_stage() const;
  void run_job(const std::vector<SequenceRequest>& requests, const std::vector<std::vector<size_t>>& blocks,
               size_t job_sequences, const ResultCallback& on_result, const TokenCallback& on_token);

  model::Spec spec_;
  Policy policy_;
  EngineOptions options_;
  StageShape stage_;
  MemoryPlan plan_;
  Stats stats_;
  std::unique_ptr<TaskTimeline> timeline_;  // null on the CPU without a trace
  std::unique_ptr<Tiers> tiers_;
  std::vector<Reservation> scratch_;
  std::unique_ptr<WeightStore> weights_;
  std::unique_ptr<BlockRunner> runner_, partial_runner_;
  Policy partial_policy_;
};

}  // namespace tiergen::runtime
