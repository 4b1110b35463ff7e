#include "policy/step_probe.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "tiergen/common/error.h"
#include "tiergen/model/spec.h"
#include "tiergen/model/weight_source.h"
#include "tiergen/runtime/block_schedule.h"
#include "tiergen/runtime/engine.h"

namespace tiergen::policy {

namespace {

// A LLaMA-shaped model small enough that its products and attention cost microseconds.
model::Spec probe_spec() {
  const nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}},
                                 {"model_type", "llama"},
                                 {"hidden_act", "silu"},
                                 {"hidden_size", 64},
                                 {"intermediate_size", 128},
                                 {"num_hidden_layers", 8},
                                 {"num_attention_heads", 4},
                                 {"num_key_value_heads", 4},
                                 {"max_position_embeddings", 128},
                                 {"vocab_size", 256},
                                 {"rms_norm_eps", 1e-5},
                                 {"torch_dtype", "float32"}};
  return model::spec_from_config(config, "step probe");
}

constexpr int64_t kPromptLen = 4, kNewTokens = 17, kBatchSize = 2, kBatches = 2;

}  // namespace

double measure_step_seconds(const std::string& device, int reps) {
  const model::Spec spec = probe_spec();
  const auto weights = model::make_dummy_weights(7);
  runtime::Policy policy;
  policy.gpu_batch_size = kBatchSize;
  policy.num_gpu_batches = kBatches;
  policy.w_gpu_percent = policy.cache_gpu_percent = policy.act_gpu_percent = 100;
  policy.w_cpu_percent = policy.cache_cpu_percent = policy.act_cpu_percent = 0;
  runtime::EngineOptions options;
  options.device = runtime::make_device_context(device, device == "cpu" ? "float32" : "float16", device != "cpu");
  const uint64_t budget = 256ull << 20;
  options.budgets = runtime::Budgets{budget, budget, budget};
  options.io_threads = 1;
  std::vector<runtime::SequenceRequest> requests;
  for (int64_t i = 0; i < kBatchSize * kBatches; ++i) {
    runtime::SequenceRequest r;
    r.index = i;
    r.prompt.assign(kPromptLen, 3 + i);
    r.max_new_tokens = kNewTokens;
    r.ignore_eos = true;
    requests.push_back(std::move(r));
  }
  // The engine's placement notes are not this measurement's to print.
  const auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::warn);
  std::vector<double> per_step;
  try {
    runtime::Engine engine(spec, *weights, policy, options, {kPromptLen, kNewTokens, kBatchSize * kBatches});
    const int64_t steps_per_pass = runtime::schedule::steps_per_token(spec.num_weight_layers(), kBatches);
    engine.generate(requests);  // warm-up: first-touch allocations, kernel selection
    for (int r = 0; r < std::max(1, reps); ++r) {
      const double before = engine.stats().decode_seconds;
      engine.generate(requests);
      const double decode = engine.stats().decode_seconds - before;
      per_step.push_back(decode / double((kNewTokens - 1) * steps_per_pass));
    }
  } catch (...) {
    spdlog::set_level(level);
    throw;
  }
  spdlog::set_level(level);
  std::nth_element(per_step.begin(), per_step.begin() + per_step.size() / 2, per_step.end());
  return per_step[per_step.size() / 2];
}

}  // namespace tiergen::policy
