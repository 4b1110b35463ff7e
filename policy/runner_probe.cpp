#include "policy/runner_probe.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "policy/model_sizes.h"
#include "tiergen/common/error.h"
#include "tiergen/model/spec.h"
#include "tiergen/model/weight_source.h"
#include "tiergen/runtime/block_schedule.h"
#include "tiergen/runtime/engine.h"

namespace tiergen::policy {

namespace {

// A LLaMA-shaped model of `hidden` and `layers` (dummy weights, float32 names only:
// the engine computes in the device's dtype).
model::Spec probe_spec(int64_t hidden, int64_t layers) {
  const nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}},
                                 {"model_type", "llama"},
                                 {"hidden_act", "silu"},
                                 {"hidden_size", hidden},
                                 {"intermediate_size", 2 * hidden},
                                 {"num_hidden_layers", layers},
                                 {"num_attention_heads", 4},
                                 {"num_key_value_heads", 4},
                                 {"max_position_embeddings", 128},
                                 {"vocab_size", 256},
                                 {"rms_norm_eps", 1e-5},
                                 {"torch_dtype", "float32"}};
  return model::spec_from_config(config, "runner probe");
}

constexpr int64_t kPromptLen = 4, kBatchSize = 2, kBatches = 2;

// Bytes of an element in the dtype run_probe computes in on `device`.
int probe_dtype_bytes(const std::string& device) { return device == "cpu" ? 4 : 2; }

struct ProbeRun {
  model::Spec spec;
  runtime::Policy policy;
  int64_t new_tokens = 0;
};

// What a probe reads of the engine's running totals.
struct Totals {
  double decode_seconds = 0;
  int64_t passes = 0;
  double weight_load_seconds = 0;  // prefill and decode
  double cpu_attention_seconds = 0;  // decode (prefill attends on the compute device)
};

Totals totals_of(const runtime::Stats& stats) {
  return {stats.decode_seconds, stats.passes,
          stats.seconds(runtime::Task::LoadWeight, true) + stats.seconds(runtime::Task::LoadWeight, false),
          stats.seconds(runtime::Task::CpuAttention, false)};
}

// Runs the probe's job `reps` + 1 times on one engine (the first warms it up) and
// returns, per measured run, `measure(totals before, totals after)`.
std::vector<double> run_probe(const ProbeRun& probe, const std::string& device, int reps,
                              const std::function<double(const Totals&, const Totals&)>& measure) {
  const auto weights = model::make_dummy_weights(7);
  runtime::EngineOptions options;
  options.device =
      runtime::make_device_context(device, probe_dtype_bytes(device) == 4 ? "float32" : "float16", device != "cpu");
  // Room for the GPU probe's 1.3 GiB of host weights and its staged layers.
  const uint64_t budget = device == "cpu" ? 2ull << 30 : 8ull << 30;
  options.budgets = runtime::Budgets{budget, budget, budget};
  options.io_threads = 1;
  std::vector<runtime::SequenceRequest> requests;
  for (int64_t i = 0; i < probe.policy.block_size(); ++i) {
    runtime::SequenceRequest r;
    r.index = i;
    r.prompt.assign(kPromptLen, 3 + i);
    r.max_new_tokens = probe.new_tokens;
    r.ignore_eos = true;
    requests.push_back(std::move(r));
  }
  // The engine's placement notes are not this measurement's to print.
  const auto level = spdlog::get_level();
  spdlog::set_level(std::max(level, spdlog::level::warn));
  std::vector<double> values;
  try {
    runtime::Engine engine(probe.spec, *weights, probe.policy, options,
                           {kPromptLen, probe.new_tokens, probe.policy.block_size()});
    engine.generate(requests);  // warm-up: first-touch allocations, kernel selection
    for (int r = 0; r < std::max(1, reps); ++r) {
      const Totals before = totals_of(engine.stats());
      engine.generate(requests);
      values.push_back(measure(before, totals_of(engine.stats())));
    }
  } catch (...) {
    spdlog::set_level(level);
    throw;
  }
  spdlog::set_level(level);
  return values;
}

runtime::Policy probe_policy(double weights_on_gpu) {
  runtime::Policy policy;
  policy.gpu_batch_size = kBatchSize;
  policy.num_gpu_batches = kBatches;
  policy.w_gpu_percent = weights_on_gpu;
  policy.w_cpu_percent = 100 - weights_on_gpu;
  policy.cache_gpu_percent = policy.act_gpu_percent = 100;
  policy.cache_cpu_percent = policy.act_cpu_percent = 0;
  return policy;
}

// Layers of hidden size 64 (4 heads of 16), every weight on the compute device: their
// products and attention cost microseconds, so a step's time is what it costs beside them.
ProbeRun near_idle_probe() { return {probe_spec(64, 8), probe_policy(100), 17}; }

}  // namespace

std::vector<double> measure_step_seconds(const std::string& device, int reps) {
  const ProbeRun probe = near_idle_probe();
  const int64_t steps_per_pass = runtime::schedule::steps_per_token(probe.spec.num_weight_layers(), kBatches);
  return run_probe(probe, device, reps, [&](const Totals& before, const Totals& after) {
    return (after.decode_seconds - before.decode_seconds) / double((probe.new_tokens - 1) * steps_per_pass);
  });
}

std::vector<double> measure_weight_stream_rate(const std::string& device, int reps) {
  // Every weight on the cpu tier: every pass streams the whole model, one layer ahead of
  // the compute, as offloaded runs do. On a GPU the tensors are as large as real models'
  // (hidden 4096: 32-64 MiB each, 320 MiB a layer): with hidden 1024 (2-4 MiB tensors)
  // an H100's runner streamed 34 GB/s where OPT-13B's 50-200 MiB tensors crossed at
  // about 50 (bench/gpu-evidence/2026-11-27-*). The stand-in keeps small layers: its
  // "link" is memcpy, and float32 layers of hidden 4096 would take gigabytes of RAM.
  const int64_t hidden = device == "cpu" ? 1024 : 4096;
  const ProbeRun probe{probe_spec(hidden, 4), probe_policy(0), 5};
  const double model_bytes =
      ModelSizes(probe.spec, probe_dtype_bytes(device)).total_weight_bytes(runtime::CompressionConfig{});
  return run_probe(probe, device, reps, [&](const Totals& before, const Totals& after) {
    // Each pass loads every weight layer once; the run's last pass also loads its
    // first layer ahead for a pass that never comes (the embedding: about 0.1% of the
    // bytes here, left out).
    const double passes = double(after.passes - before.passes);
    const double seconds = after.weight_load_seconds - before.weight_load_seconds;
    TG_CHECK(seconds > 0, "profile: the runner's weight loads took no measurable time");
    return passes * model_bytes / seconds;
  });
}

std::vector<AttentionCallSample> measure_cpu_attention_calls(const std::string& device, int reps) {
  // The near-idle layers with the KV cache on the cpu tier, attended there: a call reads
  // a few KiB.
  ProbeRun probe = near_idle_probe();
  probe.policy.cache_gpu_percent = 0;
  probe.policy.cache_cpu_percent = 100;
  probe.policy.cpu_cache_compute = true;
  const int64_t decode_steps = probe.new_tokens - 1;
  const double calls_per_run = double(decode_steps * probe.spec.num_layers * kBatches);
  AttentionCallSample shape;
  shape.tasks_per_call = double(kBatchSize * probe.spec.num_kv_heads);
  // The mean context over the decode steps: the prompt, then one more position a step.
  const double mean_context = double(kPromptLen) + double(decode_steps + 1) / 2;
  shape.kv_bytes_per_call =
      double(kBatchSize) * mean_context * ModelSizes(probe.spec, probe_dtype_bytes(device)).kv_bytes_per_token();
  std::vector<AttentionCallSample> samples;
  for (const double seconds :
       run_probe(probe, device, reps, [&](const Totals& before, const Totals& after) {
         return after.cpu_attention_seconds - before.cpu_attention_seconds;
       })) {
    TG_CHECK(seconds > 0, "profile: the runner's CPU attention took no measurable time");
    AttentionCallSample sample = shape;
    sample.seconds_per_call = seconds / calls_per_run;
    samples.push_back(sample);
  }
  return samples;
}

}  // namespace tiergen::policy
