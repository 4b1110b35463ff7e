#include "tiergen/model/layer_weights.h"

#include "tiergen/common/error.h"
#include "tiergen/model/spec.h"

namespace tiergen::model {

std::string LayerWeights::key_of(const std::string& name) const {
  return name.rfind(prefix_, 0) == 0 ? name.substr(prefix_.size()) : name;
}

void LayerWeights::set(const std::string& name, at::Tensor tensor) { tensors_[key_of(name)] = std::move(tensor); }

void LayerWeights::set_quantized(const std::string& name, QuantizedWeight weight) {
  quantized_[key_of(name)] = std::move(weight);
}

const at::Tensor& LayerWeights::get(const std::string& suffix) const {
  auto it = tensors_.find(suffix);
  TG_CHECK(it != tensors_.end() || !quantized(suffix),
           "internal: weight '{}{}' is held quantized; only a linear product can use it", prefix_, suffix);
  TG_CHECK(it != tensors_.end() || !table_rows(suffix),
           "internal: table '{}{}' is read by rows; only a lookup can use it", prefix_, suffix);
  TG_CHECK(it != tensors_.end(), "weights of layer '{}' have no tensor '{}'", prefix_, suffix);
  return it->second;
}

at::Tensor LayerWeights::get_optional(const std::string& suffix) const {
  auto it = tensors_.find(suffix);
  return it == tensors_.end() ? at::Tensor() : it->second;
}

const QuantizedWeight* LayerWeights::quantized(const std::string& suffix) const {
  auto it = quantized_.find(suffix);
  return it == quantized_.end() ? nullptr : &it->second;
}

void LayerWeights::set_table_rows(const std::string& name, TableRows rows) {
  table_rows_[key_of(name)] = std::move(rows);
}

const TableRows* LayerWeights::table_rows(const std::string& suffix) const {
  auto it = table_rows_.find(suffix);
  return it == table_rows_.end() ? nullptr : &it->second;
}

std::string layer_prefix(const Spec& spec, int64_t index) {
  const bool opt = spec.family == Family::Opt;
  if (index == 0 || index == spec.num_layers + 1) return opt ? "model.decoder." : "model.";
  return (opt ? "model.decoder.layers." : "model.layers.") + std::to_string(index - 1) + ".";
}

}  // namespace tiergen::model
