#pragma once
// The KV cache of one block: for every decoder layer and gpu batch, keys and values
// [gbs * kv_heads, max_len, head_dim], split along (sequence, kv head) units across
// tiers by the policy's cache percentages.
#include <memory>
#include <vector>

#include "tiergen/model/forward.h"
#include "tiergen/runtime/cache_tensor.h"
#include "tiergen/runtime/stage.h"
#include "tiergen/runtime/stats.h"

namespace tiergen::runtime {

// Cache units of one (layer, batch) brought next to where decode attention runs.
struct CacheLoad {
  std::array<Staged, kNumTiers> keys, values;                  // dense, on the compute device
  std::array<HostCacheView, kNumTiers> host_keys, host_values;  // for the CPU kernel

  // Orders the calling thread's stream after the copies that filled keys and values.
  void make_current_stream_wait(const DeviceContext& device) const {
    for (const Staged& s : keys) s.ready.make_current_stream_wait(device);
    for (const Staged& s : values) s.ready.make_current_stream_wait(device);
  }
  // Marks keys and values as read by the calling thread's stream (DeviceContext::
  // used_on_current_stream).
  void used_on_current_stream(const DeviceContext& device) const {
    for (const Staged& s : keys) device.used_on_current_stream(s.tensor);
    for (const Staged& s : values) device.used_on_current_stream(s.tensor);
  }
};

// What the decode attention of every layer shares in one token of one gpu batch, on
// the compute device: each (sequence, kv head) unit's padding and its visibility mask
// over the token's keys, for attention by LibTorch operators (the CPU kernel takes
// neither). Built by the first layer that needs them, for the position it attends at;
// the batch's owner empties them at every token (a refilled batch may meet a position
// again with other padding).
struct DecodeUnitMasks {
  int64_t past_len = -1;  // the position they were built for
  at::Tensor pad;         // [units]
  at::Tensor visibility;  // [units, 1, 1, past_len + 1] bool (model::visibility_mask)
};

class KvCache {
 public:
  // The cache of the decoder layers of `stage` (a pipeline stage holds its own);
  // `layer` arguments below are the model's decoder layer indices.
  KvCache(const model::Spec& spec, const Policy& policy, Tiers& tiers, const DeviceContext& device, int64_t max_len,
          const StageLayers& stage);

  CacheTensor& keys(int64_t layer, int64_t batch) { return *keys_[slot(layer, batch)]; }
  CacheTensor& values(int64_t layer, int64_t batch) { return *values_[slot(layer, batch)]; }

  // Which tiers' units attention reads from the host (cpu attention) or needs on the device.
  bool cpu_attention_for(Tier t) const { return t != Tier::Gpu && cpu_attention_; }

  // Prefetch for the decode step writing position `pos`: loads positions [0, pos) of
  // units that attention cannot read where they live (into full-length buffers, so
  // every step's load has the same size and the allocator reuses one block).
  std::shared_ptr<CacheLoad> load(int64_t layer, int64_t batch, int64_t pos);

  // Decode attention of one new token per sequence. q: [b, heads, 1, d];
  // new_k/new_v: [b, kv_heads, 1, d]. Writes the new entries where attention needs
  // them now; returns the writes still owed to cpu/disk homes (run as store tasks).
  // `pad_on_host` is step.pad kept on the host for the CPU kernel. `live_rows` (rows
  // of the batch, ascending; null: all): attention runs for these rows only, the
  // others' outputs are zeros (finished sequences, whose entries are never read again).
  // `shared` (null: none): the token's masks, built here by the first layer that needs
  // them and read by the others.
  at::Tensor decode_attention(int64_t layer, int64_t batch, const model::QkvProjection& qkv,
                              const model::StepInputs& step, const at::Tensor& pad_on_host, CacheLoad* loaded,
                              Stats& stats, const StepId& step_id, std::vector<std::function<void()>>& pending_stores,
                              const std::vector<int64_t>* live_rows = nullptr, DecodeUnitMasks* shared = nullptr);

  // Throws if the GPU quantizer met a value it cannot store since the last check
  // (compressed cache on a GPU; a no-op elsewhere). Called once per token.
  void check_quantization();

 private:
  size_t slot(int64_t layer, int64_t batch) const {
    return static_cast<size_t>((layer - first_layer_) * num_batches_ + batch);
  }
  at::Tensor cpu_kernel_attention(const at::Tensor& q_units, const HostCacheView& keys, const HostCacheView& values,
                                  const at::Tensor& unit_pad, int64_t seq_len);

  int64_t first_layer_, num_batches_, kv_heads_, head_dim_;
  bool cpu_attention_;
  DeviceContext device_;
  CompressionConfig compression_;
  at::Tensor quantize_errors_;  // device int32 [1], compressed cache on a GPU only
  std::vector<std::unique_ptr<CacheTensor>> keys_, values_;
};

}  // namespace tiergen::runtime
