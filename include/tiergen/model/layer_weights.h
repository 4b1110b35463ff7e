#pragma once
// The tensors of one FlexGen layer (embedding, decoder layer i, or head) on the
// compute device, looked up by the checkpoint name's suffix ("self_attn.q_proj.weight").
#include <ATen/ATen.h>

#include <string>
#include <unordered_map>

namespace tiergen::model {

class LayerWeights {
 public:
  LayerWeights() = default;
  explicit LayerWeights(std::string prefix) : prefix_(std::move(prefix)) {}

  // `name` is the full checkpoint name; it is stored under its suffix after the prefix.
  void set(const std::string& name, at::Tensor tensor);
  const at::Tensor& get(const std::string& suffix) const;
  // An undefined tensor when absent (optional biases).
  at::Tensor get_optional(const std::string& suffix) const;
  bool empty() const { return tensors_.empty(); }
  void clear() { tensors_.clear(); }

 private:
  std::string prefix_;
  std::unordered_map<std::string, at::Tensor> tensors_;
};

// Checkpoint-name prefix of a FlexGen layer's tensors: "model.decoder.layers.3." etc.
std::string layer_prefix(const struct Spec& spec, int64_t weight_layer_index);

}  // namespace tiergen::model
