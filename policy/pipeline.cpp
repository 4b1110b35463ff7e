#include "policy/pipeline.h"

#include <algorithm>
#include <cmath>

#include "policy/model_sizes.h"
#include "tiergen/common/error.h"

namespace tiergen::policy {

model::Spec stage_slice(const model::Spec& spec, const runtime::StageLayers& layers) {
  model::Spec slice = spec;
  slice.num_layers = layers.decoder_count(spec);
  return slice;
}

PipelinePrediction predict_pipeline(const std::vector<Prediction>& stages, const runtime::Policy& block,
                                    const runtime::Workload& workload, double hidden_bytes_per_token,
                                    const StageLinkRate& link) {
  TG_CHECK(!stages.empty() && link.bytes_per_second > 0 && link.latency_seconds >= 0 && workload.gen_len >= 1,
           "internal: pipeline prediction input");
  PipelinePrediction p;
  const auto W = static_cast<double>(stages.size());
  const double bls = static_cast<double>(block.block_size());
  const double decode_tokens = static_cast<double>(workload.gen_len - 1);
  p.link = link;
  // A hop carries one message per gpu batch.
  const double messages_latency = double(block.num_gpu_batches) * link.latency_seconds;
  p.prefill_hop_seconds =
      messages_latency + bls * double(workload.prompt_len) * hidden_bytes_per_token / link.bytes_per_second;
  p.decode_hop_seconds = messages_latency + bls * hidden_bytes_per_token / link.bytes_per_second;
  double prefill_round = 0, prefill_slowest = 0, decode_round = 0, decode_slowest = 0;
  for (size_t s = 0; s < stages.size(); ++s) {
    const double prefill = stages[s].prefill_seconds;
    const double decode = decode_tokens > 0 ? stages[s].decode_seconds / decode_tokens : 0;
    prefill_round += prefill + p.prefill_hop_seconds;
    decode_round += decode + p.decode_hop_seconds;
    prefill_slowest = std::max(prefill_slowest, prefill);
    if (decode > decode_slowest) {
      decode_slowest = decode;
      p.bottleneck_stage = static_cast<int>(s);
    }
  }
  p.prefill_seconds = prefill_round + (W - 1) * prefill_slowest;
  p.decode_cycle_seconds = std::max(W * decode_slowest, decode_round);
  p.wave_seconds = p.prefill_seconds + decode_tokens * p.decode_cycle_seconds;
  p.sequences_per_wave = static_cast<int64_t>(W * bls);
  const double decode_seconds = decode_tokens * p.decode_cycle_seconds;
  p.decode_throughput = decode_seconds > 0 ? W * bls * decode_tokens / decode_seconds : 0;
  p.total_throughput = W * bls * double(workload.gen_len) / p.wave_seconds;
  return p;
}

size_t heaviest_stage(const model::Spec& spec, const std::vector<runtime::StageLayers>& stages) {
  const auto weight_layers = spec.weight_layers();
  size_t heaviest = 0;
  int64_t most = -1;
  for (size_t s = 0; s < stages.size(); ++s) {
    int64_t elements = 0;
    for (int64_t l = stages[s].first; l < stages[s].end; ++l) elements += weight_layers[static_cast<size_t>(l)].numel();
    if (elements > most) {
      most = elements;
      heaviest = s;
    }
  }
  return heaviest;
}

SearchResult search_stage(const model::Spec& spec, const std::vector<runtime::StageLayers>& stages, size_t stage,
                          const runtime::Workload& workload, const runtime::Budgets& budgets, const HardwareProfile& hw,
                          const SearchOptions& options, const std::optional<BlockShape>& shape) {
  const auto W = static_cast<int64_t>(stages.size());
  // Each group holds one block; the job's sequences are dealt to the W groups.
  runtime::Workload w = workload;
  if (w.num_sequences > 0) w.num_sequences = (w.num_sequences + W - 1) / W;
  SearchOptions o = options;
  o.groups = W;
  if (shape) {
    o.gpu_batch_sizes = {shape->gpu_batch_size};
    o.num_gpu_batches = shape->num_gpu_batches;
  }
  return search_policy(stage_slice(spec, stages[stage]), w, budgets, hw, o);
}

PipelinePlan plan_pipeline(const model::Spec& spec, const runtime::Workload& workload, const runtime::Budgets& budgets,
                           const HardwareProfile& hw, const SearchOptions& options, int64_t stages,
                           const StageLinkRate& link) {
  PipelinePlan plan;
  const auto layers = runtime::split_stages(spec, stages);
  const size_t heaviest = heaviest_stage(spec, layers);
  plan.stages.resize(layers.size());
  for (size_t s = 0; s < layers.size(); ++s) plan.stages[s].layers = layers[s];
  plan.stages[heaviest].search = search_stage(spec, layers, heaviest, workload, budgets, hw, options, std::nullopt);
  const runtime::Policy& chosen = plan.stages[heaviest].search.policy;
  const BlockShape shape{chosen.gpu_batch_size, chosen.num_gpu_batches};
  std::vector<Prediction> predictions;
  for (size_t s = 0; s < layers.size(); ++s) {
    if (s != heaviest) plan.stages[s].search = search_stage(spec, layers, s, workload, budgets, hw, options, shape);
    predictions.push_back(plan.stages[s].search.prediction);
  }
  const ModelSizes sizes(spec, options.dtype_bytes);
  plan.prediction =
      predict_pipeline(predictions, chosen, workload, sizes.hidden_bytes_per_token(), link);
  return plan;
}

}  // namespace tiergen::policy
