#pragma once
// FlexGen's zig-zag block schedule (flexgen.txt section 4.1, Algorithm 1): for each
// generated token, each layer, each gpu batch k of the block: load the next layer's
// weights (once per layer), load the KV cache and hidden states of batch k+1, store
// those of batch k-1, compute batch k. With overlap on, loads and stores run on
// their own workers while the calling thread computes; each step ends with a sync.
// In CUDA builds each worker has its own stream: a load returns once its copies are
// queued, with an event the compute stream waits on (device_event.h); a store
// records an event its readers' streams wait on, and finishes when its stream has
// drained; no step synchronizes the whole device. Weights are loaded by a worker of
// their own, so the next gpu batch's cache and hidden states never queue behind a
// whole layer of weights (FlexGen's separate load-weight and load-cache streams).
#include <array>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "tiergen/model/spec.h"
#include "tiergen/runtime/block_schedule.h"
#include "tiergen/runtime/device.h"
#include "tiergen/runtime/device_event.h"
#include "tiergen/runtime/kv_cache.h"
#include "tiergen/runtime/sampler.h"
#include "tiergen/runtime/stage.h"
#include "tiergen/runtime/stage_link.h"
#include "tiergen/runtime/stats.h"
#include "tiergen/runtime/weight_store.h"
#include "tiergen/runtime/worker.h"

namespace tiergen::runtime {

struct SequenceRequest {
  int64_t index = 0;                 // stream index for sampling (the prompt's index)
  std::vector<int64_t> prompt;
  int64_t max_new_tokens = 0;
  SamplingParams sampling;
  bool ignore_eos = false;           // do not stop at end-of-sequence tokens
  std::vector<int64_t> stop_token_ids;  // also end the sequence (after min_tokens)
  // Asked after each token once min_tokens are out (the tokens so far); true ends the
  // sequence with finish_reason "stop". The caller matches stop strings on decoded text.
  std::function<bool(const std::vector<int64_t>& tokens)> should_stop;
  // -1: the prompt is not scored; k >= 0: the log-probability of every prompt token
  // after the first (given the ones before it), with its k most likely alternatives.
  int64_t prompt_logprobs = -1;
};

struct SequenceResult {
  std::vector<int64_t> tokens;
  std::string finish_reason;  // "stop" or "length"
  std::optional<int64_t> stop_token;      // the stop_token_ids entry that ended it
  std::vector<TokenLogprob> logprobs;     // one per token when sampling.logprobs >= 0
  std::vector<TokenLogprob> prompt_logprobs;  // prompt tokens 2..len when prompt_logprobs >= 0
  // Set: the sequence failed (finish_reason "error"); the tokens before it are kept.
  std::optional<std::string> error;
};

// Called with a sequence's position in the block and its tokens as they are sampled.
using TokenCallback = std::function<void(size_t slot, int64_t token)>;

// Fault injection for tests: each field reintroduces a known ordering bug, so a test
// can show that async stream emulation (emulated_stream.h) catches it.
struct ScheduleFaults {
  // Readers of a stored hidden state wait for the store task on the host but not for
  // its copies on the storer's stream (the race this schedule once had).
  bool skip_hidden_store_wait = false;
  // Each weight load on the weight loader's worker takes at least this long (a slow
  // link), so a test can see what waits for it.
  int slow_weight_loads_ms = 0;
  // The compute step of this weight layer throws, as a failed kernel would, while the
  // loaders' copies for the next step may still be queued on their streams.
  int64_t fail_compute_at_layer = -1;
};

// The part of the model this process computes, and its link to the other stages
// (none for a single process, which is the one stage holding every layer).
struct PipelineStage {
  StageLayers layers;
  StageLink* link = nullptr;
};

// What a run of the schedule takes in and hands out. A run holds num_gpu_batches batch
// slots of gpu_batch_size rows. A slot whose sequences are all done hands their results
// out and takes the next gpu batch from `next_batch`: as soon as it is free
// (`refill_each_batch`), or once every slot is free (one block after another). A
// refilled batch runs its prefill in the same pass as the other batches' decode
// tokens, sharing that pass's weight loads.
struct RunFeed {
  // The next gpu batch's sequences (1 to gpu_batch_size of them); none: the job has
  // no more. Every stage of a pipeline must hand out the same batches in the same order.
  std::function<std::vector<SequenceRequest>()> next_batch;
  bool refill_each_batch = true;
  // The longest prompt and max_new_tokens of every sequence the feed hands in: the
  // KV cache and activation homes are made once, this large, and reused.
  int64_t max_prompt_len = 0, max_new_tokens = 0;
  // Called with a sequence's run slot (the run's sequences numbered in the order the
  // feed handed them in) and each token as it is sampled.
  TokenCallback on_token;
  // A sequence's result, as soon as every sequence of its gpu batch is done. On a
  // pipeline only the last stage's hold tokens.
  std::function<void(size_t slot, SequenceResult&& result)> on_result;
  // Names the run's pipeline messages: stages run one run per group at once.
  int64_t group = 0;
};

// One run on its way through the schedule (block_state.h).
struct BlockRun;

class BlockRunner {
 public:
  BlockRunner(const model::Spec& spec, const Policy& policy, const WeightStore& weights, Tiers& tiers,
              const DeviceContext& device, Stats& stats, const ScheduleFaults& faults = {},
              const PipelineStage& stage = {});
  ~BlockRunner();

  const Policy& policy() const { return policy_; }

  // Runs the feed's sequences a pass at a time (each running gpu batch's next token),
  // so a pipeline stage can interleave the runs of several groups: while the next
  // stage computes one group's pass, this one computes the next group's. Sequences
  // cost compute only while they generate: from their first decode token on, finished
  // sequences and padding rows leave their gpu batch's matmuls and attention
  // (live_rows.h), and a batch with none left hands out its results and takes the next
  // sequences or drops out. `run_token` returns false, running nothing, once the feed
  // is spent and every batch is done; `finish` then waits for what is in flight.
  std::unique_ptr<BlockRun> start(RunFeed feed);
  bool run_token(BlockRun& run);
  void finish(BlockRun& run);

 private:
  struct BatchState;
  struct Pending;
  friend struct BlockRun;

  // Hands out the results of batches whose sequences are all done, and fills free
  // batch slots from the feed. The same decisions on every stage of a pipeline.
  void retire_done_batches(BlockRun& run);
  void fill_free_batches(BlockRun& run);
  void fill_batch(BlockRun& run, int64_t k, std::vector<SequenceRequest>&& sequences);
  // Lists the batches that run in this pass and marks their live rows.
  void start_pass(BlockRun& run);
  void start_token(BatchState& b, Pending& pending);
  static std::vector<int64_t> prefill_sources(const BatchState& batch, const std::vector<SequenceRequest>& requests);
  // Step (pass, j) of the n-th batch that runs in this pass.
  void run_step(int64_t pass, int64_t j, size_t n, std::vector<BatchState>& batches, Pending& pending);
  void compute_step(int64_t pass, int64_t j, int64_t k, std::vector<BatchState>& batches, Pending& pending);
  void sample_step(bool prefill, BatchState& batch, const at::Tensor& logits, Pending& pending);
  void score_prompts(const BatchState& b, const model::LayerWeights& w, const at::Tensor& hidden, Pending& pending);
  void prefetch_next_batch(int64_t pass, int64_t j, size_t n, std::vector<BatchState>& batches, Pending& pending);
  void submit_owed_stores(Pending& pending);
  // This pass's weights of layer j: the prefetched ones when they were loaded for the
  // pass's phase (or the phases load alike), else loaded now.
  void take_weights(int64_t pass, int64_t j, Pending& pending);
  // Pipeline messages of one pass (stage_link.h): hidden states in from the previous
  // stage and out to the next; the last stage's sampled tokens and finished rows out
  // to every other stage, which apply them before their next pass.
  void receive_hidden(BlockRun& run);
  void send_hidden(BlockRun& run);
  void send_feedback(BlockRun& run);
  void receive_feedback(BlockRun& run);
  // The weight layer to prefetch after `layer`; -1 for none.
  int64_t next_weight_layer(int64_t layer) const;
  // Orders this thread's stream after a hidden-state store (waits on the host for the
  // store to be queued, then on the device for its copies).
  void wait_for_store(const std::shared_future<DeviceEvent>& stored) const;
  // After a failure: every task queued on the workers has run, and every copy those
  // tasks and the compute thread queued on their streams has completed, so the homes
  // and staging buffers they read or write may go (homes are unregistered and unmapped
  // as the engine unwinds; queued DMA would still use them).
  void settle_after_failure();

  const model::Spec& spec_;
  const Policy& policy_;
  const WeightStore& weights_;
  Tiers& tiers_;
  DeviceContext device_;
  Stats& stats_;
  ScheduleFaults faults_;
  std::vector<int64_t> eos_ids_;
  PipelineStage stage_;
  // The schedule's queues other than compute (block_schedule.h), one worker each,
  // indexed by schedule::Queue. Kept across blocks (threads and streams are not free
  // to make).
  // (Compute is the last queue: it is this thread, not a worker.)
  static_assert(static_cast<int>(schedule::Queue::Compute) == schedule::kNumQueues - 1);
  std::array<std::unique_ptr<Worker>, schedule::kNumQueues - 1> workers_;
  // The worker of the queue the schedule runs `task` on.
  Worker& worker_for(Task task, int64_t batches_in_pass) const;
};

}  // namespace tiergen::runtime
