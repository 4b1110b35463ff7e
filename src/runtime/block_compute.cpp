// One step of the block schedule: the compute of one layer for one gpu batch (from
// the first decode token on, on the batch's live rows only), and the sampling of the
// LM head's logits that ends a token.
#include <algorithm>
#include <map>

#include "src/runtime/block_state.h"
#include "tiergen/common/error.h"
#include "tiergen/model/forward.h"
#include "tiergen/model/linear.h"
#include "tiergen/runtime/device.h"
#include "tiergen/runtime/prompt_scoring.h"
#include "tiergen/runtime/row_sampler.h"

namespace tiergen::runtime {

namespace {

// The prefill of a gpu batch, group by group of similar prompts (block_state.h), each
// over its own window; outputs come back right-aligned in the batch's [rows, W, ...]
// layout, zeros before each group's window (padding of those rows: masked, and never
// NaN, since 0 * NaN would still reach softmax-times-V).
struct PrefillOutputs {
  at::Tensor out;   // [rows, W, h]
  at::Tensor k, v;  // [rows, kv_heads, W, d]; undefined for the embedding
};

class PrefillAssembly {
 public:
  PrefillAssembly(const std::vector<PrefillRows>& groups, int64_t rows, int64_t window)
      : single_(groups.size() == 1), rows_(rows), window_(window) {}

  // Rows of group g, last g.len positions along `time_dim`.
  static at::Tensor part(const at::Tensor& full, const PrefillRows& g, int64_t time_dim) {
    return full.narrow(0, g.begin, g.count).narrow(time_dim, full.size(time_dim) - g.len, g.len);
  }

  void put(at::Tensor& full, const at::Tensor& part_value, const PrefillRows& g, int64_t time_dim) const {
    if (single_) {
      full = part_value;
      return;
    }
    if (!full.defined()) {
      std::vector<int64_t> shape = part_value.sizes().vec();
      shape[0] = rows_;
      shape[static_cast<size_t>(time_dim)] = window_;
      full = at::zeros(shape, part_value.options());
    }
    part(full, g, time_dim).copy_(part_value);
  }

 private:
  bool single_;
  int64_t rows_, window_;
};

model::StepInputs group_step(const model::StepInputs& step, const PrefillRows& g, int64_t window) {
  model::StepInputs s;
  s.positions = PrefillAssembly::part(step.positions, g, 1);
  s.pad = step.pad.narrow(0, g.begin, g.count) - (window - g.len);
  s.past_len = 0;
  return s;
}

// Embedding (`embedding`: input = token ids [rows, W]) or one decoder layer (input =
// hidden states [rows, W, h]) over the batch's prefill window, group by group.
PrefillOutputs prefill_layer(const model::Spec& spec, const model::LayerWeights& w, bool embedding,
                             const at::Tensor& input, const model::StepInputs& step,
                             const std::vector<PrefillRows>& groups, int64_t window) {
  const PrefillAssembly assembly(groups, input.size(0), window);
  PrefillOutputs result;
  for (const PrefillRows& g : groups) {
    const at::Tensor x = PrefillAssembly::part(input, g, 1).contiguous();
    const model::StepInputs s = group_step(step, g, window);
    if (embedding) {
      assembly.put(result.out, model::embed(spec, w, x, s), g, 1);
      continue;
    }
    const model::QkvProjection qkv = model::project_qkv(spec, w, x, s);
    const at::Tensor attention = model::attend(qkv.q, qkv.k, qkv.v, s);
    assembly.put(result.out, model::finish_layer(spec, w, x, attention), g, 1);
    assembly.put(result.k, qkv.k, g, 2);
    assembly.put(result.v, qkv.v, g, 2);
  }
  return result;
}

}  // namespace

void BlockRunner::compute_step(int64_t pass, int64_t j, int64_t k, std::vector<BatchState>& batches, Pending& p) {
  TG_CHECK(j != faults_.fail_compute_at_layer, "injected failure: the compute of weight layer {}", j);
  BatchState& b = batches[static_cast<size_t>(k)];
  const bool prefill = b.prefilling();
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
      ScopedTimer timer(stats_, Task::LoadHidden, prefill, p.step_id(pass, j, k));
      hidden_in = b.hidden->gather_to_compute(prefill ? b.prefill_len : 1);
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
      ScopedTimer timer(stats_, Task::LoadCache, false, p.step_id(pass, j, k));
      cache_in = p.cache->load(j - 1, k, step.past_len);
    }
  }

  // The loads were queued on the loader's stream: the compute stream waits for them
  // on the device, the host goes on.
  p.weights->ready.make_current_stream_wait(device_);
  hidden_in.ready.make_current_stream_wait(device_);
  if (cache_in) cache_in->make_current_stream_wait(device_);
  // Staged on a loader's stream, released after this step: freed only after this
  // stream has read them.
  device_.used_on_current_stream(hidden_in.tensor);
  if (cache_in) cache_in->used_on_current_stream(device_);

  // The matmuls and attention run on the batch's computed rows only (a decode token's
  // live rows, the prefill's distinct prompts); the homes of the KV cache and hidden
  // states keep the full row layout (live_rows.h).
  const auto live_of = [&](const at::Tensor& t) { return b.live.gather(t); };
  const auto full_of = [&](const at::Tensor& t) { return b.live.scatter(t); };
  const model::StepInputs& live_step = b.live_step;
  int64_t row_positions = 0;
  for (const PrefillRows& g : b.prefill_groups) row_positions += g.count * g.len;
  stats_.count_compute_step(prefill, b.live.count(), prefill ? row_positions : 0);

  at::Tensor out, logits;
  {
    const StepId id = p.step_id(pass, j, k);
    ScopedTimer timer(stats_, Task::Compute, prefill, id);
    // Products over compressed weights choose their kernel by the phase, never by the
    // rows the batch gives them (model::quantized_linear_product).
    const model::ProductPhaseScope phase(prefill ? model::ProductPhase::Prefill : model::ProductPhase::Decode);
    if (prefill && j <= p.L) {
      const int64_t window = b.prefill_len, before = b.S - window;
      const at::Tensor input =
          j == 0 ? copy_to_device(b.prompt_ids.narrow(1, before, window), device_.compute) : hidden;
      // The groups are of the computed rows (each distinct prompt once).
      const PrefillOutputs result = prefill_layer(spec_, w, j == 0, live_of(input), live_step, b.prefill_groups, window);
      out = full_of(result.out);
      if (j >= 1) {
        const at::Tensor keys_new = full_of(result.k), values_new = full_of(result.v);
        const int64_t units = keys_new.size(0) * keys_new.size(1);
        CacheTensor* keys = &p.cache->keys(j - 1, k);
        CacheTensor* values = &p.cache->values(j - 1, k);
        const at::Tensor kn = keys_new.reshape({units, window, -1}), vn = values_new.reshape({units, window, -1});
        // Positions before the batch's window are padding of every row, never
        // computed: written as zeros, so no home of the cache (gpu, cpu, disk,
        // compressed) holds a NaN there for a masked 0 * NaN in softmax-times-V.
        const at::Tensor zeros = before > 0 ? at::zeros({units, before, kn.size(2)}, kn.options()) : at::Tensor();
        p.owed_stores.push_back([this, keys, values, kn, vn, zeros, before, id] {
          ScopedTimer t(stats_, Task::StoreCache, true, id);
          if (before > 0) {
            keys->write(zeros, 0);
            values->write(zeros, 0);
          }
          keys->write(kn, before);
          values->write(vn, before);
        });
      }
    } else if (j == 0) {  // decode from here on
      out = full_of(model::embed(spec_, w, live_of(copy_to_device(b.next_ids, device_.compute)), live_step));
    } else if (j <= p.L) {
      const at::Tensor x = live_of(hidden);
      const model::QkvProjection qkv = model::project_qkv(spec_, w, x, live_step);
      std::vector<std::function<void()>> cache_stores;
      const model::QkvProjection full_qkv{full_of(qkv.q), full_of(qkv.k), full_of(qkv.v)};
      const at::Tensor attention =
          live_of(p.cache->decode_attention(j - 1, k, full_qkv, step, b.pad, cache_in.get(), stats_, id, cache_stores,
                                            b.live.all() ? nullptr : &b.live.indices(), &b.unit_masks));
      for (auto& store : cache_stores) {
        p.owed_stores.push_back([this, store = std::move(store), id] {
          ScopedTimer t(stats_, Task::StoreCache, false, id);
          store();
        });
      }
      out = full_of(model::finish_layer(spec_, w, x, attention));
    } else {
      logits = full_of(model::head_logits(spec_, w, live_of(hidden)));  // fp32, where it was computed
      if (prefill) score_prompts(b, w, hidden, p);
    }
    // The compute stream only (never the whole device): the step's time is measured.
    // (What the stores read and the staged inputs freed below no longer depend on it:
    // the storer waits on an event after the step, and the inputs are marked as read by
    // this stream. A weight layer one step past its last use does, until plan_memory
    // counts a third staged layer: its blocks would wait for this stream's queued work
    // while the next load allocates afresh.)
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
  p.owed_stores.push_back([this, home, out, prefill, stored, id = p.step_id(pass, j, k)] {
    try {
      ScopedTimer timer(stats_, Task::StoreHidden, prefill, id);
      home->write(out, 0);
      // Readers' streams wait on this, not just on the store having been queued.
      stored->set_value(DeviceEvent::record(device_));
    } catch (...) {
      stored->set_exception(std::current_exception());
      throw;
    }
  });
}

// The log-probabilities of the prompt tokens, for the sequences that asked: computed
// once per distinct prompt row from the last layer's hidden states of every position.
void BlockRunner::score_prompts(const BatchState& b, const model::LayerWeights& w, const at::Tensor& hidden,
                                Pending& p) {
  // (source row, alternatives asked for) -> the scores already computed
  std::map<std::pair<int64_t, int64_t>, const std::vector<TokenLogprob>*> scored;
  for (size_t r = 0; r < b.slots.size(); ++r) {
    if (b.slots[r] < 0) continue;
    const auto slot = static_cast<size_t>(b.slots[r]);
    const SequenceRequest& request = (*p.requests)[slot];
    if (request.prompt_logprobs < 0) continue;
    std::vector<TokenLogprob>& out = (*p.details)[slot].prompt_logprobs;
    const int64_t source = b.live.source(static_cast<int64_t>(r));
    const std::pair<int64_t, int64_t> key{source, request.prompt_logprobs};
    auto it = scored.find(key);
    if (it != scored.end()) {
      out = *it->second;
      continue;
    }
    ScopedTimer timer(stats_, Task::Sample, true);
    const auto length = static_cast<int64_t>(request.prompt.size());
    // The prefill's hidden states cover the batch's window: the last positions of the block.
    const at::Tensor positions = hidden[source].narrow(0, hidden.size(1) - length, length);
    out = score_prompt(spec_, w, positions, request.prompt, request.prompt_logprobs);
    scored[key] = &out;
  }
}

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
    if (b.samplers[r].saw_non_finite_logits()) {
      details.error = fmt::format("the model's logits for generated token {} are not finite (NaN or infinity): the "
                                  "weights or the config's numbers are broken", tokens.size() + 1);
      (*p.finished)[slot] = true;
      (*p.reasons)[slot] = "error";
      continue;
    }
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
