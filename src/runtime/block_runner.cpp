#include "tiergen/runtime/block_runner.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <map>

#include "src/runtime/block_state.h"
#include "tiergen/common/error.h"
#include "tiergen/runtime/block_schedule.h"
#include "tiergen/runtime/device.h"
#include "tiergen/runtime/task_timeline.h"
#include "tiergen/model/forward.h"

namespace tiergen::runtime {

BlockRunner::BlockRunner(const model::Spec& spec, const Policy& policy, const WeightStore& weights, Tiers& tiers,
                         const DeviceContext& device, Stats& stats, const ScheduleFaults& faults,
                         const PipelineStage& stage)
    : spec_(spec), policy_(policy), weights_(weights), tiers_(tiers), device_(device), stats_(stats), faults_(faults),
      eos_ids_(spec.eos_token_ids), stage_(stage) {
  if (stage_.layers.end == 0) stage_.layers = StageLayers::whole(spec_);
  const DeviceContext worker_device = device_;
  auto give_stream = [worker_device] { worker_device.use_own_stream(); };
  for (auto& queue : workers_) queue = std::make_unique<Worker>(policy_.overlap, give_stream);
}

BlockRunner::~BlockRunner() = default;  // workers run what is queued, then join

void BlockRunner::wait_for_store(const std::shared_future<DeviceEvent>& stored) const {
  if (!stored.valid()) return;
  const DeviceEvent copies_done = stored.get();
  if (!faults_.skip_hidden_store_wait) copies_done.make_current_stream_wait(device_);
}

void BlockRunner::settle_after_failure() {
  // A stream's own failure is the one being reported already (or a consequence of
  // it): a synchronize that meets it has still waited for the stream.
  const DeviceContext device = device_;
  auto synchronize = [device] {
    try {
      device.synchronize();
    } catch (...) {
    }
  };
  for (auto& queue : workers_) {
    if (queue) queue->submit(synchronize).wait();
  }
  synchronize();
}

Worker& BlockRunner::worker_for(Task task, int64_t batches_in_pass) const {
  const schedule::Queue queue = schedule::queue_of(task, batches_in_pass);
  TG_CHECK(queue != schedule::Queue::Compute, "internal: task {} runs on the compute queue, not a worker",
           task_name(task));
  return *workers_[static_cast<size_t>(queue)];
}

namespace {

// Positions of token i (the whole prompt at i = 0) from the padding, with device ops
// only: no host-to-device copy per layer.
model::StepInputs step_inputs(const at::Tensor& pad, int64_t i, int64_t S) {
  model::StepInputs step;
  step.pad = pad;
  if (i == 0) {
    step.positions = at::clamp_min(at::arange(S, pad.options()).unsqueeze(0) - pad.unsqueeze(1), 0);
    step.past_len = 0;
  } else {
    step.past_len = S + i - 1;
    step.positions = (step.past_len - pad).unsqueeze(1);
  }
  return step;
}

// Consecutive computed rows (in gather order: shortest prompt first,
// BlockRunner::start_token) whose prompt lengths are within 25% of each other share a
// prefill group: a group computes over its longest prompt, so no row pays for more than
// 1.25 times its own length, and a group costs a few more op launches per layer.
// `lengths`: each row's prompt length; `rows`: the computed rows in gather order.
std::vector<PrefillRows> prefill_row_groups(const std::vector<int64_t>& lengths, const std::vector<int64_t>& rows) {
  std::vector<PrefillRows> groups;
  int64_t shortest = 0;
  for (int64_t r = 0; r < static_cast<int64_t>(rows.size()); ++r) {
    const int64_t len = lengths[static_cast<size_t>(rows[static_cast<size_t>(r)])];
    if (!groups.empty()) {
      PrefillRows& g = groups.back();
      const int64_t lo = std::min(shortest, len), hi = std::max(g.len, len);
      if (4 * hi <= 5 * lo) {
        g.count += 1;
        g.len = hi;
        shortest = lo;
        continue;
      }
    }
    groups.push_back(PrefillRows{r, 1, len});
    shortest = len;
  }
  return groups;
}

}  // namespace

std::unique_ptr<BlockRun> BlockRunner::start(RunFeed feed) {
  const int64_t gbs = policy_.gpu_batch_size, ngb = policy_.num_gpu_batches;
  TG_CHECK(feed.next_batch && feed.max_prompt_len > 0 && feed.max_new_tokens > 0,
           "internal: a run needs a feed of sequences and their longest prompt and generation");
  auto run = std::make_unique<BlockRun>();
  run->feed = std::move(feed);
  Pending& p = run->pending;
  // Spans of this run are placed on the host clock from here (task_timeline.h).
  if (TaskTimeline* timeline = stats_.timeline()) p.trace_block = timeline->mark_base();
  p.L = spec_.num_layers;
  p.NL = spec_.num_weight_layers();
  const int64_t longest_prompt = run->feed.max_prompt_len;
  p.cache = std::make_unique<KvCache>(spec_, policy_, tiers_, device_, longest_prompt + run->feed.max_new_tokens,
                                      stage_.layers);
  p.hidden_stored.resize(static_cast<size_t>(ngb));
  p.outputs = &run->outputs;
  p.finished = &run->finished;
  p.reasons = &run->reasons;
  p.details = &run->details;
  p.requests = &run->requests;
  p.on_token = &run->feed.on_token;

  const auto act_split = split_units(gbs, policy_.act_gpu_percent, policy_.act_cpu_percent);
  run->batches.resize(static_cast<size_t>(ngb));
  for (int64_t k = 0; k < ngb; ++k) {
    run->batches[static_cast<size_t>(k)].hidden = std::make_unique<SplitTensor>(
        tiers_, device_, act_split, longest_prompt, spec_.hidden_size, fmt::format("activations batch {}", k));
  }
  return run;
}

void BlockRunner::fill_batch(BlockRun& run, int64_t k, std::vector<SequenceRequest>&& sequences) {
  const int64_t gbs = policy_.gpu_batch_size;
  TG_CHECK(!sequences.empty() && static_cast<int64_t>(sequences.size()) <= gbs,
           "internal: gpu batch of {} sequences for a batch of {}", sequences.size(), gbs);
  BatchState& b = run.batches[static_cast<size_t>(k)];
  int64_t S = 0;
  for (const auto& r : sequences) {
    S = std::max<int64_t>(S, static_cast<int64_t>(r.prompt.size()));
    TG_CHECK(!r.prompt.empty() && r.max_new_tokens > 0, "internal: empty prompt or no tokens to generate");
    TG_CHECK(static_cast<int64_t>(r.prompt.size()) <= run.feed.max_prompt_len &&
                 r.max_new_tokens <= run.feed.max_new_tokens,
             "internal: a sequence longer than its run's homes ({} + {} > {} + {})", r.prompt.size(), r.max_new_tokens,
             run.feed.max_prompt_len, run.feed.max_new_tokens);
  }
  const auto first_slot = static_cast<int64_t>(run.requests.size());
  b.S = S;
  b.token = 0;
  b.slots.clear();
  b.samplers.clear();
  b.prompt_ids = at::zeros({gbs, S}, at::kLong);
  b.pad = at::full({gbs}, S - 1, at::kLong);  // padding rows: one token
  b.next_ids = at::zeros({gbs, 1}, at::kLong);
  for (int64_t r = 0; r < gbs; ++r) {
    if (r >= static_cast<int64_t>(sequences.size())) {
      b.slots.push_back(-1);
      b.samplers.emplace_back(SamplingParams{}, 0);
      continue;
    }
    const SequenceRequest& request = sequences[static_cast<size_t>(r)];
    const int64_t pad = S - static_cast<int64_t>(request.prompt.size());
    for (size_t t = 0; t < request.prompt.size(); ++t) b.prompt_ids[r][pad + static_cast<int64_t>(t)] = request.prompt[t];
    b.pad[r] = pad;
    b.slots.push_back(first_slot + r);
    b.samplers.emplace_back(request.sampling, static_cast<uint64_t>(request.index));
  }
  b.pad_on_device = copy_to_device(b.pad, device_.compute);
  b.prefill_len = S - b.pad.min().item<int64_t>();
  b.prefill_pad_on_device = copy_to_device(b.pad - (S - b.prefill_len), device_.compute);
  b.prefill_groups.clear();
  for (auto& request : sequences) run.requests.push_back(std::move(request));
  run.outputs.resize(run.requests.size());
  run.finished.resize(run.requests.size(), false);
  run.reasons.resize(run.requests.size(), "length");
  run.details.resize(run.requests.size());
}

void BlockRunner::retire_done_batches(BlockRun& run) {
  for (BatchState& b : run.batches) {
    if (!b.holds()) continue;
    const bool done = std::all_of(b.slots.begin(), b.slots.end(),
                                  [&](int64_t slot) { return slot < 0 || run.finished[static_cast<size_t>(slot)]; });
    if (!done) continue;
    for (const int64_t slot : b.slots) {
      if (slot < 0) continue;
      const auto s = static_cast<size_t>(slot);
      SequenceResult result = std::move(run.details[s]);
      result.tokens = std::move(run.outputs[s]);
      result.finish_reason = run.reasons[s];
      const auto n = static_cast<int64_t>(result.tokens.size());
      stats_.sequences += 1;
      stats_.prompt_tokens += static_cast<int64_t>(run.requests[s].prompt.size());
      stats_.padded_prompt_tokens += b.S;
      stats_.generated_tokens += n;
      stats_.decode_tokens += std::max<int64_t>(0, n - 1);
      if (run.feed.on_result) run.feed.on_result(s, std::move(result));
    }
    b.slots.clear();
  }
}

void BlockRunner::fill_free_batches(BlockRun& run) {
  const bool all_free = std::none_of(run.batches.begin(), run.batches.end(), [](const BatchState& b) { return b.holds(); });
  if (!run.feed.refill_each_batch && !all_free) return;
  for (size_t k = 0; k < run.batches.size(); ++k) {
    if (run.batches[k].holds()) continue;
    std::vector<SequenceRequest> sequences = run.feed.next_batch();
    if (sequences.empty()) return;
    fill_batch(run, static_cast<int64_t>(k), std::move(sequences));
    if (!all_free) stats_.refilled_batches += 1;
  }
}

bool BlockRunner::run_token(BlockRun& run) {
  if (run.over) return false;
  Pending& p = run.pending;
  const int64_t pass = run.pass;
  StageLink* link = stage_.link;
  try {
    // The last pass's sends are out before this pass reuses what they read.
    for (auto& wait : run.sends) wait();
    run.sends.clear();
    if (pass > 0 && link && !link->is_last()) receive_feedback(run);
    // The same decisions on every stage, from the same state: all stages retire and
    // refill the same batches, and leave the run together.
    retire_done_batches(run);
    fill_free_batches(run);
    if (std::none_of(run.batches.begin(), run.batches.end(), [](const BatchState& b) { return b.holds(); })) {
      run.over = true;
      return false;
    }
    const auto start = std::chrono::steady_clock::now();
    start_pass(run);
    if (link && !link->is_first()) receive_hidden(run);
    for (int64_t j = stage_.layers.first; j < stage_.layers.end; ++j) {
      for (size_t n = 0; n < p.order.size(); ++n) run_step(pass, j, n, run.batches, p);
    }
    // Flush what the last step owes before the next pass reads it.
    submit_owed_stores(p);
    for (auto& wait : p.in_flight) wait();
    p.in_flight.clear();
    p.cache->check_quantization();
    if (link) {
      // The next run of this stage must not find this one's weights still held.
      p.weights.reset();
      p.weights_layer = -1;
      // Every pass is followed by the sampled tokens, which the other stages take at
      // the start of their next call (the one that ends the run included).
      if (!link->is_last()) send_hidden(run);
      else send_feedback(run);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    (p.pass_prefill ? stats_.prefill_seconds : stats_.decode_seconds) += seconds;
    // Spans whose work is done free their events (the rest wait for the next pass).
    if (TaskTimeline* timeline = stats_.timeline()) timeline->collect(stats_, false);
  } catch (...) {
    settle_after_failure();
    throw;
  }
  for (const int64_t k : p.order) run.batches[static_cast<size_t>(k)].token += 1;
  // The token's masks go with it (the next pass builds its own), retired batches' too.
  for (BatchState& b : run.batches) b.unit_masks = DecodeUnitMasks{};
  run.pass = pass + 1;
  stats_.passes += 1;
  if (!p.pass_prefill) stats_.decode_passes += 1;
  return true;
}

void BlockRunner::finish(BlockRun& run) {
  for (auto& wait : run.sends) wait();
  run.sends.clear();
  // The last pass's prefetch of the first layer is not needed: let it end before the
  // run's memory goes (a failure there is the next run's to meet, when it loads
  // that layer itself).
  if (run.pending.next_weights.valid()) run.pending.next_weights.wait();
  run.pending.next_weights = {};
  if (TaskTimeline* timeline = stats_.timeline()) timeline->collect(stats_, true);
  retire_done_batches(run);
}

// The prefill's rows: each sequence's first row with the same prompt computes it for
// all of them (the n samples of one request share their prefill), padding rows none.
std::vector<int64_t> BlockRunner::prefill_sources(const BatchState& b, const std::vector<SequenceRequest>& requests) {
  std::vector<int64_t> source(b.slots.size(), -1);
  std::map<std::vector<int64_t>, int64_t> first_with_prompt;
  for (size_t r = 0; r < b.slots.size(); ++r) {
    if (b.slots[r] < 0) continue;
    const auto& prompt = requests[static_cast<size_t>(b.slots[r])].prompt;
    source[r] = first_with_prompt.emplace(prompt, static_cast<int64_t>(r)).first->second;
  }
  return source;
}

// The batches that run in this pass: every batch with live rows. A refilled batch's
// prefill shares the pass with the others' decode tokens, and the pass's weights are
// loaded as for a prefill (where the policy multiplies decode weights where they live,
// the decode tokens of this pass use the loaded ones instead: one transfer serves both).
void BlockRunner::start_pass(BlockRun& run) {
  Pending& p = run.pending;
  p.order.clear();
  p.pass_prefill = false;
  for (size_t k = 0; k < run.batches.size(); ++k) {
    BatchState& b = run.batches[k];
    if (!b.holds()) continue;
    start_token(b, p);
    if (b.live.none()) continue;
    p.order.push_back(static_cast<int64_t>(k));
    p.pass_prefill = p.pass_prefill || b.prefilling();
  }
}

// Which rows of the batch still generate at its next token. Runs on the compute thread
// (it builds the step inputs on the compute device).
void BlockRunner::start_token(BatchState& b, Pending& p) {
  if (b.prefilling()) {
    // Each distinct prompt once, padding rows none, shortest first: rows of similar
    // length become consecutive and form the prefill's groups.
    std::vector<int64_t> lengths(b.slots.size());
    for (size_t r = 0; r < lengths.size(); ++r) lengths[r] = b.S - b.pad[static_cast<int64_t>(r)].item<int64_t>();
    b.live.update(prefill_sources(b, *p.requests), device_.compute, &lengths);
    b.prefill_groups = prefill_row_groups(lengths, b.live.indices());
  } else {
    std::vector<bool> live(b.slots.size(), false);
    for (size_t r = 0; r < b.slots.size(); ++r) {
      live[r] = b.slots[r] >= 0 && !(*p.finished)[static_cast<size_t>(b.slots[r])];
    }
    b.live.update(live, device_.compute);
  }
  b.step = b.prefilling() ? step_inputs(b.prefill_pad_on_device, 0, b.prefill_len)
                          : step_inputs(b.pad_on_device, b.token, b.S);
  b.unit_masks = DecodeUnitMasks{};
  if (b.live.none()) return;
  b.live_step = b.live.gather(b.step);
  // Decode: the step's shared tables once, not in each of its layers (a prefill's
  // groups build theirs per layer; they are computed once per prompt).
  if (!b.prefilling()) model::prepare_step(spec_, b.live_step, device_.compute, device_.dtype);
}

void BlockRunner::submit_owed_stores(Pending& p) {
  if (p.owed_stores.empty()) return;
  // What the stores read (a step's output, its new keys and values) the compute stream
  // produced: the storer's stream waits for it on the device.
  const DeviceEvent computed = DeviceEvent::record(device_);
  for (auto& store : p.owed_stores) {
    auto done = worker_for(Task::StoreCache, static_cast<int64_t>(p.order.size())).submit([this, computed, store = std::move(store)] {
      computed.make_current_stream_wait(device_);
      try {
        store();
      } catch (...) {
        device_.synchronize();  // what it captured is freed with it: not under queued copies
        throw;
      }
      // The storer's own stream: the data is in its home (host homes are read by
      // CPU attention and by disk writes) before the store counts as done.
      device_.synchronize();
    });
    p.in_flight.push_back([done] { done.get(); });
  }
  p.owed_stores.clear();
}

void BlockRunner::take_weights(int64_t pass, int64_t j, Pending& p) {
  p.weights.reset();
  if (p.next_weights_layer == j && p.next_weights.valid()) {
    if (p.next_weights_prefill == p.pass_prefill || weights_.loads_alike(j)) {
      p.weights = p.next_weights.get();
    } else {
      p.next_weights.wait();  // loaded for the other phase: let it go before loading again
    }
  }
  p.next_weights = {};
  p.next_weights_layer = -1;
  if (!p.weights) {
    ScopedTimer timer(stats_, Task::LoadWeight, p.pass_prefill, p.step_id(pass, j, -1));
    p.weights = weights_.load(j, p.pass_prefill);
  }
  // Loaded on the loader's stream, read on this one: freed only after this stream's
  // steps over them (the layer goes when the next layer is taken).
  for (const at::Tensor& t : p.weights->allocated) device_.used_on_current_stream(t);
  p.weights_layer = j;
}

void BlockRunner::run_step(int64_t pass, int64_t j, size_t n, std::vector<BatchState>& batches, Pending& p) {
  const int64_t k = p.order[n];
  const bool first_batch = n == 0;
  // Stores owed by the previous step go first, so loads below can wait on them.
  submit_owed_stores(p);

  // This layer's weights: prefetched by the previous layer's first step, or loaded now.
  // Taken before the next layer's prefetch replaces the future, so at most two layers
  // of loaded weights are alive at once, as plan_memory counts.
  if (first_batch && p.weights_layer != j) take_weights(pass, j, p);

  // The next gpu batch's inputs first: they are needed at the very next step.
  prefetch_next_batch(pass, j, n, batches, p);

  // Weights of the next layer, once per layer (on its first gpu batch), on their own
  // worker and stream: they have as many steps to arrive as batches run. Unlike the
  // step's other loads they are not waited for at the step's end (FlexGen's sync()
  // does): only the next layer's first step takes them. Their task lasts as long as
  // their transfer (a disk read, the CPU stand-in's copy, chunked CUDA copies:
  // DeviceContext::to_compute_in_chunks); waited for at the first batch's step end,
  // they would leave the other batches nothing to overlap.
  const int64_t next = next_weight_layer(j);
  const auto running = static_cast<int64_t>(p.order.size());
  // A layer prefetched across the pass boundary is the next pass's, most often one of
  // decode tokens (a pass of refilled batches' prefills loads it again).
  const bool next_prefill = next > j && p.pass_prefill;
  if (first_batch && next >= 0 && schedule::weights_prefetched(weights_.moves_nothing(next, next_prefill))) {
    p.next_weights_layer = next;
    p.next_weights_prefill = next_prefill;
    const StepId loads = p.step_id(next > j ? pass : pass + 1, next, -1);
    p.next_weights = worker_for(Task::LoadWeight, running).submit([this, loads, next, next_prefill] {
      ScopedTimer timer(stats_, Task::LoadWeight, next_prefill, loads);
      if (faults_.slow_weight_loads_ms > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(faults_.slow_weight_loads_ms));
      }
      return weights_.load(next, next_prefill);
    });
  }

  compute_step(pass, j, k, batches, p);

  // FlexGen's sync(): the step's loads and stores are done before the next step.
  for (auto& wait : p.in_flight) wait();
  p.in_flight.clear();
}

int64_t BlockRunner::next_weight_layer(int64_t layer) const {
  if (layer + 1 < stage_.layers.end) return layer + 1;
  // A single stage prefetches its first layer for the next token. A pipeline stage
  // does not: the next block of its groups runs first, and the layer would be held
  // across it.
  if (stage_.link || stage_.layers.end - stage_.layers.first < 2) return -1;
  return stage_.layers.first;
}

// Inputs of the next gpu batch that runs (same layer, or the first of the next layer).
// With one batch running the next layer's hidden state is what this step computes, so
// only its KV cache can be prefetched (as FlexGen does; schedule::hidden_prefetched).
void BlockRunner::prefetch_next_batch(int64_t pass, int64_t j, size_t n, std::vector<BatchState>& batches,
                                      Pending& p) {
  size_t next = n + 1;
  int64_t nj = j;
  if (next == p.order.size()) {
    next = 0;
    nj = j + 1;
  }
  if (nj >= stage_.layers.end) return;
  const int64_t nk = p.order[next];
  const auto running = static_cast<int64_t>(p.order.size());
  BatchState& nb = batches[static_cast<size_t>(nk)];
  const bool prefill = nb.prefilling();
  if (!prefill && nj >= 1 && nj <= p.L && !p.cache_loads.count({nj, nk})) {
    const int64_t pos = nb.S + nb.token - 1;
    p.cache_loads[{nj, nk}] = worker_for(Task::LoadCache, running).submit([this, &p, id = p.step_id(pass, nj, nk), nj, nk, pos] {
      ScopedTimer timer(stats_, Task::LoadCache, false, id);
      return p.cache->load(nj - 1, nk, pos);
    });
  }
  if (nj >= 1 && schedule::hidden_prefetched(running) && !p.hidden_loads.count({nj, nk})) {
    const int64_t t = prefill ? nb.prefill_len : 1;
    auto stored = p.hidden_stored[static_cast<size_t>(nk)];
    p.hidden_loads[{nj, nk}] = worker_for(Task::LoadHidden, running).submit([this, &nb, t, prefill, stored, id = p.step_id(pass, nj, nk)] {
      wait_for_store(stored);
      ScopedTimer timer(stats_, Task::LoadHidden, prefill, id);
      return nb.hidden->gather_to_compute(t);
    });
  }
}

}  // namespace tiergen::runtime
