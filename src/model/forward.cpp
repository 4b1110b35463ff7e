#include "tiergen/model/forward.h"

#include "src/model/model_internal.h"
#include "tiergen/model/linear.h"

namespace tiergen::model {

at::Tensor linear(const at::Tensor& x, const LayerWeights& w, const std::string& name) {
  const at::Tensor bias = w.get_optional(name + ".bias");
  if (const QuantizedWeight* q = w.quantized(name + ".weight")) return quantized_linear_product(x, *q, bias);
  return linear_product(x, w.get(name + ".weight"), bias);
}

at::Tensor embed(const Spec& spec, const LayerWeights& w, const at::Tensor& ids, const StepInputs& step) {
  return spec.family == Family::Opt ? opt::embed(spec, w, ids, step) : llama::embed(spec, w, ids, step);
}

QkvProjection project_qkv(const Spec& spec, const LayerWeights& w, const at::Tensor& hidden,
                          const StepInputs& step) {
  return spec.family == Family::Opt ? opt::project_qkv(spec, w, hidden, step)
                                    : llama::project_qkv(spec, w, hidden, step);
}

at::Tensor finish_layer(const Spec& spec, const LayerWeights& w, const at::Tensor& hidden,
                        const at::Tensor& attention) {
  return spec.family == Family::Opt ? opt::finish_layer(spec, w, hidden, attention)
                                    : llama::finish_layer(spec, w, hidden, attention);
}

at::Tensor position_logits(const Spec& spec, const LayerWeights& w, const at::Tensor& hidden) {
  const at::Tensor h = spec.family == Family::Opt ? opt::head_hidden(spec, w, hidden) : llama::head_hidden(spec, w, hidden);
  return linear(h, w, "lm_head").to(at::kFloat);
}

at::Tensor head_logits(const Spec& spec, const LayerWeights& w, const at::Tensor& hidden) {
  return position_logits(spec, w, hidden.select(1, hidden.size(1) - 1));
}

}  // namespace tiergen::model
