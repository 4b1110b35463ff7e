#pragma once
// Test support: tiny random OPT / LLaMA checkpoints in Hugging Face layout, a plain
// forward pass through the model::forward.h functions, and WeightSource wrappers that
// count or fail reads. Header-only so every test file can include it.
#include <array>
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <string>
#include <unistd.h>
#include <vector>

#include "tiergen/common/error.h"
#include "tiergen/model/forward.h"
#include "tiergen/model/layer_weights.h"
#include "tiergen/model/safetensors.h"
#include "tiergen/model/spec.h"
#include "tiergen/model/weight_source.h"
#include "tiergen/runtime/device.h"
#include "tiergen/runtime/engine.h"
#include "tests/support/temp_dir.h"

namespace tiergen::test {

namespace fs = std::filesystem;

// The engine logs every placement at info level; tests keep warnings and errors only.
inline const bool kQuietEngineLogs = (spdlog::set_level(spdlog::level::warn), true);

struct TinyModelOptions {
  std::string arch = "opt";  // "opt" or "llama"
  int64_t hidden = 32;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t kv_heads = 4;       // llama only; OPT always has kv_heads == heads
  int64_t intermediate = 64;
  int64_t vocab = 128;
  int64_t max_positions = 64;
  bool llama3_rope = false;
  int64_t rope_original_max_positions = 100;  // llama3 scaling's original context
  double rope_theta = 10000.0;
  bool tie = false;            // llama: tie the LM head (OPT is always tied)
  bool opt_post_layer_norm = false;   // OPT-350M style (do_layer_norm_before false)
  int64_t opt_word_embed_proj_dim = 0;  // 0: == hidden (no projection)
  int64_t eos = -1;            // -1: no eos_token_id in the config
  uint64_t seed = 0;
};

inline TinyModelOptions tiny_opt(uint64_t seed = 1) {
  TinyModelOptions o;
  o.arch = "opt";
  o.seed = seed;
  return o;
}

// LLaMA with grouped-query attention (4 query heads share 2 kv heads).
inline TinyModelOptions tiny_llama(uint64_t seed = 2) {
  TinyModelOptions o;
  o.arch = "llama";
  o.kv_heads = 2;
  o.seed = seed;
  return o;
}

inline nlohmann::json tiny_config(const TinyModelOptions& o) {
  nlohmann::json c;
  if (o.arch == "opt") {
    c = {{"architectures", {"OPTForCausalLM"}}, {"model_type", "opt"}, {"activation_function", "relu"},
         {"hidden_size", o.hidden}, {"ffn_dim", o.intermediate}, {"num_hidden_layers", o.layers},
         {"num_attention_heads", o.heads}, {"max_position_embeddings", o.max_positions},
         {"vocab_size", o.vocab},
         {"word_embed_proj_dim", o.opt_word_embed_proj_dim > 0 ? o.opt_word_embed_proj_dim : o.hidden},
         {"do_layer_norm_before", !o.opt_post_layer_norm}, {"enable_bias", true}, {"bos_token_id", 1},
         {"pad_token_id", 0}, {"tie_word_embeddings", true}, {"torch_dtype", "float32"},
         {"_name_or_path", "tiny-opt"}};
  } else {
    c = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_act", "silu"},
         {"hidden_size", o.hidden}, {"intermediate_size", o.intermediate}, {"num_hidden_layers", o.layers},
         {"num_attention_heads", o.heads}, {"num_key_value_heads", o.kv_heads},
         {"max_position_embeddings", o.max_positions}, {"vocab_size", o.vocab}, {"rms_norm_eps", 1e-5},
         {"rope_theta", o.rope_theta}, {"bos_token_id", 1}, {"tie_word_embeddings", o.tie},
         {"torch_dtype", "float32"}, {"_name_or_path", "tiny-llama"}};
    if (o.llama3_rope) {
      c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0},
                           {"original_max_position_embeddings", o.rope_original_max_positions}};
    }
  }
  if (o.eos >= 0) c["eos_token_id"] = o.eos;
  return c;
}

// Random values with enough spread that greedy choices are not near-ties: norms
// around 1, small biases and positions, linear weights scaled by 1/sqrt(fan-in).
inline at::Tensor tiny_random_tensor(const std::string& name, const std::vector<int64_t>& shape, at::Generator& gen) {
  const auto ends = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  const at::Tensor x = at::normal(0.0, 1.0, shape, gen);
  if (ends("norm.weight") || ends("layer_norm.weight") || ends("layernorm.weight")) return 1.0 + 0.1 * x;
  if (ends(".bias")) return 0.1 * x;
  if (name.find("embed_positions") != std::string::npos) return 0.1 * x;
  if (shape.size() == 2 && name.find("embed_tokens") == std::string::npos) {
    return x / std::sqrt(static_cast<double>(shape[1]));
  }
  return x;
}

// A tiny checkpoint on disk plus its tensors in memory (float32, by checkpoint name).
struct TinyModel {
  std::shared_ptr<TempDir> owner;  // removes the directory with the last copy
  std::string dir;
  model::Spec spec;
  std::map<std::string, at::Tensor> tensors;
  std::unique_ptr<model::WeightSource> weights;  // the checkpoint, through open_checkpoint_weights
};

// Writes config.json + model.safetensors (float32) into `dir`.
inline std::map<std::string, at::Tensor> write_tiny_model(const std::string& dir, const TinyModelOptions& o) {
  const nlohmann::json config = tiny_config(o);
  const model::Spec spec = model::spec_from_config(config, "tiny model");
  at::Generator gen = at::detail::createCPUGenerator(o.seed);
  std::map<std::string, at::Tensor> tensors;
  std::vector<model::TensorToWrite> to_write;
  for (const auto& layer : spec.weight_layers()) {
    for (const auto& t : layer.tensors) {
      if (t.source_name != t.name) continue;  // tied head: stored once as the embedding
      const at::Tensor value = tiny_random_tensor(t.name, t.shape, gen).to(at::kFloat).contiguous();
      tensors[t.name] = value;
      to_write.push_back({t.name, model::DType::F32, t.shape, value.data_ptr(), static_cast<uint64_t>(value.nbytes())});
    }
  }
  fs::create_directories(dir);
  std::ofstream(fs::path(dir) / "config.json") << config.dump(2) << "\n";
  model::write_safetensors((fs::path(dir) / "model.safetensors").string(), to_write, {{"format", "pt"}});
  return tensors;
}

// A tiny model in a fresh directory under the test temp dir.
inline TinyModel make_tiny_model(const TinyModelOptions& o) {
  TinyModel m;
  m.owner = std::make_shared<TempDir>("tiny-" + o.arch);
  m.dir = m.owner->path;
  m.tensors = write_tiny_model(m.dir, o);
  m.spec = model::spec_from_config_file((fs::path(m.dir) / "config.json").string());
  m.weights = model::open_checkpoint_weights(m.dir, m.spec);
  return m;
}

// ---- WeightSource wrappers.

// Counts read() calls and can throw on the read of one tensor.
class CountingWeights final : public model::WeightSource {
 public:
  // `fail_on`: a tensor name whose read throws; `hide_files`: report no file
  // offsets (see NoFileWeights).
  explicit CountingWeights(const model::WeightSource& inner, std::string fail_on = "", bool hide_files = false)
      : inner_(inner), fail_on_(std::move(fail_on)), hide_files_(hide_files) {}
  at::Tensor read(const model::TensorSpec& tensor, at::ScalarType dtype) const override {
    ++reads_;
    if (!fail_on_.empty() && tensor.name == fail_on_) {
      throw Error("injected read failure of tensor '" + tensor.name + "'");
    }
    return inner_.read(tensor, dtype);
  }
  // Keeps the inner source's file offsets, so disk-homed weights may be read in place.
  const model::TensorInfo* file_tensor(const model::TensorSpec& tensor) const override {
    return hide_files_ ? nullptr : inner_.file_tensor(tensor);
  }
  std::string describe() const override { return "counting " + inner_.describe(); }
  int64_t reads() const { return reads_.load(); }

 private:
  const model::WeightSource& inner_;
  std::string fail_on_;
  bool hide_files_;
  mutable std::atomic<int64_t> reads_{0};
};

// Hides the checkpoint's file offsets, so disk-homed weights are read through read()
// and written to the offload file instead of being read in place.
class NoFileWeights final : public model::WeightSource {
 public:
  explicit NoFileWeights(const model::WeightSource& inner) : inner_(inner) {}
  at::Tensor read(const model::TensorSpec& tensor, at::ScalarType dtype) const override {
    return inner_.read(tensor, dtype);
  }
  std::string describe() const override { return "file-less " + inner_.describe(); }

 private:
  const model::WeightSource& inner_;
};

// ---- A plain forward pass through model::forward.h (no runtime, no cache tiers).

// Every weight layer's tensors in `dtype` on `device`.
inline std::vector<model::LayerWeights> load_all_layers(const model::Spec& spec, const model::WeightSource& source,
                                                        at::ScalarType dtype = at::kFloat,
                                                        const at::Device& device = at::kCPU) {
  std::vector<model::LayerWeights> layers;
  const auto weight_layers = spec.weight_layers();
  for (size_t i = 0; i < weight_layers.size(); ++i) {
    model::LayerWeights w(model::layer_prefix(spec, static_cast<int64_t>(i)));
    for (const auto& t : weight_layers[i].tensors) w.set(t.name, source.read(t, dtype).to(device));
    layers.push_back(std::move(w));
  }
  return layers;
}

// Left-pads `prompts` into [b, S] ids and the matching StepInputs of a prefill.
inline std::pair<at::Tensor, model::StepInputs> left_padded(const std::vector<std::vector<int64_t>>& prompts) {
  int64_t S = 0;
  for (const auto& p : prompts) S = std::max<int64_t>(S, static_cast<int64_t>(p.size()));
  const auto b = static_cast<int64_t>(prompts.size());
  at::Tensor ids = at::zeros({b, S}, at::kLong);
  at::Tensor pad = at::zeros({b}, at::kLong);
  for (int64_t r = 0; r < b; ++r) {
    const auto& p = prompts[static_cast<size_t>(r)];
    const int64_t n = static_cast<int64_t>(p.size());
    pad[r] = S - n;
    for (int64_t t = 0; t < n; ++t) ids[r][S - n + t] = p[static_cast<size_t>(t)];
  }
  model::StepInputs step;
  step.pad = pad;
  step.positions = at::clamp_min(at::arange(S, at::kLong).unsqueeze(0) - pad.unsqueeze(1), 0);
  step.past_len = 0;
  return {ids, step};
}

// Final hidden states [b, S, h] of a full (cache-free) forward of left-padded `ids`.
inline at::Tensor full_hidden(const model::Spec& spec, const std::vector<model::LayerWeights>& layers,
                              const at::Tensor& ids, const model::StepInputs& step) {
  at::Tensor hidden = model::embed(spec, layers.front(), ids, step);
  for (int64_t l = 1; l <= spec.num_layers; ++l) {
    const auto& w = layers[static_cast<size_t>(l)];
    const model::QkvProjection qkv = model::project_qkv(spec, w, hidden, step);
    hidden = model::finish_layer(spec, w, hidden, model::attend(qkv.q, qkv.k, qkv.v, step));
  }
  return hidden;
}

// Float32 logits [b, S, vocab] at every position of a full forward.
inline at::Tensor full_logits(const model::Spec& spec, const std::vector<model::LayerWeights>& layers,
                              const at::Tensor& ids, const model::StepInputs& step) {
  const at::Tensor hidden = full_hidden(spec, layers, ids, step);
  std::vector<at::Tensor> per_position;
  for (int64_t t = 0; t < hidden.size(1); ++t) {
    per_position.push_back(model::head_logits(spec, layers.back(), hidden.narrow(1, t, 1)));
  }
  return at::stack(per_position, 1);
}

// Logits [vocab] of the last position of one unpadded sequence.
inline at::Tensor last_logits(const model::Spec& spec, const std::vector<model::LayerWeights>& layers,
                              const std::vector<int64_t>& tokens) {
  auto [ids, step] = left_padded({tokens});
  return model::head_logits(spec, layers.back(), full_hidden(spec, layers, ids, step))[0];
}

// Greedy continuation by repeated full forwards (first argmax, as the sampler).
inline std::vector<int64_t> greedy_reference(const model::Spec& spec, const std::vector<model::LayerWeights>& layers,
                                             const std::vector<int64_t>& prompt, int64_t new_tokens) {
  std::vector<int64_t> sequence = prompt, out;
  for (int64_t i = 0; i < new_tokens; ++i) {
    const at::Tensor logits = last_logits(spec, layers, sequence).contiguous();
    const float* data = logits.data_ptr<float>();
    const int64_t token = std::max_element(data, data + logits.numel()) - data;
    out.push_back(token);
    sequence.push_back(token);
  }
  return out;
}

// Largest |a - b| relative to the largest |b| (both float32-converted).
inline double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor af = a.to(at::kDouble), bf = b.to(at::kDouble);
  return (af - bf).abs().max().item<double>() / std::max(1e-30, bf.abs().max().item<double>());
}

// Deterministic prompts of the given lengths with ids in [3, vocab).
inline std::vector<std::vector<int64_t>> make_prompts(const std::vector<int64_t>& lengths, int64_t vocab,
                                                      uint64_t seed = 7) {
  std::vector<std::vector<int64_t>> prompts;
  uint64_t state = seed * 2654435761u + 12345;
  for (int64_t n : lengths) {
    std::vector<int64_t> p;
    for (int64_t t = 0; t < n; ++t) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      p.push_back(3 + static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(vocab - 3)));
    }
    prompts.push_back(std::move(p));
  }
  return prompts;
}

// ---- Running the engine on the CPU device.

// A policy from FlexGen's knobs: gbs x ngb, `percent` = wg wc cg cc hg hc.
inline runtime::Policy make_policy(int64_t gbs, int64_t ngb, const std::array<double, 6>& percent, bool cpu_attention,
                                   bool overlap = true) {
  runtime::Policy p;
  p.gpu_batch_size = gbs;
  p.num_gpu_batches = ngb;
  p.w_gpu_percent = percent[0];
  p.w_cpu_percent = percent[1];
  p.cache_gpu_percent = percent[2];
  p.cache_cpu_percent = percent[3];
  p.act_gpu_percent = percent[4];
  p.act_cpu_percent = percent[5];
  p.cpu_cache_compute = cpu_attention;
  p.overlap = overlap;
  return p;
}

// `policy` with the matmuls of host-resident decoder weights done where they live, in
// the phases asked for.
inline runtime::Policy with_cpu_weight_compute(runtime::Policy policy, bool prefill, bool decode) {
  policy.cpu_weight_compute_prefill = prefill;
  policy.cpu_weight_compute_decode = decode;
  return policy;
}

// Worker streams emulated asynchronously (emulated_stream.h): up to 300 us of delay
// per queued copy, seeded.
inline std::shared_ptr<const runtime::AsyncEmulation> emulated_streams(uint64_t seed, int max_delay_us = 300) {
  auto config = std::make_shared<runtime::AsyncEmulation>();
  config->seed = seed;
  config->max_delay_us = max_delay_us;
  return config;
}

inline runtime::EngineOptions cpu_engine_options(const std::string& offload_dir, uint64_t budget = 1ull << 30,
                                                 const std::string& dtype = "float32") {
  runtime::EngineOptions o;
  o.device = runtime::make_device_context("cpu", dtype, false);
  o.budgets = runtime::Budgets{budget, budget, budget};
  o.offload_dir = offload_dir;
  o.io_threads = 2;
  return o;
}

inline std::vector<runtime::SequenceRequest> greedy_requests(const std::vector<std::vector<int64_t>>& prompts,
                                                             const std::vector<int64_t>& max_new_tokens) {
  std::vector<runtime::SequenceRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    runtime::SequenceRequest r;
    r.index = static_cast<int64_t>(i);
    r.prompt = prompts[i];
    r.max_new_tokens = max_new_tokens[i % max_new_tokens.size()];
    requests.push_back(std::move(r));
  }
  return requests;
}

// The longest prompt and generation among `requests`.
inline runtime::Workload workload_of(const std::vector<runtime::SequenceRequest>& requests) {
  runtime::Workload w{1, 1};
  for (const auto& r : requests) {
    w.prompt_len = std::max<int64_t>(w.prompt_len, static_cast<int64_t>(r.prompt.size()));
    w.gen_len = std::max(w.gen_len, r.max_new_tokens);
  }
  return w;
}

inline std::vector<std::vector<int64_t>> tokens_of(const std::vector<runtime::SequenceResult>& results) {
  std::vector<std::vector<int64_t>> tokens;
  for (const auto& r : results) tokens.push_back(r.tokens);
  return tokens;
}

// Each request's greedy continuation by the full-forward reference (its prompt alone).
inline std::vector<std::vector<int64_t>> greedy_references(const TinyModel& m,
                                                          const std::vector<runtime::SequenceRequest>& requests) {
  const auto layers = load_all_layers(m.spec, *m.weights);
  std::vector<std::vector<int64_t>> tokens;
  for (const auto& r : requests) tokens.push_back(greedy_reference(m.spec, layers, r.prompt, r.max_new_tokens));
  return tokens;
}

// Greedy tokens of every request through a fresh Engine.
inline std::vector<std::vector<int64_t>> engine_tokens(const model::Spec& spec, const model::WeightSource& weights,
                                                       const runtime::Policy& policy,
                                                       const runtime::EngineOptions& options,
                                                       const std::vector<runtime::SequenceRequest>& requests) {
  runtime::Engine engine(spec, weights, policy, options, workload_of(requests));
  return tokens_of(engine.generate(requests));
}

}  // namespace tiergen::test
