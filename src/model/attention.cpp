// Attention on the compute device (prefill, and decode when the KV cache is there).
// LibTorch 2.x: at::scaled_dot_product_attention (fused kernels on CUDA, no scores
// tensor in memory). LibTorch 1.13: matmul, fp32 softmax, matmul.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "tiergen/common/error.h"
#include "tiergen/common/torch_compat.h"
#include "tiergen/model/forward.h"

namespace tiergen::model {

at::Tensor visibility_mask(const StepInputs& step, int64_t t, int64_t total, const at::Device& device) {
  const auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  const at::Tensor key_index = at::arange(total, opts).view({1, 1, total});
  const at::Tensor query_index = (at::arange(t, opts) + step.past_len).view({1, t, 1});
  const at::Tensor pad = step.pad.to(device).view({-1, 1, 1});
  const at::Tensor visible = (key_index >= pad).logical_and(key_index <= query_index);
  return visible.logical_or(key_index == query_index).unsqueeze(1);
}

namespace {

// The step's own mask when its caller built it for these rows, queries, keys and device.
at::Tensor step_visibility_mask(const StepInputs& step, int64_t b, int64_t t, int64_t total, const at::Device& device) {
  const at::Tensor& built = step.visibility;
  if (built.defined() && built.device() == device && built.sizes() == at::IntArrayRef({b, 1, t, total})) return built;
  return visibility_mask(step, t, total, device);
}

#if TIERGEN_HAS_SDPA

// Recent LibTorch builds put cuDNN attention first on Hopper. cuDNN builds an
// execution graph for every new (batch, key length) it meets, 23-37 ms of host time
// each, and a decode step attends over one more key at every token: on an H200 the
// first layer of every OPT-6.7B decode token took 62 ms of the token's 90 (batch 24,
// all on the GPU; bench/RESULTS.md). The memory-efficient kernel takes the mask too
// and has no per-shape set-up, so cuDNN attention is switched off for the process the
// first time the engine attends.
void avoid_per_shape_attention_backends() {
#if TIERGEN_SDPA_HAS_CUDNN
  static std::once_flag once;
  std::call_once(once, [] { at::globalContext().setSDPUseCuDNN(false); });
#endif
}

// [b, kv_heads, total, d] -> [b, heads, total, d], for prompts (decode folds the groups
// into the query dimension instead, attend_all). The memory-efficient CUDA kernel (the
// one that takes a mask) has no grouped-query mode, and enable_gqa would send the call
// to the unfused math fallback, so the kv heads are repeated instead.
at::Tensor repeat_kv_heads(const at::Tensor& kv, int64_t groups) {
  if (groups == 1) return kv;
  const int64_t b = kv.size(0), kv_heads = kv.size(1), total = kv.size(2), d = kv.size(3);
  return kv.unsqueeze(2).expand({b, kv_heads, groups, total, d}).reshape({b, kv_heads * groups, total, d});
}

at::Tensor scaled_dot_product(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask) {
#if TIERGEN_SDPA_HAS_SCALE
  // q scaled first and scale 1 for the kernel: not every backend accumulates QK^T in
  // fp32 before scaling (LibTorch 2.6's fp16 CPU kernel turns raw dot products above
  // 65504 into NaN; the range tests catch it).
  const at::Tensor q_scaled = q * (1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  return at::scaled_dot_product_attention(q_scaled, k, v, mask, 0.0, false, 1.0);
#else
  return at::scaled_dot_product_attention(q, k, v, mask);
#endif
}

at::Tensor attend_all(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const StepInputs& step) {
  avoid_per_shape_attention_backends();
  const int64_t b = q.size(0), heads = q.size(1), t = q.size(2), d = q.size(3);
  const int64_t kv_heads = k.size(1), total = k.size(2), groups = heads / kv_heads;
  const at::Tensor mask = step_visibility_mask(step, b, t, total, q.device());  // [b, 1, t, total], true = attend
  if (t == 1 && groups > 1) {
    // Decode with grouped-query attention: one new query per head sees the same keys
    // in every head of a group, so a kv head's query heads go where query positions go,
    // [b, kv_heads, groups, d], and K/V are read as they are, not copied `groups` times.
    const at::Tensor out = scaled_dot_product(q.reshape({b, kv_heads, groups, d}), k, v, mask);
    return out.reshape({b, 1, heads * d});
  }
  const at::Tensor out = scaled_dot_product(q, repeat_kv_heads(k, groups), repeat_kv_heads(v, groups), mask);
  return out.transpose(1, 2).reshape({b, t, heads * d});
}

#else

// True for 16-bit CPU operands on a CPU without native products of their type, where
// LibTorch 1.13's batched 16-bit products are scalar fallbacks (bf16) or missing (fp16):
// attention there runs in fp32 and rounds its output once.
bool attends_in_fp32(const at::Tensor& q) {
  if (!q.is_cpu()) return false;
  if (q.scalar_type() == at::kBFloat16) return !kernels::cpu_has_native_bf16_products();
  if (q.scalar_type() == at::kHalf) return !kernels::cpu_has_native_fp16_products();
  return false;
}

at::Tensor attend_all(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const StepInputs& step) {
  if (attends_in_fp32(q)) {
    return attend_all(q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), step).to(q.scalar_type());
  }
  const int64_t b = q.size(0), heads = q.size(1), t = q.size(2), d = q.size(3);
  const int64_t kv_heads = k.size(1), total = k.size(2), groups = heads / kv_heads;
  // q is scaled by 1/sqrt(d) before QK^T, as Hugging Face and FlexGen do: in fp16 a raw
  // dot product above 65504 is already inf, and a row with inf becomes NaN in softmax.
  const at::Tensor q_scaled = q * (1.0 / std::sqrt(static_cast<double>(d)));
  // Grouped-query attention without copying K/V: fold each kv head's query heads
  // into the query-length dimension.
  const at::Tensor qg = q_scaled.reshape({b, kv_heads, groups * t, d});
  at::Tensor scores = at::matmul(qg, k.transpose(-1, -2)).to(at::kFloat).view({b, kv_heads, groups, t, total});
  const at::Tensor mask = step_visibility_mask(step, b, t, total, q.device()).unsqueeze(1);  // [b,1,1,t,total]
  scores.masked_fill_(mask.logical_not(), -std::numeric_limits<float>::infinity());
  const at::Tensor probs = at::softmax(scores, -1).to(v.scalar_type()).view({b, kv_heads, groups * t, total});
  const at::Tensor out = at::matmul(probs, v).view({b, heads, t, d});
  return out.transpose(1, 2).reshape({b, t, heads * d});
}

#endif

}  // namespace

int64_t attention_chunk_sequences(int64_t heads, int64_t queries, int64_t keys) {
  const uint64_t per_sequence = 3ull * heads * queries * keys * 4;
  return std::max<int64_t>(1, static_cast<int64_t>(kAttentionChunkBytes / std::max<uint64_t>(1, per_sequence)));
}

namespace {

// Bounded temporaries: a chunk of sequences at a time (kAttentionChunkBytes).
at::Tensor attend_in_chunks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const StepInputs& step) {
  const int64_t b = q.size(0);
  const int64_t chunk = attention_chunk_sequences(q.size(1), q.size(2), k.size(2));
  if (chunk >= b) return attend_all(q, k, v, step);
  std::vector<at::Tensor> parts;
  for (int64_t s = 0; s < b; s += chunk) {
    const int64_t n = std::min(chunk, b - s);
    StepInputs part;  // attention reads the padding, past length and mask only
    part.pad = step.pad.narrow(0, s, n);
    part.past_len = step.past_len;
    if (step.visibility.defined() && step.visibility.size(0) == b) part.visibility = step.visibility.narrow(0, s, n);
    parts.push_back(attend_all(q.narrow(0, s, n), k.narrow(0, s, n), v.narrow(0, s, n), part));
  }
  return at::cat(parts, 0);
}

// On the CPU a sequence's attention is the one it gets alone, bit for bit (README:
// a row's scores do not depend on the batch around it). Over left-padded keys the
// products' sums fall into other blocks and lanes with every padding length, so the
// sequences are attended in groups of equal padding, each over its own keys and
// queries only: the products, of the same shapes, that the sequence alone runs.
// Padding queries get zeros (finite; their outputs are never used).
at::Tensor attend_by_padding(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const StepInputs& step) {
  const int64_t b = q.size(0), heads = q.size(1), t = q.size(2), d = q.size(3), total = k.size(2);
  const at::Tensor pads = step.pad.to(at::kCPU, at::kLong).contiguous();
  TG_CHECK(pads.numel() == b, "internal: {} padding lengths for {} sequences", pads.numel(), b);
  std::map<int64_t, std::vector<int64_t>> sequences_of_pad;
  for (int64_t s = 0; s < b; ++s) sequences_of_pad[pads.data_ptr<int64_t>()[s]].push_back(s);
  if (sequences_of_pad.size() == 1 && sequences_of_pad.begin()->first == 0) return attend_in_chunks(q, k, v, step);
  at::Tensor out = at::zeros({b, t, heads * d}, q.options());
  for (const auto& [pad, sequences] : sequences_of_pad) {
    // Query i is at position past_len + i, padding below `pad`; keys from `pad` on.
    const int64_t first_query = std::max<int64_t>(0, pad - step.past_len);
    if (first_query >= t || pad >= total) continue;
    const at::Tensor index = at::tensor(sequences, at::TensorOptions().dtype(at::kLong)).to(q.device());
    StepInputs own;
    own.pad = at::zeros({static_cast<int64_t>(sequences.size())}, at::TensorOptions().dtype(at::kLong));
    own.past_len = std::max<int64_t>(0, step.past_len - pad);
    // Narrowed first: only the group's own queries and keys are copied.
    const at::Tensor part = attend_in_chunks(q.narrow(2, first_query, t - first_query).index_select(0, index),
                                             k.narrow(2, pad, total - pad).index_select(0, index),
                                             v.narrow(2, pad, total - pad).index_select(0, index), own);
    out.narrow(1, first_query, t - first_query).index_copy_(0, index, part);
  }
  return out;
}

}  // namespace

at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const StepInputs& step) {
  // On CUDA the kernels pick their blocking by shape anyway (README states it).
  return q.is_cpu() ? attend_by_padding(q, k, v, step) : attend_in_chunks(q, k, v, step);
}

}  // namespace tiergen::model
