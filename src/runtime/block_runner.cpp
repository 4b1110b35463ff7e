#include "tiergen/runtime/block_runner.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <map>

#include "src/runtime/block_state.h"
#include "tiergen/common/error.h"
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
  weight_loader_ = std::make_unique<Worker>(policy_.overlap, give_stream);
  cache_loader_ = std::make_unique<Worker>(policy_.overlap, give_stream);
  storer_ = std::make_unique<Worker>(policy_.overlap, give_stream);
}

BlockRunner::~BlockRunner() = default;  // workers run what is queued, then join

void BlockRunner::wait_for_store(const std::shared_future<DeviceEvent>& stored) const {
  if (!stored.valid()) return;
  const DeviceEvent copies_done = stored.get();
  if (!faults_.skip_hidden_store_wait) copies_done.make_current_stream_wait(device_);
}

void BlockRunner::drain_workers() {
  weight_loader_->drain();
  cache_loader_->drain();
  storer_->drain();
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

std::vector<SequenceResult> BlockRunner::run(const std::vector<SequenceRequest>& block, const TokenCallback& on_token) {
  auto block_run = start(block, on_token);
  while (run_token(*block_run)) {
  }
  return finish(*block_run);
}

std::unique_ptr<BlockRun> BlockRunner::start(const std::vector<SequenceRequest>& block, const TokenCallback& on_token,
                                             int64_t group) {
  const int64_t gbs = policy_.gpu_batch_size, ngb = policy_.num_gpu_batches;
  TG_CHECK(!block.empty() && static_cast<int64_t>(block.size()) <= gbs * ngb, "internal: block of {} sequences for {}x{}",
           block.size(), gbs, ngb);
  auto run = std::make_unique<BlockRun>();
  run->requests = block;
  run->on_token = on_token;
  run->group = group;
  int64_t S = 0;
  for (const auto& r : block) {
    S = std::max<int64_t>(S, static_cast<int64_t>(r.prompt.size()));
    run->gen_len = std::max(run->gen_len, r.max_new_tokens);
  }
  TG_CHECK(S > 0 && run->gen_len > 0, "internal: empty prompt or no tokens to generate");

  Pending& p = run->pending;
  // Spans of this block are placed on the host clock from here (task_timeline.h).
  if (TaskTimeline* timeline = stats_.timeline()) p.trace_block = timeline->mark_base();
  p.S = S;
  p.L = spec_.num_layers;
  p.NL = spec_.num_weight_layers();
  p.cache = std::make_unique<KvCache>(spec_, policy_, tiers_, device_, S + run->gen_len, stage_.layers);
  p.hidden_stored.resize(static_cast<size_t>(ngb));
  run->outputs.resize(block.size());
  run->finished.assign(block.size(), false);
  run->reasons.assign(block.size(), "length");
  run->details.resize(block.size());
  p.outputs = &run->outputs;
  p.finished = &run->finished;
  p.reasons = &run->reasons;
  p.details = &run->details;
  p.requests = &run->requests;
  p.on_token = &run->on_token;

  const auto act_split = split_units(gbs, policy_.act_gpu_percent, policy_.act_cpu_percent);
  run->batches.resize(static_cast<size_t>(ngb));
  for (int64_t k = 0; k < ngb; ++k) {
    BatchState& b = run->batches[static_cast<size_t>(k)];
    b.prompt_ids = at::zeros({gbs, S}, at::kLong);
    b.pad = at::full({gbs}, S - 1, at::kLong);  // padding rows: one token
    b.next_ids = at::zeros({gbs, 1}, at::kLong);
    for (int64_t r = 0; r < gbs; ++r) {
      const int64_t slot = k * gbs + r;
      if (slot >= static_cast<int64_t>(block.size())) {
        b.slots.push_back(-1);
        b.samplers.emplace_back(SamplingParams{}, 0);
        continue;
      }
      const auto& prompt = block[static_cast<size_t>(slot)].prompt;
      const int64_t pad = S - static_cast<int64_t>(prompt.size());
      for (size_t t = 0; t < prompt.size(); ++t) b.prompt_ids[r][pad + static_cast<int64_t>(t)] = prompt[t];
      b.pad[r] = pad;
      b.slots.push_back(slot);
      b.samplers.emplace_back(block[static_cast<size_t>(slot)].sampling, static_cast<uint64_t>(block[static_cast<size_t>(slot)].index));
    }
    b.pad_on_device = b.pad.to(device_.compute);
    b.prefill_len = S - b.pad.min().item<int64_t>();
    b.prefill_pad_on_device = (b.pad - (S - b.prefill_len)).to(device_.compute);
    b.hidden = std::make_unique<SplitTensor>(tiers_, device_, act_split, S, spec_.hidden_size,
                                             fmt::format("activations batch {}", k));
  }
  return run;
}

bool BlockRunner::run_token(BlockRun& run) {
  Pending& p = run.pending;
  const int64_t i = run.next_token;
  if (i >= run.gen_len) return false;
  StageLink* link = stage_.link;
  try {
    // The last token's sends are out before this token reuses what they read.
    for (auto& wait : run.sends) wait();
    run.sends.clear();
    if (i > 0) {
      if (link && !link->is_last()) receive_feedback(run);
      // The same test on every stage, on the same state: all leave the block together.
      if (std::all_of(run.finished.begin(), run.finished.end(), [](bool f) { return f; })) {
        run.next_token = run.gen_len;
        return false;
      }
    }
    const auto start = std::chrono::steady_clock::now();
    start_token(i, run.batches, p);
    if (link && !link->is_first()) receive_hidden(run);
    for (int64_t j = stage_.layers.first; j < stage_.layers.end; ++j) {
      for (size_t n = 0; n < p.order.size(); ++n) run_step(i, j, n, run.batches, p);
    }
    // Flush what the last step owes before the next token reads it.
    submit_owed_stores(p);
    for (auto& wait : p.in_flight) wait();
    p.in_flight.clear();
    p.cache->check_quantization();
    if (link) {
      // The next block of this stage must not find this one's weights still held.
      p.weights.reset();
      p.weights_layer = -1;
      if (!link->is_last()) send_hidden(run);
      else if (i + 1 < run.gen_len) send_feedback(run);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    (i == 0 ? stats_.prefill_seconds : stats_.decode_seconds) += seconds;
    // Spans whose work is done free their events (the rest wait for the next token).
    if (TaskTimeline* timeline = stats_.timeline()) timeline->collect(stats_, false);
  } catch (...) {
    // Let queued tasks finish before the buffers they reference go away.
    drain_workers();
    throw;
  }
  run.next_token = i + 1;
  return true;
}

std::vector<SequenceResult> BlockRunner::finish(BlockRun& run) {
  for (auto& wait : run.sends) wait();
  run.sends.clear();
  // The last token's prefetch of the first layer is not needed: let it end before the
  // block's memory goes (a failure there is the next block's to meet, when it loads
  // that layer itself).
  if (run.pending.next_weights.valid()) run.pending.next_weights.wait();
  run.pending.next_weights = {};
  if (TaskTimeline* timeline = stats_.timeline()) timeline->collect(stats_, true);
  std::vector<SequenceResult> results(run.requests.size());
  for (size_t s = 0; s < results.size(); ++s) {
    results[s] = std::move(run.details[s]);
    results[s].tokens = std::move(run.outputs[s]);
    results[s].finish_reason = run.reasons[s];
  }
  return results;
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

// Which rows of each gpu batch still generate at token i, and which batches run at
// all. Runs on the compute thread (it builds the step inputs on the compute device).
void BlockRunner::start_token(int64_t i, std::vector<BatchState>& batches, Pending& p) {
  p.order.clear();
  for (size_t k = 0; k < batches.size(); ++k) {
    BatchState& b = batches[k];
    if (i == 0) {
      // Each distinct prompt once, padding rows none, shortest first: rows of similar
      // length become consecutive and form the prefill's groups.
      std::vector<int64_t> lengths(b.slots.size());
      for (size_t r = 0; r < lengths.size(); ++r) lengths[r] = p.S - b.pad[static_cast<int64_t>(r)].item<int64_t>();
      b.live.update(prefill_sources(b, *p.requests), device_.compute, &lengths);
      b.prefill_groups = prefill_row_groups(lengths, b.live.indices());
    } else {
      std::vector<bool> live(b.slots.size(), false);
      for (size_t r = 0; r < b.slots.size(); ++r) {
        live[r] = b.slots[r] >= 0 && !(*p.finished)[static_cast<size_t>(b.slots[r])];
      }
      b.live.update(live, device_.compute);
    }
    b.step = i == 0 ? step_inputs(b.prefill_pad_on_device, 0, b.prefill_len) : step_inputs(b.pad_on_device, i, p.S);
    if (b.live.none()) continue;
    b.live_step = b.live.gather(b.step);
    // Decode: the step's shared tables once, not in each of its layers (a prefill's
    // groups build theirs per layer; they are computed once per prompt).
    if (i > 0) model::prepare_step(spec_, b.live_step, device_.compute, device_.dtype);
    p.order.push_back(static_cast<int64_t>(k));
  }
}

void BlockRunner::submit_owed_stores(Pending& p) {
  for (auto& store : p.owed_stores) {
    auto done = storer_->submit([this, store = std::move(store)] {
      store();
      // The storer's own stream: the data is in its home (host homes are read by
      // CPU attention and by disk writes) before the store counts as done.
      device_.synchronize();
    });
    p.in_flight.push_back([done] { done.get(); });
  }
  p.owed_stores.clear();
}

void BlockRunner::run_step(int64_t i, int64_t j, size_t n, std::vector<BatchState>& batches, Pending& p) {
  const bool prefill = i == 0;
  const int64_t k = p.order[n];
  const bool first_batch = n == 0;
  // Stores owed by the previous step go first, so loads below can wait on them.
  submit_owed_stores(p);

  // This layer's weights: prefetched by the previous layer's first step, or loaded now.
  // Taken before the next layer's prefetch replaces the future, so at most two layers
  // of loaded weights are alive at once, as plan_memory counts.
  if (first_batch && p.weights_layer != j) {
    p.weights.reset();
    if (p.next_weights_layer == j && p.next_weights.valid()) {
      p.weights = p.next_weights.get();
    } else {
      ScopedTimer timer(stats_, Task::LoadWeight, prefill, p.step_id(i, j, -1));
      p.weights = weights_.load(j, prefill);
    }
    p.next_weights = {};
    p.next_weights_layer = -1;
    p.weights_layer = j;
  }

  // The next gpu batch's inputs first: they are needed at the very next step.
  prefetch_next_batch(i, j, n, batches, p);

  // Weights of the next layer, once per layer (on its first gpu batch), on their own
  // worker and stream: they have as many steps to arrive as batches run. Unlike the
  // step's other loads they are not waited for at the step's end (FlexGen's sync()
  // does): only the next layer's first step takes them. Their task lasts as long as
  // their transfer (a disk read, the CPU stand-in's copy, chunked CUDA copies:
  // DeviceContext::to_compute_in_chunks); waited for at the first batch's step end,
  // they would leave the other batches nothing to overlap.
  const int64_t next = next_weight_layer(j);
  if (first_batch && next >= 0) {
    p.next_weights_layer = next;
    // A layer prefetched across the token boundary is the next token's (a decode one).
    const StepId loads = p.step_id(next > j ? i : i + 1, next, -1);
    p.next_weights = weight_loader_->submit([this, loads, next] {
      ScopedTimer timer(stats_, Task::LoadWeight, loads.token == 0, loads);
      if (faults_.slow_weight_loads_ms > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(faults_.slow_weight_loads_ms));
      }
      return weights_.load(next, loads.token == 0);
    });
  }

  compute_step(i, j, k, batches, p);

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
// only its KV cache can be prefetched (as FlexGen does).
void BlockRunner::prefetch_next_batch(int64_t i, int64_t j, size_t n, std::vector<BatchState>& batches, Pending& p) {
  const bool prefill = i == 0;
  size_t next = n + 1;
  int64_t nj = j;
  if (next == p.order.size()) {
    next = 0;
    nj = j + 1;
  }
  if (nj >= stage_.layers.end) return;
  const int64_t nk = p.order[next];
  if (!prefill && nj >= 1 && nj <= p.L && !p.cache_loads.count({nj, nk})) {
    const int64_t pos = p.S + i - 1;
    p.cache_loads[{nj, nk}] = cache_loader_->submit([this, &p, id = p.step_id(i, nj, nk), nj, nk, pos] {
      ScopedTimer timer(stats_, Task::LoadCache, false, id);
      return p.cache->load(nj - 1, nk, pos);
    });
  }
  const bool hidden_is_this_steps_output = nj == j + 1 && p.order.size() == 1;
  if (nj >= 1 && !hidden_is_this_steps_output && !p.hidden_loads.count({nj, nk})) {
    BatchState& nb = batches[static_cast<size_t>(nk)];
    const int64_t t = prefill ? nb.prefill_len : 1;
    auto stored = p.hidden_stored[static_cast<size_t>(nk)];
    p.hidden_loads[{nj, nk}] = cache_loader_->submit([this, &nb, t, prefill, stored, id = p.step_id(i, nj, nk)] {
      wait_for_store(stored);
      ScopedTimer timer(stats_, Task::LoadHidden, prefill, id);
      return nb.hidden->gather_to_compute(t);
    });
  }
}

}  // namespace tiergen::runtime
