#include "tiergen/model/forward.h"

#include "src/model/model_internal.h"
#include "tiergen/common/host_device_copy.h"
#include "tiergen/model/linear.h"

namespace tiergen::model {

namespace {

at::Tensor product(const at::Tensor& x, const LayerWeights& w, const std::string& weight, const at::Tensor& bias) {
  if (const QuantizedWeight* q = w.quantized(weight)) return quantized_linear_product(x, *q, bias);
  return linear_product(x, w.get(weight), bias);
}

}  // namespace

// The product runs where the weight lives: x (and the bias) go to the weight's device
// and the result comes back to x's. A weight the policy keeps on the host while the
// rest of the layer computes on a GPU (runtime::Policy::cpu_weight_compute_*) moves
// only activations, through page-locked staging (host_device_copy.h); on one device
// nothing moves.
at::Tensor linear(const at::Tensor& x, const LayerWeights& w, const std::string& name) {
  const std::string weight = name + ".weight";
  const at::Tensor bias = w.get_optional(name + ".bias");
  const QuantizedWeight* q = w.quantized(weight);
  const at::Device home = q ? q->packed.device() : w.get(weight).device();
  if (home == x.device()) return product(x, w, weight, bias);
  return copy_across(product(copy_across(x, home), w, weight, bias.defined() ? copy_across(bias, home) : bias),
                     x.device());
}

at::Tensor lookup_rows(const at::Tensor& table, const at::Tensor& ids) {
  if (table.device() == ids.device()) return at::embedding(table, ids);
  return copy_across(at::embedding(table, copy_across(ids, table.device())), ids.device());
}

at::Tensor lookup_rows(const LayerWeights& w, const std::string& name, const at::Tensor& ids) {
  const TableRows* read_rows = w.table_rows(name);
  if (!read_rows) return lookup_rows(w.get(name), ids);
  const at::Tensor host_ids = copy_across(ids, at::Device(at::kCPU)).to(at::kLong).contiguous().view(-1);
  const at::Tensor rows = (*read_rows)(host_ids);
  std::vector<int64_t> shape = ids.sizes().vec();
  shape.push_back(rows.size(1));
  return copy_across(rows.view(shape), ids.device());
}

at::Tensor embed(const Spec& spec, const LayerWeights& w, const at::Tensor& ids, const StepInputs& step) {
  return spec.family == Family::Opt ? opt::embed(spec, w, ids, step) : llama::embed(spec, w, ids, step);
}

void prepare_step(const Spec& spec, StepInputs& step, const at::Device& device, at::ScalarType dtype) {
  if (spec.family == Family::Llama) llama::prepare_step(spec, step, device, dtype);
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
