#pragma once
// What BlockRunner carries through one block's schedule: the state of each gpu batch
// and the prefetched inputs and owed stores passed from one step to the next. Shared
// by the schedule (block_runner.cpp) and the compute of one step (block_compute.cpp).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tiergen/runtime/block_runner.h"
#include "tiergen/runtime/kv_cache.h"
#include "tiergen/runtime/live_rows.h"
#include "tiergen/runtime/split_tensor.h"

namespace tiergen::runtime {

// Computed rows [begin, begin + count) of a gpu batch (LiveRows::indices() order: each
// distinct prompt once) whose prefill runs over the last `len`
// positions of the batch's window: prompts within 25% of each other in length, so
// short prompts in a batch with long ones do not pay for the longest.
struct PrefillRows {
  int64_t begin = 0, count = 0, len = 0;
};

// Everything one gpu batch carries through the schedule. A batch slot of a run holds
// one gpu batch of sequences at a time; once they are all done it takes the next ones
// (BlockRun::next_batch), so each batch has its own prompt window and token count.
struct BlockRunner::BatchState {
  std::vector<int64_t> slots;  // run slot of each row; -1 for padding rows; empty: holds nothing
  int64_t S = 0;               // the batch's prompt window: its longest prompt
  int64_t token = 0;           // the batch's next token (0: its prefill)
  at::Tensor prompt_ids;       // [gbs, S] host, left-padded
  at::Tensor pad;              // [gbs] host
  at::Tensor pad_on_device;    // the same on the compute device, uploaded once per batch
  // The prefill runs over the batch's own longest prompt: positions [S - prefill_len, S)
  // of the batch's layout. Every row's padding covers the positions before them, and
  // the KV cache holds zeros there (never read unmasked, never NaN).
  int64_t prefill_len = 0;
  at::Tensor prefill_pad_on_device;  // [gbs] padding within that window
  std::vector<PrefillRows> prefill_groups;  // of the computed rows, set at the prefill
  at::Tensor next_ids;         // [gbs, 1] host: tokens sampled at the last step
  std::unique_ptr<SplitTensor> hidden;  // activation home [gbs, longest prompt of the run, h]
  std::vector<SequenceSampler> samplers;
  // Set at the start of each pass (BlockRunner::start_token):
  model::StepInputs step;      // positions of the token, built on the compute device
  LiveRows live;               // rows still generating
  model::StepInputs live_step; // `step` for the live rows (decode tokens)
  DecodeUnitMasks unit_masks;  // what the token's decode attention shares across layers

  bool holds() const { return !slots.empty(); }
  bool prefilling() const { return token == 0; }
};

// Prefetched inputs and owed stores, carried from one step to the next.
struct BlockRunner::Pending {
  std::unique_ptr<KvCache> cache;
  std::shared_ptr<LoadedLayer> weights;  // layer being computed
  int64_t weights_layer = -1;
  std::shared_future<std::shared_ptr<LoadedLayer>> next_weights;
  int64_t next_weights_layer = -1;
  bool next_weights_prefill = false;  // the phase next_weights was loaded for
  std::map<std::pair<int64_t, int64_t>, std::shared_future<std::shared_ptr<CacheLoad>>> cache_loads;
  std::map<std::pair<int64_t, int64_t>, std::shared_future<Staged>> hidden_loads;
  // Per batch: its last hidden store, done when queued; its event marks the copies.
  std::vector<std::shared_future<DeviceEvent>> hidden_stored;
  std::vector<std::function<void()>> owed_stores;       // results of the last compute
  std::vector<std::function<void()>> in_flight;         // waits for everything submitted this step
  int64_t L = 0, NL = 0;
  int64_t trace_block = -1;  // the run's number on the task timeline (StepId::block)
  // The step (pass, j, k) of this run, as task spans name it.
  StepId step_id(int64_t pass, int64_t j, int64_t k) const { return {pass, j, k, trace_block}; }
  // The gpu batches that run in this pass, in schedule order: a batch whose sequences
  // have all finished drops out of the zig-zag (no loads, compute, stores).
  std::vector<int64_t> order;
  // Some batch of the pass runs its prefill: the pass's weights are loaded for the
  // prefill (WeightStore::load), and its time counts as prefill time.
  bool pass_prefill = false;
  std::vector<std::vector<int64_t>>* outputs = nullptr;
  std::vector<bool>* finished = nullptr;
  std::vector<std::string>* reasons = nullptr;
  std::vector<SequenceResult>* details = nullptr;  // logprobs and stop token per sequence
  const std::vector<SequenceRequest>* requests = nullptr;
  const TokenCallback* on_token = nullptr;
};

// One run between BlockRunner::start and finish: the sequences handed in so far
// (owned, indexed by run slot), their results until their batch hands them out, and
// the schedule's state between passes.
struct BlockRun {
  RunFeed feed;
  int64_t pass = 0;    // passes run so far (each running batch's next token)
  bool over = false;   // run_token returned false
  std::vector<SequenceRequest> requests;
  std::vector<std::vector<int64_t>> outputs;
  std::vector<bool> finished;
  std::vector<std::string> reasons;
  std::vector<SequenceResult> details;
  std::vector<BlockRunner::BatchState> batches;
  BlockRunner::Pending pending;
  // Pipeline sends of the last pass still in flight (each holds its buffer): waited
  // for before the next pass of this run.
  std::vector<std::function<void()>> sends;
};

}  // namespace tiergen::runtime
