// LLaMA (LlamaForCausalLM): RMSNorm computed in float32, rotary embeddings with
// rope_theta and llama3 scaling, SwiGLU MLP, grouped-query attention, tied or untied
// head. Mirrors transformers' LlamaModel.
#include <cmath>

#include "src/model/model_internal.h"

namespace tiergen::model::llama {

namespace {

at::Tensor rms_norm(const Spec& spec, const LayerWeights& w, const std::string& name, const at::Tensor& x) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, true) + spec.norm_eps);
  return w.get(name + ".weight") * normed.to(x.scalar_type());
}

at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// cos/sin [b, 1, t, d] for the step's positions, computed in float32 as transformers does.
std::pair<at::Tensor, at::Tensor> rope_tables(const Spec& spec, const StepInputs& step, const at::Device& device,
                                              at::ScalarType dtype) {
  // Built where it is used: a host tensor here would cost a blocking copy per layer.
  const at::Tensor inv_freq = rope_inv_freq(spec, device);
  const at::Tensor pos = step.positions.to(device).to(at::kFloat);                // [b, t]
  const at::Tensor freqs = pos.unsqueeze(-1) * inv_freq.view({1, 1, -1});         // [b, t, d/2]
  const at::Tensor emb = at::cat({freqs, freqs}, -1).unsqueeze(1);                 // [b, 1, t, d]
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

at::Tensor split_heads(const at::Tensor& x, int64_t heads, int64_t head_dim) {
  return x.view({x.size(0), x.size(1), heads, head_dim}).transpose(1, 2);
}

}  // namespace

at::Tensor rope_inv_freq(const Spec& spec, const at::Device& device) {
  const int64_t d = spec.head_dim;
  at::Tensor inv_freq =
      1.0 / at::pow(spec.rope_theta, at::arange(0, d, 2, at::TensorOptions().dtype(at::kLong).device(device)).to(at::kFloat) / d);
  const RopeScaling& rs = spec.rope_scaling;
  if (rs.type != "llama3") return inv_freq;
  const double old_len = static_cast<double>(rs.original_max_position_embeddings);
  const double low_freq_wavelen = old_len / rs.low_freq_factor;
  const double high_freq_wavelen = old_len / rs.high_freq_factor;
  const at::Tensor wavelen = 2 * M_PI / inv_freq;
  at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / rs.factor, inv_freq);
  const at::Tensor smooth = (old_len / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
  const at::Tensor smoothed = (1 - smooth) * scaled / rs.factor + smooth * scaled;
  const at::Tensor medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return at::where(medium, smoothed, scaled);
}

at::Tensor embed(const Spec&, const LayerWeights& w, const at::Tensor& ids, const StepInputs&) {
  return lookup_rows(w.get("embed_tokens.weight"), ids);
}

QkvProjection project_qkv(const Spec& spec, const LayerWeights& w, const at::Tensor& hidden,
                          const StepInputs& step) {
  const at::Tensor x = rms_norm(spec, w, "input_layernorm", hidden);
  QkvProjection p;
  p.q = split_heads(linear(x, w, "self_attn.q_proj"), spec.num_heads, spec.head_dim);
  p.k = split_heads(linear(x, w, "self_attn.k_proj"), spec.num_kv_heads, spec.head_dim);
  p.v = split_heads(linear(x, w, "self_attn.v_proj"), spec.num_kv_heads, spec.head_dim);
  const auto [cos, sin] = rope_tables(spec, step, hidden.device(), hidden.scalar_type());
  p.q = p.q * cos + rotate_half(p.q) * sin;
  p.k = p.k * cos + rotate_half(p.k) * sin;
  return p;
}

at::Tensor finish_layer(const Spec& spec, const LayerWeights& w, const at::Tensor& hidden,
                        const at::Tensor& attention) {
  at::Tensor h = hidden + linear(attention, w, "self_attn.o_proj");
  const at::Tensor x = rms_norm(spec, w, "post_attention_layernorm", h);
  const at::Tensor gated = at::silu(linear(x, w, "mlp.gate_proj")) * linear(x, w, "mlp.up_proj");
  return h + linear(gated, w, "mlp.down_proj");
}

at::Tensor head_hidden(const Spec& spec, const LayerWeights& w, const at::Tensor& last) {
  return rms_norm(spec, w, "norm", last);
}

}  // namespace tiergen::model::llama
