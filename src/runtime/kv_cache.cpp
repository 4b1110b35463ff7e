#include "tiergen/runtime/kv_cache.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "kernels/cpu/attention.h"
#include "tiergen/common/error.h"
#include "tiergen/runtime/compressed_tensor.h"
#include "tiergen/runtime/device.h"

namespace tiergen::runtime {

KvCache::KvCache(const model::Spec& spec, const Policy& policy, Tiers& tiers, const DeviceContext& device,
                 int64_t max_len, const StageLayers& stage)
    : first_layer_(stage.first_decoder(spec)),
      num_batches_(policy.num_gpu_batches),
      kv_heads_(spec.num_kv_heads),
      head_dim_(spec.head_dim),
      cpu_attention_(policy.cpu_cache_compute),
      device_(device),
      compression_(policy.compress_cache) {
  if (compression_.enabled && device.is_cuda()) {
    quantize_errors_ = at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(device.compute));
  }
  const int64_t units = policy.gpu_batch_size * spec.num_kv_heads;
  const auto split = split_units(units, policy.cache_gpu_percent, policy.cache_cpu_percent);
  for (int64_t layer = first_layer_; layer < first_layer_ + stage.decoder_count(spec); ++layer) {
    for (int64_t batch = 0; batch < num_batches_; ++batch) {
      const std::string where = fmt::format("KV cache layer {} batch {}", layer, batch);
      keys_.push_back(std::make_unique<CacheTensor>(tiers, device, split, max_len, head_dim_, where + " keys",
                                                    compression_, quantize_errors_));
      values_.push_back(std::make_unique<CacheTensor>(tiers, device, split, max_len, head_dim_, where + " values",
                                                      compression_, quantize_errors_));
    }
  }
}

std::shared_ptr<CacheLoad> KvCache::load(int64_t layer, int64_t batch, int64_t pos) {
  auto loaded = std::make_shared<CacheLoad>();
  CacheTensor& k = keys(layer, batch);
  CacheTensor& v = values(layer, batch);
  for (Tier t : {Tier::Cpu, Tier::Disk}) {
    const int i = static_cast<int>(t);
    if (k.units_on(t) == 0) continue;
    if (cpu_attention_for(t)) {
      if (t == Tier::Disk) {  // cpu units are read in place
        loaded->host_keys[i] = k.host_view(t, pos, pos + 1);
        loaded->host_values[i] = v.host_view(t, pos, pos + 1);
      }
    } else {
      loaded->keys[i] = k.dense_on_compute(t, pos, k.positions());
      loaded->values[i] = v.dense_on_compute(t, pos, v.positions());
    }
  }
  return loaded;
}

at::Tensor KvCache::cpu_kernel_attention(const at::Tensor& q_units, const HostCacheView& keys,
                                         const HostCacheView& values, const at::Tensor& unit_pad, int64_t seq_len) {
  // q_units [n, groups, 1, d] -> host fp32 [n, groups, d]; only q and the output cross.
  const at::Tensor q = copy_to_host_now(q_units.squeeze(2)).to(at::kFloat).contiguous();
  at::Tensor out = at::empty_like(q);
  const at::Tensor start = unit_pad.to(at::kCPU).contiguous();
  kernels::DecodeAttentionArgs args;
  args.q = q.data_ptr<float>();
  args.out = out.data_ptr<float>();
  args.batch = q.size(0);
  args.num_heads = q.size(1);
  args.num_kv_heads = 1;  // one unit = one (sequence, kv head)
  args.head_dim = q.size(2);
  args.max_len = keys.capacity;
  args.seq_len = seq_len;
  args.start = start.data_ptr<int64_t>();
  args.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim_)));
  args.k = keys.view(device_, compression_);
  args.v = values.view(device_, compression_);
  // The policy's thread count as LibTorch holds it: the kernel's own OpenMP default
  // may belong to another runtime, or to a thread the policy never configured.
  args.num_threads = at::get_num_threads();
  kernels::decode_attention(args);
  return copy_to_device(out.to(device_.dtype), device_.compute).unsqueeze(2);
}

void KvCache::check_quantization() { check_quantization_flag(quantize_errors_, "the KV cache's new entries"); }

namespace {

// Unit ranges [begin, end) of tier units [first, first + n), relative to `first`, that
// belong to `live_rows` (each row holds `kv_heads` consecutive units); all of them when
// `live_rows` is null.
std::vector<std::pair<int64_t, int64_t>> live_unit_ranges(const std::vector<int64_t>* live_rows, int64_t kv_heads,
                                                          int64_t first, int64_t n) {
  if (!live_rows) return {{0, n}};
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int64_t row : *live_rows) {
    const int64_t begin = std::max<int64_t>(row * kv_heads, first) - first;
    const int64_t end = std::min<int64_t>((row + 1) * kv_heads, first + n) - first;
    if (begin >= end) continue;
    if (!ranges.empty() && ranges.back().second == begin) {
      ranges.back().second = end;
    } else {
      ranges.emplace_back(begin, end);
    }
  }
  return ranges;
}

// Each (sequence, kv head) unit's padding and visibility mask for the decode token at
// position `pos`, on `device`.
DecodeUnitMasks unit_masks(const at::Tensor& pad, int64_t kv_heads, int64_t pos, const at::Device& device) {
  DecodeUnitMasks m;
  m.past_len = pos;
  m.pad = pad.to(device).repeat_interleave(kv_heads);
  model::StepInputs step;
  step.pad = m.pad;
  step.past_len = pos;
  m.visibility = model::visibility_mask(step, 1, pos + 1, device);
  return m;
}

// The left padding of each (sequence, kv head) unit: pad [b] repeated kv_heads times,
// on the host (a loop, not repeat_interleave's several operators per layer).
at::Tensor unit_starts(const at::Tensor& pad_on_host, int64_t kv_heads) {
  const at::Tensor pad = pad_on_host.to(at::kLong).contiguous();
  at::Tensor units = at::empty({pad.numel() * kv_heads}, pad.options());
  const int64_t* from = pad.data_ptr<int64_t>();
  int64_t* to = units.data_ptr<int64_t>();
  for (int64_t row = 0; row < pad.numel(); ++row) std::fill_n(to + row * kv_heads, kv_heads, from[row]);
  return units;
}

HostCacheView narrow_units(const HostCacheView& view, int64_t begin, int64_t length) {
  HostCacheView part = view;
  for (Staged* s : {&part.values, &part.mins, &part.scales}) {
    if (s->tensor.defined()) s->tensor = s->tensor.narrow(0, begin, length);
  }
  return part;
}

}  // namespace

at::Tensor KvCache::decode_attention(int64_t layer, int64_t batch, const model::QkvProjection& qkv,
                                     const model::StepInputs& step, const at::Tensor& pad_on_host, CacheLoad* loaded,
                                     Stats& stats, const StepId& step_id,
                                     std::vector<std::function<void()>>& pending_stores,
                                     const std::vector<int64_t>* live_rows, DecodeUnitMasks* shared) {
  const int64_t b = qkv.q.size(0), heads = qkv.q.size(1), d = qkv.q.size(3);
  const int64_t groups = heads / kv_heads_, units = b * kv_heads_, pos = step.past_len;
  // Unit-major views: each (sequence, kv head) is an independent attention problem.
  const at::Tensor q_units = qkv.q.reshape({units, groups, 1, d});
  const at::Tensor k_new = qkv.k.reshape({units, 1, d});
  const at::Tensor v_new = qkv.v.reshape({units, 1, d});
  const at::Tensor unit_pad_on_host = unit_starts(pad_on_host, kv_heads_);
  DecodeUnitMasks own;  // for attention by LibTorch operators
  if (shared && shared->past_len != pos) *shared = DecodeUnitMasks{};
  DecodeUnitMasks& masks = shared ? *shared : own;
  CacheTensor& keys_home = keys(layer, batch);
  CacheTensor& values_home = values(layer, batch);

  std::vector<at::Tensor> outputs;
  for (Tier t : {Tier::Gpu, Tier::Cpu, Tier::Disk}) {
    const int64_t n = keys_home.units_on(t);
    if (n == 0) continue;
    const int i = static_cast<int>(t);
    const int64_t first = keys_home.begin(t);
    const at::Tensor kn = k_new.narrow(0, first, n), vn = v_new.narrow(0, first, n);
    const at::Tensor q = q_units.narrow(0, first, n);
    const bool on_cpu = t != Tier::Gpu && cpu_attention_;
    // On the CPU stand-in the gpu home is host memory too: the kernel reads it in place
    // (one fused pass in fp32) rather than ~25 LibTorch operators a layer.
    const bool kernel_in_place = t == Tier::Gpu && keys_home.host_resident(t);
    // Attention runs over the live rows' units only, in contiguous ranges (views, no
    // copies); the other units' outputs are zeros nobody reads.
    const auto ranges = live_unit_ranges(live_rows, kv_heads_, first, n);
    const bool every_unit = ranges.size() == 1 && ranges.front() == std::pair<int64_t, int64_t>(0, n);
    at::Tensor tier_out = every_unit ? at::Tensor() : at::zeros({n, groups, 1, d}, q_units.options());
    const auto place = [&](int64_t begin, const at::Tensor& part) {
      if (every_unit) {
        outputs.push_back(part);
      } else {
        tier_out.narrow(0, begin, part.size(0)).copy_(part);
      }
    };
    if (t == Tier::Gpu || (t == Tier::Cpu && on_cpu)) {
      // Homes attention reads in place get the new entry now.
      keys_home.write_tier(t, kn, pos);
      values_home.write_tier(t, vn, pos);
    } else {
      // The home still owes the new entry; the store task writes it (the copy off
      // the device runs on the storer's stream, not here).
      pending_stores.push_back([&keys_home, &values_home, t, kn, vn, pos] {
        keys_home.write_tier(t, kn, pos);
        values_home.write_tier(t, vn, pos);
      });
    }
    if (on_cpu || kernel_in_place) {
      std::optional<ScopedTimer> timer;
      if (on_cpu) timer.emplace(stats, Task::CpuAttention, false, step_id);
      HostCacheView kv = t == Tier::Disk ? loaded->host_keys[i] : keys_home.host_view(t, pos + 1, pos + 1);
      HostCacheView vv = t == Tier::Disk ? loaded->host_values[i] : values_home.host_view(t, pos + 1, pos + 1);
      if (t == Tier::Disk) {
        TG_CHECK(kv.values.tensor.defined(), "internal: KV cache of layer {} batch {} not loaded", layer, batch);
        keys_home.put_row(kv, kn, pos);
        values_home.put_row(vv, vn, pos);
      }
      const at::Tensor host_pad = unit_pad_on_host.narrow(0, first, n);
      for (const auto& [begin, end] : ranges) {
        const int64_t len = end - begin;
        place(begin, cpu_kernel_attention(q.narrow(0, begin, len), narrow_units(kv, begin, len),
                                          narrow_units(vv, begin, len), host_pad.narrow(0, begin, len), pos + 1));
      }
      if (!every_unit) outputs.push_back(tier_out);
      continue;
    }
    at::Tensor kt, vt;
    if (t == Tier::Gpu) {
      kt = keys_home.dense_on_compute(t, pos + 1, pos + 1).tensor;
      vt = values_home.dense_on_compute(t, pos + 1, pos + 1).tensor;
    } else {
      TG_CHECK(loaded && loaded->keys[i].tensor.defined(), "internal: KV cache of layer {} batch {} not loaded", layer,
               batch);
      kt = loaded->keys[i].tensor;
      vt = loaded->values[i].tensor;
      kt.narrow(1, pos, 1).copy_(keys_home.as_stored(kn));
      vt.narrow(1, pos, 1).copy_(values_home.as_stored(vn));
    }
    if (!masks.pad.defined()) masks = unit_masks(step.pad, kv_heads_, pos, qkv.q.device());
    const at::Tensor pad = masks.pad.narrow(0, first, n), visible = masks.visibility.narrow(0, first, n);
    const at::Tensor kk = kt.narrow(1, 0, pos + 1).unsqueeze(1);  // [n, 1, pos+1, d]
    const at::Tensor vv = vt.narrow(1, 0, pos + 1).unsqueeze(1);
    for (const auto& [begin, end] : ranges) {
      const int64_t len = end - begin;
      model::StepInputs unit_step;  // attention reads the padding, past length and mask only
      unit_step.pad = pad.narrow(0, begin, len);
      unit_step.past_len = pos;
      unit_step.visibility = visible.narrow(0, begin, len);
      place(begin, model::attend(q.narrow(0, begin, len), kk.narrow(0, begin, len), vv.narrow(0, begin, len), unit_step)
                       .view({len, groups, 1, d}));
    }
    if (!every_unit) outputs.push_back(tier_out);
  }
  // [units, groups, 1, d] -> [b, 1, heads * d] (head = kv_head * groups + group).
  return at::cat(outputs, 0).view({b, heads * d}).unsqueeze(1);
}

}  // namespace tiergen::runtime
