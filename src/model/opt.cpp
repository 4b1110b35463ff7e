// OPT (facebook/opt-*): learned positions with offset 2, LayerNorm before (or, for
// OPT-350M, after) each block, ReLU MLP, biases, optional word_embed_proj_dim
// projections, tied LM head. Mirrors transformers' OPTDecoder.
#include "src/model/model_internal.h"
#include "tiergen/model/linear.h"

namespace tiergen::model::opt {

namespace {

constexpr int64_t kPositionOffset = 2;

at::Tensor layer_norm(const Spec& spec, const LayerWeights& w, const std::string& name, const at::Tensor& x) {
  return at::layer_norm(x, {x.size(-1)}, w.get(name + ".weight"), w.get_optional(name + ".bias"),
                        spec.norm_eps);
}

at::Tensor activation(const Spec& spec, const at::Tensor& x) {
  if (spec.activation == "relu") return at::relu(x);
  if (spec.activation == "gelu") return at::gelu(x);
  return at::silu(x);
}

at::Tensor split_heads(const at::Tensor& x, int64_t heads, int64_t head_dim) {
  return x.view({x.size(0), x.size(1), heads, head_dim}).transpose(1, 2);
}

}  // namespace

at::Tensor embed(const Spec& spec, const LayerWeights& w, const at::Tensor& ids, const StepInputs& step) {
  at::Tensor x = lookup_rows(w, "embed_tokens.weight", ids);
  if (spec.has_projection()) x = linear(x, w, "project_in");
  const at::Tensor positions = step.positions.to(ids.device()) + kPositionOffset;
  return x + lookup_rows(w, "embed_positions.weight", positions);
}

QkvProjection project_qkv(const Spec& spec, const LayerWeights& w, const at::Tensor& hidden,
                          const StepInputs&) {
  const at::Tensor x = spec.pre_layer_norm ? layer_norm(spec, w, "self_attn_layer_norm", hidden) : hidden;
  QkvProjection p;
  p.q = split_heads(linear(x, w, "self_attn.q_proj"), spec.num_heads, spec.head_dim);
  p.k = split_heads(linear(x, w, "self_attn.k_proj"), spec.num_kv_heads, spec.head_dim);
  p.v = split_heads(linear(x, w, "self_attn.v_proj"), spec.num_kv_heads, spec.head_dim);
  return p;
}

at::Tensor finish_layer(const Spec& spec, const LayerWeights& w, const at::Tensor& hidden,
                        const at::Tensor& attention) {
  at::Tensor h = hidden + linear(attention, w, "self_attn.out_proj");
  if (!spec.pre_layer_norm) h = layer_norm(spec, w, "self_attn_layer_norm", h);
  const at::Tensor x = spec.pre_layer_norm ? layer_norm(spec, w, "final_layer_norm", h) : h;
  h = h + linear(activation(spec, linear(x, w, "fc1")), w, "fc2");
  if (!spec.pre_layer_norm) h = layer_norm(spec, w, "final_layer_norm", h);
  return h;
}

at::Tensor head_hidden(const Spec& spec, const LayerWeights& w, const at::Tensor& last) {
  at::Tensor h = spec.pre_layer_norm ? layer_norm(spec, w, "final_layer_norm", last) : last;
  if (spec.has_projection()) h = linear(h, w, "project_out");
  return h;
}

}  // namespace tiergen::model::opt
