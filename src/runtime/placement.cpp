#include "tiergen/runtime/placement.h"

#include <algorithm>
#include <cmath>

#include "tiergen/common/bytes.h"
#include "tiergen/common/error.h"
#include "tiergen/model/forward.h"

namespace tiergen::runtime {

std::string tier_name(Tier tier) {
  switch (tier) {
    case Tier::Gpu: return "gpu";
    case Tier::Cpu: return "cpu";
    case Tier::Disk: return "disk";
  }
  return "?";
}

TierBytes& TierBytes::operator+=(const TierBytes& other) {
  for (int i = 0; i < kNumTiers; ++i) bytes[i] += other.bytes[i];
  return *this;
}

Tier weight_home(double mid_percent, const Policy& policy) {
  // Cumulative ranges in FlexGen's order: disk, cpu, gpu.
  const double disk_end = policy.w_disk_percent();
  const double cpu_end = disk_end + policy.w_cpu_percent;
  if (mid_percent < disk_end) return Tier::Disk;
  if (mid_percent < cpu_end) return Tier::Cpu;
  return Tier::Gpu;
}

namespace {

// FlexGen's midpoint rule over tensors [begin, end) of a layer.
void place_range(const model::WeightLayer& layer, size_t begin, size_t end, const Policy& policy,
                 std::vector<Tier>& homes) {
  double total = 0;
  for (size_t i = begin; i < end; ++i) total += static_cast<double>(layer.tensors[i].numel());
  double cumulative = 0;
  for (size_t i = begin; i < end; ++i) {
    const double size = static_cast<double>(layer.tensors[i].numel());
    cumulative += size;
    homes[i] = weight_home((cumulative - size / 2) / total * 100.0, policy);
  }
}

// Index of the first tensor of a decoder layer's MLP half (its norm or first matrix).
size_t mlp_begin(const model::WeightLayer& layer) {
  for (size_t i = 0; i < layer.tensors.size(); ++i) {
    const std::string& n = layer.tensors[i].name;
    if (n.find(".fc1.") != std::string::npos || n.find("post_attention_layernorm") != std::string::npos) return i;
  }
  return layer.tensors.size();
}

}  // namespace

std::vector<Tier> place_layer_weights(const model::WeightLayer& layer, const Policy& policy) {
  std::vector<Tier> homes(layer.tensors.size(), Tier::Gpu);
  // With sep_layer (FlexGen's default) the attention and MLP halves of a decoder layer
  // are placed as layers of their own, which halves the granularity of the split.
  const size_t split = policy.sep_layer && layer.kind == "decoder" ? mlp_begin(layer) : layer.tensors.size();
  place_range(layer, 0, split, policy, homes);
  place_range(layer, split, layer.tensors.size(), policy, homes);
  return homes;
}

bool weight_is_tied_table(const model::WeightLayer& layer, const model::TensorSpec& tensor,
                          const CompressionConfig& compression) {
  return layer.kind == "head" && tensor.source_name != tensor.name &&
         !weight_is_compressed(layer, tensor, compression);
}

std::vector<std::vector<WeightHome>> place_stage_weights(const std::vector<model::WeightLayer>& layers,
                                                         const Policy& policy, const StageLayers& stage,
                                                         int64_t groups) {
  std::vector<std::vector<WeightHome>> homes;
  for (int64_t index = stage.first; index < stage.end; ++index) {
    std::vector<WeightHome> layer_homes;
    for (Tier tier : place_layer_weights(layers[static_cast<size_t>(index)], policy)) layer_homes.push_back({tier});
    homes.push_back(std::move(layer_homes));
  }
  const auto last = static_cast<int64_t>(layers.size()) - 1;
  if (groups > 1 || !stage.contains(0) || !stage.contains(last)) return homes;
  const model::WeightLayer& embedding = layers.front();
  const model::WeightLayer& head = layers.back();
  for (size_t t = 0; t < head.tensors.size(); ++t) {
    const model::TensorSpec& tensor = head.tensors[t];
    if (!weight_is_tied_table(head, tensor, policy.compress_weight)) continue;
    for (size_t e = 0; e < embedding.tensors.size(); ++e) {
      if (embedding.tensors[e].name != tensor.source_name) continue;
      WeightHome& table = homes.front()[e];
      WeightHome& matrix = homes.back()[t];
      table.tier = matrix.tier = std::min(table.tier, matrix.tier);  // Gpu < Cpu < Disk
      matrix.shared_layer = 0;
      matrix.shared_tensor = e;
    }
  }
  return homes;
}

uint64_t quantized_bytes(int64_t rows, int64_t cols, const CompressionConfig& c) {
  const int64_t groups = (cols + c.group_size - 1) / c.group_size;
  const int64_t packed = groups * c.group_size * c.bits / 8;
  return static_cast<uint64_t>(rows) * static_cast<uint64_t>(packed + groups * 4);
}

bool weight_is_compressed(const model::WeightLayer& layer, const model::TensorSpec& tensor,
                          const CompressionConfig& compression) {
  return compression.enabled && layer.kind != "embedding" && tensor.shape.size() == 2;
}

bool decoder_layer_multiplies_at_home(const Policy& policy, int64_t decoder_index, int64_t num_decoder_layers) {
  // Layer d is chosen when the running count of chosen layers, share × (d + 1), passes
  // a whole number at it (Bresenham's spread; all layers at 100%, none at 0%).
  const double share = policy.cpu_weight_compute_layer_percent / 100.0;
  const auto chosen_through = [&](int64_t layers) {
    return static_cast<int64_t>(std::floor(share * static_cast<double>(layers) + 1e-9));
  };
  return decoder_index >= 0 && decoder_index < num_decoder_layers &&
         chosen_through(decoder_index + 1) > chosen_through(decoder_index);
}

bool weight_multiplied_at_home(const model::Spec& spec, int64_t layer_index, const model::WeightLayer& layer,
                               const model::TensorSpec& tensor, Tier home, const Policy& policy, bool prefill) {
  if (home == Tier::Gpu || tensor.shape.size() != 2) return false;
  // A decode step looks up one row per sequence: the table stays where it lives and
  // only the rows cross (a prompt's rows can outweigh the table: prefill follows the
  // policy like a product).
  if (!prefill && layer.is_lookup_table(tensor)) return true;
  if (!policy.cpu_weight_compute(prefill)) return false;
  // The embedding and the head go with any share of the decoder layers.
  if (layer.kind == "embedding" || layer.kind == "head") return policy.cpu_weight_compute_layer_percent > 0;
  return decoder_layer_multiplies_at_home(policy, layer_index - 1, spec.num_layers);
}

uint64_t weight_stored_bytes(const model::WeightLayer& layer, const model::TensorSpec& tensor,
                             int dtype_bytes, const CompressionConfig& compression) {
  if (weight_is_compressed(layer, tensor, compression)) {
    // [out, in], grouped along in (weight_store.h).
    return quantized_bytes(tensor.shape[0], tensor.shape[1], compression);
  }
  return static_cast<uint64_t>(tensor.numel()) * dtype_bytes;
}

std::array<int64_t, kNumTiers> split_units(int64_t units, double gpu_percent, double cpu_percent) {
  // Round the cumulative boundaries so the parts always sum to `units`.
  const auto gpu_end = static_cast<int64_t>(std::llround(units * gpu_percent / 100.0));
  const auto cpu_end =
      std::min<int64_t>(units, static_cast<int64_t>(std::llround(units * (gpu_percent + cpu_percent) / 100.0)));
  return {gpu_end, std::max<int64_t>(0, cpu_end - gpu_end), units - std::max(cpu_end, gpu_end)};
}

TierBytes MemoryPlan::total() const {
  TierBytes t = weights;
  t += kv_cache;
  t += activations;
  t += working;
  return t;
}

std::string MemoryPlan::over_budget(const Budgets& budgets) const {
  const TierBytes t = total();
  for (Tier tier : {Tier::Gpu, Tier::Cpu, Tier::Disk}) {
    if (t[tier] > budgets.of(tier)) {
      return fmt::format(
          "{} tier needs {} but its budget is {} (over by {}: weights {}, KV cache {}, activations {}, "
          "working buffers {})",
          tier_name(tier), format_bytes(t[tier]), format_bytes(budgets.of(tier)),
          format_bytes(t[tier] - budgets.of(tier)), format_bytes(weights[tier]), format_bytes(kv_cache[tier]),
          format_bytes(activations[tier]), format_bytes(working[tier]));
    }
  }
  return "";
}

namespace {

// Weight homes, plus double-buffered staging: the gpu holds the current and the next
// layer's weights that do not live there (dense after dequantization, plus the
// compressed copy while it is being dequantized), except those multiplied at home in
// that phase; disk weights pass through cpu staging. The larger phase counts.
void plan_weights(const model::Spec& spec, const Policy& policy, int b, const StageShape& shape, MemoryPlan& plan) {
  const StageLayers& stage = shape.layers;
  uint64_t max_gpu_stage = 0, max_cpu_stage = 0;
  const auto layers = spec.weight_layers();
  const auto stage_homes = place_stage_weights(layers, policy, stage, shape.groups);
  for (int64_t index = stage.first; index < stage.end; ++index) {
    const auto& layer = layers[static_cast<size_t>(index)];
    const auto& placed = stage_homes[static_cast<size_t>(index - stage.first)];
    std::vector<Tier> homes;
    uint64_t cpu_stage = 0;
    for (size_t i = 0; i < layer.tensors.size(); ++i) {
      homes.push_back(placed[i].tier);
      const uint64_t stored = weight_stored_bytes(layer, layer.tensors[i], b, policy.compress_weight);
      if (placed[i].has_own_home()) plan.weights[homes[i]] += stored;
      if (homes[i] == Tier::Disk) cpu_stage += stored;
    }
    for (bool prefill : {true, false}) {
      // Compressed weights multiplied at home by many rows get a dense host copy
      // (model::quantized_linear_product) while their layer is loaded.
      uint64_t gpu_stage = 0, cpu_dense = 0;
      for (size_t i = 0; i < layer.tensors.size(); ++i) {
        const auto& t = layer.tensors[i];
        const bool compressed = weight_is_compressed(layer, t, policy.compress_weight);
        const uint64_t dense = compressed ? static_cast<uint64_t>(t.numel()) * b : 0;
        if (weight_multiplied_at_home(spec, index, layer, t, homes[i], policy, prefill)) {
          cpu_dense += dense;
          continue;
        }
        if (homes[i] != Tier::Gpu) gpu_stage += weight_stored_bytes(layer, t, b, policy.compress_weight);
        gpu_stage += dense;
      }
      max_gpu_stage = std::max(max_gpu_stage, gpu_stage);
      max_cpu_stage = std::max(max_cpu_stage, cpu_stage + cpu_dense);
    }
  }
  plan.working[Tier::Gpu] += 2 * max_gpu_stage;
  plan.working[Tier::Cpu] += 2 * max_cpu_stage;
}

// The KV cache of one gpu batch in one layer is split along (sequence, kv head) units,
// each unit holding keys and values for all positions.
void plan_kv_cache(const model::Spec& spec, const Policy& policy, const Workload& w, int b, const StageShape& stage,
                   MemoryPlan& plan) {
  const int64_t max_len = w.prompt_len + w.gen_len;
  const int64_t units = policy.gpu_batch_size * spec.num_kv_heads;
  const auto split = split_units(units, policy.cache_gpu_percent, policy.cache_cpu_percent);
  const uint64_t unit_stored = policy.compress_cache.enabled
                                   ? 2 * quantized_bytes(max_len, spec.head_dim, policy.compress_cache)
                                   : 2 * static_cast<uint64_t>(max_len * spec.head_dim) * b;
  const uint64_t unit_dense = 2 * static_cast<uint64_t>(max_len * spec.head_dim) * b;
  const uint64_t copies =
      static_cast<uint64_t>(stage.layers.decoder_count(spec) * policy.num_gpu_batches * stage.groups);
  for (Tier tier : {Tier::Gpu, Tier::Cpu, Tier::Disk}) {
    plan.kv_cache[tier] += copies * split[static_cast<int>(tier)] * unit_stored;
  }
  const int64_t cpu_units = split[1], disk_units = split[2];
  // Decode attention over non-gpu units runs on the cpu (in place) or on the gpu
  // (after a double-buffered load, dequantized there).
  if (policy.cpu_cache_compute) {
    plan.working[Tier::Cpu] += 2 * disk_units * unit_stored;
  } else {
    plan.working[Tier::Gpu] += 2 * (cpu_units + disk_units) * (unit_stored + unit_dense);
    plan.working[Tier::Cpu] += 2 * disk_units * unit_stored;
  }
  if (policy.compress_cache.enabled) plan.working[Tier::Gpu] += split[0] * unit_dense;
}

// Hidden states of a block between layers: [gpu batch, prompt_len, hidden] at the
// prefill peak, split along sequences. Each gpu batch's input and output are
// double-buffered on the gpu while the neighbours' are loaded and stored.
void plan_activations(const model::Spec& spec, const Policy& policy, const Workload& w, int b, int64_t groups,
                      MemoryPlan& plan) {
  const uint64_t row = static_cast<uint64_t>(w.prompt_len * std::max(spec.hidden_size, spec.word_embed_proj_dim)) * b;
  const auto split = split_units(policy.gpu_batch_size, policy.act_gpu_percent, policy.act_cpu_percent);
  for (Tier tier : {Tier::Gpu, Tier::Cpu, Tier::Disk}) {
    plan.activations[tier] += groups * policy.num_gpu_batches * split[static_cast<int>(tier)] * row;
  }
  plan.working[Tier::Gpu] += 4 * policy.gpu_batch_size * row;
  plan.working[Tier::Cpu] += 4 * split[2] * row;
  // A pipeline stage's messages (block_pipeline.cpp): the host copies of every group's
  // hidden states in flight to the next stage, and one gpu batch's being received.
  if (groups > 1) plan.working[Tier::Cpu] += (groups * policy.block_size() + policy.gpu_batch_size) * row;
}

}  // namespace

// Upper bound of the temporaries of one layer's compute for one gpu batch at the
// prefill peak: norms, q/k/v, attention scores and probabilities (fp32), MLP
// intermediates (two for SwiGLU) and the last position's fp32 logits; plus every gpu
// batch's decode attention masks.
uint64_t compute_scratch_bytes(const model::Spec& spec, const Policy& policy, const Workload& w, int b) {
  const uint64_t tokens = static_cast<uint64_t>(policy.gpu_batch_size * w.prompt_len);
  const uint64_t max_len = static_cast<uint64_t>(w.prompt_len + w.gen_len);
  const uint64_t hidden = static_cast<uint64_t>(std::max(spec.hidden_size, spec.word_embed_proj_dim));
  const uint64_t qkv = static_cast<uint64_t>(spec.num_heads * spec.head_dim + 2 * spec.kv_dim());
  const uint64_t mlp = static_cast<uint64_t>(spec.intermediate_size) * (spec.family == model::Family::Llama ? 3 : 1);
  const uint64_t per_token = (4 * hidden + 2 * qkv + mlp) * b;
  // Prefill attends over the prompt only; scores, probabilities and their cast are
  // live together, for one chunk of sequences at a time.
  const int64_t chunk = std::min(policy.gpu_batch_size, model::attention_chunk_sequences(spec.num_heads, w.prompt_len, w.prompt_len));
  const uint64_t prefill_scores = 3ull * chunk * spec.num_heads * w.prompt_len * w.prompt_len * 4;
  const uint64_t decode_scores = 3ull * policy.gpu_batch_size * spec.num_heads * max_len * 4;
  const uint64_t scores = std::max(prefill_scores, decode_scores);
  const uint64_t logits = static_cast<uint64_t>(policy.gpu_batch_size) * spec.vocab_size * (4 + b);
  // Each gpu batch's decode masks, kept across the layers of a token (DecodeUnitMasks):
  // a bool per unit and key, and each unit's padding.
  const uint64_t masks = static_cast<uint64_t>(policy.num_gpu_batches * policy.gpu_batch_size * spec.num_kv_heads) *
                         (max_len + 8);
  return tokens * per_token + scores + logits + masks;
}

MemoryPlan plan_memory(const model::Spec& spec, const Policy& policy, const Workload& workload,
                       int dtype_bytes, const StageShape& stage) {
  TG_CHECK(dtype_bytes == 2 || dtype_bytes == 4, "plan_memory: dtype size must be 2 or 4, got {}", dtype_bytes);
  TG_CHECK(workload.prompt_len >= 1 && workload.gen_len >= 1, "plan_memory: prompt and generation lengths must be positive");
  StageShape shape = stage;
  if (shape.layers.end == 0) shape.layers = StageLayers::whole(spec);
  MemoryPlan plan;
  plan_weights(spec, policy, dtype_bytes, shape, plan);
  plan_kv_cache(spec, policy, workload, dtype_bytes, shape, plan);
  plan_activations(spec, policy, workload, dtype_bytes, shape.groups, plan);
  plan.working[Tier::Gpu] += compute_scratch_bytes(spec, policy, workload, dtype_bytes);
  return plan;
}

}  // namespace tiergen::runtime
