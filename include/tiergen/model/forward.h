#pragma once
// Device-agnostic layer math for OPT and LLaMA through LibTorch ops. The runtime
// drives these per (layer, gpu batch); attention over the KV cache is split out so it
// can run on the compute device or, for a CPU-resident cache, on the CPU.
#include <ATen/ATen.h>

#include "tiergen/model/layer_weights.h"
#include "tiergen/model/spec.h"

namespace tiergen::model {

// LLaMA's rotary tables for a step's positions: cos, sin [b, 1, t, head_dim].
struct RopeTables {
  at::Tensor cos, sin;
};

// Per-step batch geometry shared by every layer of one gpu batch.
struct StepInputs {
  at::Tensor positions;  // [b, t] int64 position of each new token (0-based, padding excluded)
  at::Tensor pad;        // [b] int64 left-padding length of each sequence
  int64_t past_len = 0;  // tokens (padding included) already in the KV cache
  // Built once by prepare_step() for every layer of the step to share; undefined: each
  // layer builds its own.
  RopeTables rope;
  // visibility_mask() of this step's pad and past_len over its t new tokens and
  // past_len + t keys, built once by a caller for every layer of a step; attention uses
  // it where it attends over exactly those rows and keys on its device (undefined, or
  // of another shape: it builds its own). Whoever changes pad or past_len drops it.
  at::Tensor visibility;
};

// [b, 1, t, total] bool on `device`: key j is visible to new token i of sequence s
// (at position step.past_len + i) when j is not left padding (j >= step.pad[s]) and
// not in its future; every token sees itself, so no row is fully masked.
at::Tensor visibility_mask(const StepInputs& step, int64_t t, int64_t total, const at::Device& device);

// Fills what every layer of a step shares (LLaMA's rotary tables for `positions`, on
// `device` in `dtype`); a no-op for OPT.
void prepare_step(const Spec& spec, StepInputs& step, const at::Device& device, at::ScalarType dtype);

// q: [b, heads, t, d]; k, v: [b, kv_heads, t, d] for the new tokens (RoPE applied).
struct QkvProjection {
  at::Tensor q, k, v;
};

// Input embedding (and OPT's learned positions / project_in): [b, t] ids -> [b, t, h].
at::Tensor embed(const Spec& spec, const LayerWeights& w, const at::Tensor& ids, const StepInputs& step);

// First half of a decoder layer: norm (pre-LN) and projections.
QkvProjection project_qkv(const Spec& spec, const LayerWeights& w, const at::Tensor& hidden,
                          const StepInputs& step);

// Second half: output projection, residual, MLP. `attention` is [b, t, heads*d].
at::Tensor finish_layer(const Spec& spec, const LayerWeights& w, const at::Tensor& hidden,
                        const at::Tensor& attention);

// Final norm, projection and LM head for the last position of each sequence:
// [b, t, h] -> [b, vocab] float32 logits.
at::Tensor head_logits(const Spec& spec, const LayerWeights& w, const at::Tensor& hidden);
// The same for any set of positions: [p, h] last-layer hidden states -> [p, vocab]
// float32 logits (scoring every position of a prompt).
at::Tensor position_logits(const Spec& spec, const LayerWeights& w, const at::Tensor& hidden);

// Attention runs over at most this many bytes of fp32 scores at a time: a large
// prefill batch is processed in chunks of sequences (attend) so the temporaries stay
// bounded whatever the gpu batch size (the runtime's memory plan counts one chunk).
constexpr uint64_t kAttentionChunkBytes = 256ull << 20;
// Sequences per attention chunk for `heads` query heads, `queries` x `keys` scores.
int64_t attention_chunk_sequences(int64_t heads, int64_t queries, int64_t keys);

// Attention of the new queries over keys/values [b, kv_heads, total, d] whose first
// `step.past_len` positions come from the cache; causal, with left padding masked.
// Returns [b, t, heads*d] in q's dtype.
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const StepInputs& step);

}  // namespace tiergen::model
