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
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "tiergen/model/spec.h"
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
};

// The part of the model this process computes, and its link to the other stages
// (none for a single process, which is the one stage holding every layer).
struct PipelineStage {
  StageLayers layers;
  StageLink* link = nullptr;
};

// One block on its way through the schedule (block_state.h).
struct BlockRun;

class BlockRunner {
 public:
  BlockRunner(const model::Spec& spec, const Policy& policy, const WeightStore& weights, Tiers& tiers,
              const DeviceContext& device, Stats& stats, const ScheduleFaults& faults = {},
              const PipelineStage& stage = {});
  ~BlockRunner();

  // Runs up to gbs * ngb sequences; a partial block is filled with padding rows.
  // Sequences cost compute only while they generate: from the first decode token on,
  // finished sequences and padding rows leave their gpu batch's matmuls and attention
  // (live_rows.h), a batch with none left skips its steps (loads, compute, stores),
  // and the block ends when its last sequence does.
  std::vector<SequenceResult> run(const std::vector<SequenceRequest>& block, const TokenCallback& on_token = {});

  // The same, a token at a time, so a pipeline stage can interleave the blocks of
  // several groups: while the next stage computes one group's token, this one computes
  // the next group's. `group` names the block's messages. `run_token` returns false,
  // running nothing, once the block is done; `finish` then hands out the results (on a
  // pipeline, only the last stage's hold tokens).
  std::unique_ptr<BlockRun> start(const std::vector<SequenceRequest>& block, const TokenCallback& on_token = {},
                                  int64_t group = 0);
  bool run_token(BlockRun& run);
  std::vector<SequenceResult> finish(BlockRun& run);

 private:
  struct BatchState;
  struct Pending;
  friend struct BlockRun;

  // Marks each gpu batch's live rows for token i and lists the batches that run.
  void start_token(int64_t i, std::vector<BatchState>& batches, Pending& pending);
  static std::vector<int64_t> prefill_sources(const BatchState& batch, const std::vector<SequenceRequest>& requests);
  // Step (i, j) of the n-th batch that runs at token i.
  void run_step(int64_t i, int64_t j, size_t n, std::vector<BatchState>& batches, Pending& pending);
  void compute_step(int64_t i, int64_t j, int64_t k, std::vector<BatchState>& batches, Pending& pending);
  void sample_step(bool prefill, BatchState& batch, const at::Tensor& logits, Pending& pending);
  void score_prompts(const BatchState& batch, const model::LayerWeights& weights, const at::Tensor& hidden,
                     Pending& pending);
  void prefetch_next_batch(int64_t i, int64_t j, size_t n, std::vector<BatchState>& batches, Pending& pending);
  void submit_owed_stores(Pending& pending);
  // Pipeline messages of one token (stage_link.h): hidden states in from the previous
  // stage and out to the next; the last stage's sampled tokens and finished rows out
  // to every other stage, which apply them before their next token.
  void receive_hidden(BlockRun& run);
  void send_hidden(BlockRun& run);
  void send_feedback(BlockRun& run);
  void receive_feedback(BlockRun& run);
  // The weight layer to prefetch after `layer`; -1 for none.
  int64_t next_weight_layer(int64_t layer) const;
  // Orders this thread's stream after a hidden-state store (waits on the host for the
  // store to be queued, then on the device for its copies).
  void wait_for_store(const std::shared_future<DeviceEvent>& stored) const;
  void drain_workers();

  const model::Spec& spec_;
  const Policy& policy_;
  const WeightStore& weights_;
  Tiers& tiers_;
  DeviceContext device_;
  Stats& stats_;
  ScheduleFaults faults_;
  std::vector<int64_t> eos_ids_;
  PipelineStage stage_;
  // Kept across blocks (threads and streams are not free to make).
  std::unique_ptr<Worker> weight_loader_, cache_loader_, storer_;
};

}  // namespace tiergen::runtime
