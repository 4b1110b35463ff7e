// LLaMA (LlamaForCausalLM): RMSNorm computed in float32, rotary embeddings with
// rope_theta and llama3 scaling, SwiGLU MLP, grouped-query attention, tied or untied
// head. Mirrors transformers' LlamaModel.
#include <cmath>
#include <optional>

#include <ATen/Parallel.h>

#include "kernels/cpu/rms_norm.h"
#include "kernels/cpu/rotary.h"
#include "kernels/cpu/silu_gate.h"
#include "src/model/model_internal.h"
#include "tiergen/common/kernel_elem_type.h"

namespace tiergen::model::llama {

namespace {

at::Tensor split_heads(const at::Tensor& x, int64_t heads, int64_t head_dim) {
  return x.view({x.size(0), x.size(1), heads, head_dim}).transpose(1, 2);
}

// The element type of a host tensor the fused CPU kernels take in place, if any (on a
// GPU, or in another dtype, the LibTorch operators run instead).
std::optional<kernels::ElemType> fused_cpu_type(const at::Tensor& x) {
  if (!x.device().is_cpu() || !x.is_contiguous()) return std::nullopt;
  return kernel_elem_type_of(x.scalar_type());
}

bool fused_alongside(const at::Tensor& x, const at::Tensor& other) {
  return other.device().is_cpu() && other.is_contiguous() && other.scalar_type() == x.scalar_type();
}

// silu(gate) * up: on the CPU one kernel whose every element is computed alike, so a
// row's activations do not depend on the rows beside it (kernels/cpu/silu_gate.h).
at::Tensor silu_gate(const at::Tensor& gate, const at::Tensor& up) {
  if (const auto type = fused_cpu_type(gate); type && fused_alongside(gate, up) && up.sizes() == gate.sizes()) {
    at::Tensor y = at::empty_like(gate);
    kernels::SiluGateArgs a;
    a.gate = gate.data_ptr();
    a.up = up.data_ptr();
    a.y = y.data_ptr();
    a.type = *type;
    a.count = gate.numel();
    a.num_threads = at::get_num_threads();
    kernels::silu_gate(a);
    return y;
  }
  return at::silu(gate) * up;
}

at::Tensor rms_norm(const Spec& spec, const LayerWeights& w, const std::string& name, const at::Tensor& input) {
  const at::Tensor& weight = w.get(name + ".weight");
  // A host view (the head's last positions of a prefill) is copied for the kernel: the
  // LibTorch operators' mean sums a row in another order with every row count.
  const at::Tensor x = input.device().is_cpu() ? input.contiguous() : input;
  if (const auto type = fused_cpu_type(x); type && fused_alongside(x, weight)) {
    at::Tensor y = at::empty_like(x);
    kernels::RmsNormArgs a;
    a.x = x.data_ptr();
    a.weight = weight.data_ptr();
    a.y = y.data_ptr();
    a.type = *type;
    a.cols = x.size(-1);
    a.rows = x.numel() / a.cols;
    a.eps = static_cast<float>(spec.norm_eps);
    a.num_threads = at::get_num_threads();
    kernels::rms_norm(a);
    return y;
  }
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, true) + spec.norm_eps);
  return weight * normed.to(x.scalar_type());
}

at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// cos and sin of every element of fp32 `angles`, each with std::cos and std::sin. Not
// at::cos/at::sin: LibTorch computes a tensor's last partial vector with the scalar
// function and the rest with vector ones whose last bits differ, so a position's table
// would depend on where the tensor ended: on the batch around the sequence.
RopeTables cos_sin_per_element(const at::Tensor& angles, at::ScalarType dtype) {
  at::Tensor cos = at::empty_like(angles), sin = at::empty_like(angles);
  const float* a = angles.data_ptr<float>();
  float* c = cos.data_ptr<float>();
  float* s = sin.data_ptr<float>();
  at::parallel_for(0, angles.numel(), 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      c[i] = std::cos(a[i]);
      s[i] = std::sin(a[i]);
    }
  });
  return {cos.to(dtype), sin.to(dtype)};
}

// cos/sin [b, 1, t, d] for the step's positions, computed in float32 as transformers does.
RopeTables rope_tables(const Spec& spec, const at::Tensor& positions, const at::Device& device, at::ScalarType dtype) {
  // Built where they are used: a host tensor here would cost a blocking copy per layer.
  const at::Tensor inv_freq = rope_inv_freq(spec, device);
  const at::Tensor pos = positions.to(device).to(at::kFloat);                     // [b, t]
  const at::Tensor freqs = pos.unsqueeze(-1) * inv_freq.view({1, 1, -1});         // [b, t, d/2]
  const at::Tensor emb = at::cat({freqs, freqs}, -1).unsqueeze(1);                 // [b, 1, t, d]
  if (emb.is_cpu()) return cos_sin_per_element(emb.contiguous(), dtype);
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

// The step's tables when prepare_step() built them for this device and dtype.
RopeTables step_rope_tables(const Spec& spec, const StepInputs& step, const at::Tensor& hidden) {
  const RopeTables& built = step.rope;
  if (built.cos.defined() && built.cos.device() == hidden.device() && built.cos.scalar_type() == hidden.scalar_type()) {
    return built;
  }
  return rope_tables(spec, step.positions, hidden.device(), hidden.scalar_type());
}

// Projections [b, t, heads * d] -> [b, heads, t, d] with RoPE applied: in place by the
// CPU kernel where it can (the projection is this function's own temporary).
at::Tensor rotated_heads(at::Tensor x, const RopeTables& rope, int64_t heads, int64_t head_dim) {
  if (const auto type = fused_cpu_type(x); type && fused_alongside(x, rope.cos) && fused_alongside(x, rope.sin)) {
    kernels::RotaryArgs a;
    a.x = x.data_ptr();
    a.cos = rope.cos.data_ptr();
    a.sin = rope.sin.data_ptr();
    a.type = *type;
    a.rows = x.size(0) * x.size(1);
    a.heads = heads;
    a.head_dim = head_dim;
    a.num_threads = at::get_num_threads();
    kernels::apply_rotary(a);
    return split_heads(x, heads, head_dim);
  }
  const at::Tensor h = split_heads(x, heads, head_dim);
  return h * rope.cos + rotate_half(h) * rope.sin;
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

void prepare_step(const Spec& spec, StepInputs& step, const at::Device& device, at::ScalarType dtype) {
  step.rope = rope_tables(spec, step.positions, device, dtype);
}

at::Tensor embed(const Spec&, const LayerWeights& w, const at::Tensor& ids, const StepInputs&) {
  return lookup_rows(w, "embed_tokens.weight", ids);
}

QkvProjection project_qkv(const Spec& spec, const LayerWeights& w, const at::Tensor& hidden,
                          const StepInputs& step) {
  const at::Tensor x = rms_norm(spec, w, "input_layernorm", hidden);
  QkvProjection p;
  const RopeTables rope = step_rope_tables(spec, step, hidden);
  p.q = rotated_heads(linear(x, w, "self_attn.q_proj"), rope, spec.num_heads, spec.head_dim);
  p.k = rotated_heads(linear(x, w, "self_attn.k_proj"), rope, spec.num_kv_heads, spec.head_dim);
  p.v = split_heads(linear(x, w, "self_attn.v_proj"), spec.num_kv_heads, spec.head_dim);
  return p;
}

at::Tensor finish_layer(const Spec& spec, const LayerWeights& w, const at::Tensor& hidden,
                        const at::Tensor& attention) {
  at::Tensor h = hidden + linear(attention, w, "self_attn.o_proj");
  const at::Tensor x = rms_norm(spec, w, "post_attention_layernorm", h);
  const at::Tensor gated = silu_gate(linear(x, w, "mlp.gate_proj"), linear(x, w, "mlp.up_proj"));
  return h + linear(gated, w, "mlp.down_proj");
}

at::Tensor head_hidden(const Spec& spec, const LayerWeights& w, const at::Tensor& last) {
  return rms_norm(spec, w, "norm", last);
}

}  // namespace tiergen::model::llama
