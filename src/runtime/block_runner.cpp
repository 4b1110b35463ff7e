#include "tiergen/runtime/block_runner.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "tiergen/common/error.h"
#include "tiergen/model/forward.h"
#include "tiergen/runtime/live_rows.h"
#include "tiergen/runtime/row_sampler.h"

namespace tiergen::runtime {

// Everything one gpu batch of the block carries through the schedule.
struct BlockRunner::BatchState {
  std::vector<int64_t> slots;  // block slot of each row; -1 for padding rows
  at::Tensor prompt_ids;       // [gbs, S] host, left-padded
  at::Tensor pad;              // [gbs] host
  at::Tensor pad_on_device;    // the same on the compute device, uploaded once per block
  at::Tensor next_ids;         // [gbs, 1] host: tokens sampled at the last step
  std::unique_ptr<SplitTensor> hidden;  // activation home [gbs, S, h]
  std::vector<SequenceSampler> samplers;
  model::StepInputs step;      // positions of token `step_token`, built on the device
  int64_t step_token = -1;
  LiveRows live;               // rows still generating at token `step_token`
  model::StepInputs live_step; // `step` for the live rows (decode tokens)
};

// Prefetched inputs and owed stores, carried from one step to the next.
struct BlockRunner::Pending {
  std::unique_ptr<KvCache> cache;
  std::shared_ptr<LoadedLayer> weights;  // layer being computed
  int64_t weights_layer = -1;
  std::shared_future<std::shared_ptr<LoadedLayer>> next_weights;
  int64_t next_weights_layer = -1;
  std::map<std::pair<int64_t, int64_t>, std::shared_future<std::shared_ptr<CacheLoad>>> cache_loads;
  std::map<std::pair<int64_t, int64_t>, std::shared_future<Staged>> hidden_loads;
  // Per batch: its last hidden store, done when queued; its event marks the copies.
  std::vector<std::shared_future<DeviceEvent>> hidden_stored;
  std::vector<std::function<void()>> owed_stores;       // results of the last compute
  std::vector<std::function<void()>> in_flight;         // waits for everything submitted this step
  int64_t S = 0, L = 0, NL = 0;
  // The gpu batches with a live row at this token, in schedule order: a batch whose
  // sequences have all finished drops out of the zig-zag (no loads, compute, stores).
  std::vector<int64_t> order;
  std::vector<std::vector<int64_t>>* outputs = nullptr;
  std::vector<bool>* finished = nullptr;
  std::vector<std::string>* reasons = nullptr;
  std::vector<SequenceResult>* details = nullptr;  // logprobs and stop token per sequence
  const std::vector<SequenceRequest>* requests = nullptr;
  const TokenCallback* on_token = nullptr;
};

BlockRunner::BlockRunner(const model::Spec& spec, const Policy& policy, const WeightStore& weights, Tiers& tiers,
                         const DeviceContext& device, Stats& stats, const ScheduleFaults& faults)
    : spec_(spec), policy_(policy), weights_(weights), tiers_(tiers), device_(device), stats_(stats), faults_(faults),
      eos_ids_(spec.eos_token_ids) {
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

}  // namespace

std::vector<SequenceResult> BlockRunner::run(const std::vector<SequenceRequest>& block, const TokenCallback& on_token) {
  const int64_t gbs = policy_.gpu_batch_size, ngb = policy_.num_gpu_batches;
  TG_CHECK(!block.empty() && static_cast<int64_t>(block.size()) <= gbs * ngb, "internal: block of {} sequences for {}x{}",
           block.size(), gbs, ngb);
  int64_t S = 0, gen_len = 0;
  for (const auto& r : block) {
    S = std::max<int64_t>(S, static_cast<int64_t>(r.prompt.size()));
    gen_len = std::max(gen_len, r.max_new_tokens);
  }
  TG_CHECK(S > 0 && gen_len > 0, "internal: empty prompt or no tokens to generate");

  Pending p;
  p.S = S;
  p.L = spec_.num_layers;
  p.NL = spec_.num_weight_layers();
  p.cache = std::make_unique<KvCache>(spec_, policy_, tiers_, device_, S + gen_len);
  p.hidden_stored.resize(static_cast<size_t>(ngb));
  std::vector<std::vector<int64_t>> outputs(block.size());
  std::vector<bool> finished(block.size(), false);
  std::vector<std::string> reasons(block.size(), "length");
  p.outputs = &outputs;
  p.finished = &finished;
  p.reasons = &reasons;
  std::vector<SequenceResult> details(block.size());
  p.details = &details;
  p.requests = &block;
  p.on_token = &on_token;

  const auto act_split = split_units(gbs, policy_.act_gpu_percent, policy_.act_cpu_percent);
  std::vector<BatchState> batches(static_cast<size_t>(ngb));
  for (int64_t k = 0; k < ngb; ++k) {
    BatchState& b = batches[static_cast<size_t>(k)];
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
    b.hidden = std::make_unique<SplitTensor>(tiers_, device_, act_split, S, spec_.hidden_size,
                                             fmt::format("activations batch {}", k));
  }

  try {
    for (int64_t i = 0; i < gen_len; ++i) {
      const auto start = std::chrono::steady_clock::now();
      start_token(i, batches, p);
      for (int64_t j = 0; j < p.NL; ++j) {
        for (size_t n = 0; n < p.order.size(); ++n) run_step(i, j, n, batches, p);
      }
      // Flush what the last step owes before the next token reads it.
      submit_owed_stores(p);
      for (auto& wait : p.in_flight) wait();
      p.in_flight.clear();
      p.cache->check_quantization();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      (i == 0 ? stats_.prefill_seconds : stats_.decode_seconds) += seconds;
      if (std::all_of(finished.begin(), finished.end(), [](bool f) { return f; })) break;
    }
  } catch (...) {
    // Let queued tasks finish before the buffers they reference go away.
    drain_workers();
    throw;
  }

  std::vector<SequenceResult> results(block.size());
  for (size_t s = 0; s < block.size(); ++s) {
    results[s] = std::move(details[s]);
    results[s].tokens = std::move(outputs[s]);
    results[s].finish_reason = reasons[s];
  }
  return results;
}

// Which rows of each gpu batch still generate at token i, and which batches run at
// all. Runs on the compute thread (it builds the step inputs on the compute device).
void BlockRunner::start_token(int64_t i, std::vector<BatchState>& batches, Pending& p) {
  p.order.clear();
  for (size_t k = 0; k < batches.size(); ++k) {
    BatchState& b = batches[k];
    std::vector<bool> live(b.slots.size(), false);
    for (size_t r = 0; r < b.slots.size(); ++r) {
      live[r] = b.slots[r] >= 0 && !(*p.finished)[static_cast<size_t>(b.slots[r])];
    }
    b.live.update(live, device_.compute);
    b.step = step_inputs(b.pad_on_device, i, p.S);
    b.step_token = i;
    if (b.live.none()) continue;
    // The prefill keeps every row (padding rows included) in its [gbs, S] layout.
    b.live_step = i > 0 ? b.live.gather(b.step) : b.step;
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
      ScopedTimer timer(stats_, Task::LoadWeight, prefill);
      p.weights = weights_.load(j);
    }
    p.next_weights = {};
    p.next_weights_layer = -1;
    p.weights_layer = j;
  }

  // The next gpu batch's inputs first: they are needed at the very next step.
  prefetch_next_batch(i, j, n, batches, p);

  // Weights of the next layer, once per layer (on its first gpu batch), on their own
  // worker and stream: they have as many steps to arrive as batches run.
  if (first_batch && p.NL > 1) {
    const int64_t next = (j + 1) % p.NL;
    p.next_weights_layer = next;
    p.next_weights = weight_loader_->submit([this, next, prefill] {
      ScopedTimer timer(stats_, Task::LoadWeight, prefill);
      return weights_.load(next);
    });
    p.in_flight.push_back([f = p.next_weights] { f.get(); });
  }

  compute_step(i, j, k, batches, p);

  // FlexGen's sync(): the step's loads and stores are done before the next step.
  for (auto& wait : p.in_flight) wait();
  p.in_flight.clear();
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
  if (nj >= p.NL) return;
  const int64_t nk = p.order[next];
  if (!prefill && nj >= 1 && nj <= p.L && !p.cache_loads.count({nj, nk})) {
    const int64_t pos = p.S + i - 1;
    p.cache_loads[{nj, nk}] = cache_loader_->submit([this, &p, nj, nk, pos] {
      ScopedTimer timer(stats_, Task::LoadCache, false);
      return p.cache->load(nj - 1, nk, pos);
    });
  }
  const bool hidden_is_this_steps_output = nj == j + 1 && p.order.size() == 1;
  if (nj >= 1 && !hidden_is_this_steps_output && !p.hidden_loads.count({nj, nk})) {
    BatchState& nb = batches[static_cast<size_t>(nk)];
    const int64_t t = prefill ? p.S : 1;
    auto stored = p.hidden_stored[static_cast<size_t>(nk)];
    p.hidden_loads[{nj, nk}] = cache_loader_->submit([this, &nb, t, prefill, stored] {
      wait_for_store(stored);
      ScopedTimer timer(stats_, Task::LoadHidden, prefill);
      return nb.hidden->gather_to_compute(t);
    });
  }
}

}  // namespace tiergen::runtime

namespace tiergen::runtime {

void BlockRunner::compute_step(int64_t i, int64_t j, int64_t k, std::vector<BatchState>& batches, Pending& p) {
  const bool prefill = i == 0;
  BatchState& b = batches[static_cast<size_t>(k)];
  const model::LayerWeights& w = p.weights->weights;
  const model::StepInputs& step = b.step;

  at::Tensor hidden;
  Staged hidden_in;
  if (j >= 1) {
    auto it = p.hidden_loads.find({j, k});
    if (it != p.hidden_loads.end()) {
      hidden_in = it->second.get();
      p.hidden_loads.erase(it);
    } else {
      wait_for_store(p.hidden_stored[static_cast<size_t>(k)]);
      ScopedTimer timer(stats_, Task::LoadHidden, prefill);
      hidden_in = b.hidden->gather_to_compute(prefill ? p.S : 1);
    }
    hidden = hidden_in.tensor;
  }

  std::shared_ptr<CacheLoad> cache_in;
  if (!prefill && j >= 1 && j <= p.L) {
    auto it = p.cache_loads.find({j, k});
    if (it != p.cache_loads.end()) {
      cache_in = it->second.get();
      p.cache_loads.erase(it);
    } else {
      ScopedTimer timer(stats_, Task::LoadCache, false);
      cache_in = p.cache->load(j - 1, k, step.past_len);
    }
  }

  // The loads were queued on the loader's stream: the compute stream waits for them
  // on the device, the host goes on.
  p.weights->ready.make_current_stream_wait(device_);
  hidden_in.ready.make_current_stream_wait(device_);
  if (cache_in) cache_in->make_current_stream_wait(device_);

  // A decode token runs the matmuls on the batch's live rows only; attention and the
  // homes of the KV cache and hidden states keep the full row layout (live_rows.h).
  const auto live_of = [&](const at::Tensor& t) { return prefill ? t : b.live.gather(t); };
  const auto full_of = [&](const at::Tensor& t) { return prefill ? t : b.live.scatter(t); };
  const model::StepInputs& live_step = b.live_step;
  stats_.count_compute_step(prefill, prefill ? static_cast<int64_t>(b.slots.size()) : b.live.count());

  at::Tensor out, logits;
  {
    ScopedTimer timer(stats_, Task::Compute, prefill);
    if (j == 0) {
      const at::Tensor ids = (prefill ? b.prompt_ids : b.next_ids).to(device_.compute);
      out = full_of(model::embed(spec_, w, live_of(ids), live_step));
    } else if (j <= p.L) {
      const at::Tensor x = live_of(hidden);
      const model::QkvProjection qkv = model::project_qkv(spec_, w, x, live_step);
      at::Tensor attention;
      if (prefill) {
        attention = model::attend(qkv.q, qkv.k, qkv.v, step);
        const int64_t units = qkv.k.size(0) * qkv.k.size(1);
        CacheTensor* keys = &p.cache->keys(j - 1, k);
        CacheTensor* values = &p.cache->values(j - 1, k);
        const at::Tensor kn = qkv.k.reshape({units, p.S, -1}), vn = qkv.v.reshape({units, p.S, -1});
        p.owed_stores.push_back([this, keys, values, kn, vn] {
          ScopedTimer t(stats_, Task::StoreCache, true);
          keys->write(kn, 0);
          values->write(vn, 0);
        });
      } else {
        std::vector<std::function<void()>> cache_stores;
        const model::QkvProjection full_qkv{full_of(qkv.q), full_of(qkv.k), full_of(qkv.v)};
        attention = live_of(
            p.cache->decode_attention(j - 1, k, full_qkv, step, b.pad, cache_in.get(), stats_, cache_stores));
        for (auto& store : cache_stores) {
          p.owed_stores.push_back([this, store = std::move(store)] {
            ScopedTimer t(stats_, Task::StoreCache, false);
            store();
          });
        }
      }
      out = full_of(model::finish_layer(spec_, w, x, attention));
    } else {
      logits = full_of(model::head_logits(spec_, w, live_of(hidden)));  // fp32, where it was computed
    }
    // The compute stream only (never the whole device): the step's time is measured,
    // the stores of `out` run on the storer's stream next, and the staged inputs
    // released below are no longer read.
    device_.synchronize();
  }
  cache_in.reset();
  hidden_in = Staged{};

  if (j == p.L + 1) {
    sample_step(prefill, b, logits, p);
    return;
  }
  SplitTensor* home = b.hidden.get();
  auto stored = std::make_shared<std::promise<DeviceEvent>>();
  p.hidden_stored[static_cast<size_t>(k)] = stored->get_future().share();
  p.owed_stores.push_back([this, home, out, prefill, stored] {
    try {
      ScopedTimer timer(stats_, Task::StoreHidden, prefill);
      home->write(out, 0);
      // Readers' streams wait on this, not just on the store having been queued.
      stored->set_value(DeviceEvent::record(device_));
    } catch (...) {
      stored->set_exception(std::current_exception());
      throw;
    }
  });
}

}  // namespace tiergen::runtime

namespace tiergen::runtime {

// The head's logits become one token per live row; a sequence that meets its end
// (end-of-sequence, a stop token or string, max_tokens) is marked finished, so its row
// leaves the batch from the next token on.
void BlockRunner::sample_step(bool prefill, BatchState& b, const at::Tensor& logits, Pending& p) {
  ScopedTimer timer(stats_, Task::Sample, prefill);
  std::vector<bool> active(b.slots.size(), false);
  for (size_t r = 0; r < b.slots.size(); ++r) {
    const int64_t slot = b.slots[r];
    if (slot < 0) continue;
    const SequenceRequest& request = (*p.requests)[static_cast<size_t>(slot)];
    active[r] = !(*p.finished)[static_cast<size_t>(slot)];
    if (prefill) {
      // min_tokens holds back end-of-sequence (unless ignored) and the stop token ids.
      std::vector<int64_t> held_back = request.stop_token_ids;
      if (!request.ignore_eos) held_back.insert(held_back.end(), eos_ids_.begin(), eos_ids_.end());
      b.samplers[r].begin(request.prompt, std::move(held_back));
    }
  }
  const std::vector<int64_t> sampled = sample_rows(logits, b.samplers, active);
  for (size_t r = 0; r < b.slots.size(); ++r) {
    const int64_t token = sampled[r];
    b.next_ids[static_cast<int64_t>(r)][0] = token;
    if (!active[r]) continue;
    const auto slot = static_cast<size_t>(b.slots[r]);
    const SequenceRequest& request = (*p.requests)[slot];
    auto& tokens = (*p.outputs)[slot];
    SequenceResult& details = (*p.details)[slot];
    tokens.push_back(token);
    if (b.samplers[r].last_logprob()) details.logprobs.push_back(*b.samplers[r].last_logprob());
    if (*p.on_token) (*p.on_token)(slot, token);
    const bool reached_min = static_cast<int64_t>(tokens.size()) >= request.sampling.min_tokens;
    const auto is_in = [token](const std::vector<int64_t>& ids) {
      return std::find(ids.begin(), ids.end(), token) != ids.end();
    };
    bool stop = false;
    if (!request.ignore_eos && is_in(eos_ids_)) {
      stop = true;
    } else if (is_in(request.stop_token_ids)) {
      stop = true;
      details.stop_token = token;
    } else if (reached_min && request.should_stop && request.should_stop(tokens)) {
      stop = true;
    }
    if (stop) {
      (*p.finished)[slot] = true;
      (*p.reasons)[slot] = "stop";
    } else if (static_cast<int64_t>(tokens.size()) >= request.max_new_tokens) {
      (*p.finished)[slot] = true;
    }
  }
}

}  // namespace tiergen::runtime
