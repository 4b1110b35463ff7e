#include "policy/memory_model.h"

#include <algorithm>

namespace tiergen::policy {

namespace {

using runtime::Tier;

Linear& at(MemoryModel& m, Tier tier) { return m.peak[static_cast<int>(tier)]; }

// Homes of all weights, and the double-buffered staging of the layer in flight
// (A.3's 2(1 − wg)·w on the gpu, wn·w on the cpu; dense copies of compressed tensors).
// When both phases multiply every layer's matrices at home, no host weight streams
// through the gpu (but norms and biases, which this model leaves out).
void add_weights(const ModelSizes& sizes, const runtime::Policy& policy, MemoryModel& m) {
  const auto& c = policy.compress_weight;
  const double total = sizes.total_weight_bytes(c);
  const bool always_at_home = policy.cpu_weight_compute_prefill && policy.cpu_weight_compute_decode &&
                              policy.cpu_weight_compute_layer_percent >= 100;
  const double layer = always_at_home ? 0.0 : sizes.max_layer_weight_bytes(c);
  at(m, Tier::Gpu) += Linear::sum(total, {kWg}) + Linear::sum(2 * layer, {kWc, kWn}) +
                      Linear::of(2 * sizes.max_layer_compressed_dense_bytes(c));
  at(m, Tier::Cpu) += Linear::sum(total, {kWc}) + Linear::sum(2 * layer, {kWn});
  at(m, Tier::Disk) += Linear::sum(total, {kWn});
}

// The KV cache of the block for all layers and s + n positions (A.3's
// 4(s + n)·h1·bls·l, with grouped-query sizes), plus the buffers attention needs.
void add_kv_cache(const ModelSizes& sizes, const runtime::Policy& policy, const runtime::Workload& w,
                  MemoryModel& m) {
  const double positions = double(w.prompt_len + w.gen_len);
  const double stored_token = sizes.kv_stored_bytes_per_token(policy.compress_cache);
  const double dense_token = sizes.kv_bytes_per_token();
  const double total =
      double(sizes.groups()) * double(sizes.num_layers()) * double(policy.block_size()) * positions * stored_token;
  at(m, Tier::Gpu) += Linear::sum(total, {kCg});
  at(m, Tier::Cpu) += Linear::sum(total, {kCc});
  at(m, Tier::Disk) += Linear::sum(total, {kCn});
  const double batch_stored = double(policy.gpu_batch_size) * positions * stored_token;
  const double batch_dense = double(policy.gpu_batch_size) * positions * dense_token;
  at(m, Tier::Cpu) += Linear::sum(2 * batch_stored, {kCn});
  if (!policy.cpu_cache_compute) {
    at(m, Tier::Gpu) += Linear::sum(2 * (batch_stored + batch_dense), {kCc, kCn});
  }
  if (policy.compress_cache.enabled) at(m, Tier::Gpu) += Linear::sum(batch_dense, {kCg});
}

// Hidden states of the block at the prefill peak (A.3's 2s·h1·bls) and the gpu's
// double-buffered inputs and outputs.
void add_activations(const ModelSizes& sizes, const runtime::Policy& policy, const runtime::Workload& w,
                     MemoryModel& m) {
  const double row = double(w.prompt_len) * sizes.hidden_bytes_per_token();
  const double block = double(sizes.groups()) * double(policy.block_size()) * row;
  const double batch = double(policy.gpu_batch_size) * row;
  at(m, Tier::Gpu) += Linear::sum(block, {kHg}) + Linear::of(4 * batch);
  at(m, Tier::Cpu) += Linear::sum(block, {kHc}) + Linear::sum(4 * batch, {kHn});
  at(m, Tier::Disk) += Linear::sum(block, {kHn});
  // A pipeline stage's messages in flight: as runtime::plan_memory counts them.
  if (sizes.groups() > 1) at(m, Tier::Cpu) += Linear::of(block + batch);
}

// Temporaries of one layer's compute for one gpu batch: exactly the runtime's bound
// (it does not depend on the placement fractions).
double compute_scratch(const ModelSizes& sizes, const runtime::Policy& policy, const runtime::Workload& w) {
  return static_cast<double>(runtime::compute_scratch_bytes(sizes.spec(), policy, w, sizes.dtype_bytes()));
}

}  // namespace

MemoryModel build_memory_model(const ModelSizes& sizes, const runtime::Policy& policy,
                               const runtime::Workload& workload) {
  MemoryModel m;
  add_weights(sizes, policy, m);
  add_kv_cache(sizes, policy, workload, m);
  add_activations(sizes, policy, workload, m);
  at(m, Tier::Gpu) += Linear::of(compute_scratch(sizes, policy, workload));
  return m;
}

}  // namespace tiergen::policy
