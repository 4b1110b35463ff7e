#pragma once
// The tensors of one FlexGen layer (embedding, decoder layer i, or head) on the
// compute device, looked up by the checkpoint name's suffix ("self_attn.q_proj.weight").
#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

namespace tiergen::model {

// A weight W [rows = out, cols = in] kept group-wise quantized (groups of `group_size`
// along `in`, kernels/cpu/quantize.h's layout) for a product that reads it in place
// (quantized_linear_product): packed levels (uint8), and fp16 mins and scales (int16
// storage), all on the host.
struct QuantizedWeight {
  at::Tensor packed, mins, scales;
  int64_t rows = 0, cols = 0;
  int bits = 4, group_size = 64;
  // The dense copy a product that does not read the weight in place needs (prefill, or
  // many rows under --cpu-gemm: model::quantized_product_in_place), made by the second
  // such product of this layer load and shared by the later ones (the block's other gpu
  // batches and prompt-length groups); the first multiplies dequantized tiles instead
  // (quantized_linear_product), which a load read by one product never copies whole.
  // Only the compute thread uses these.
  std::shared_ptr<at::Tensor> dense = std::make_shared<at::Tensor>();
  std::shared_ptr<int64_t> dense_products = std::make_shared<int64_t>(0);  // so far, this load
};

// Rows of a lookup table that is read where it lives, row by row, instead of held whole
// (a table kept on disk, of which a decode step needs one row per sequence): given ids
// on the host (int64, flat), their rows as a host tensor [ids, width] in the table's dtype.
using TableRows = std::function<at::Tensor(const at::Tensor& host_ids)>;

class LayerWeights {
 public:
  LayerWeights() = default;
  explicit LayerWeights(std::string prefix) : prefix_(std::move(prefix)) {}

  // `name` is the full checkpoint name; it is stored under its suffix after the prefix.
  void set(const std::string& name, at::Tensor tensor);
  // A quantized entry has no dense tensor: get() refuses it (see quantized()).
  const at::Tensor& get(const std::string& suffix) const;
  // An undefined tensor when absent (optional biases).
  at::Tensor get_optional(const std::string& suffix) const;
  void set_quantized(const std::string& name, QuantizedWeight weight);
  // The quantized form of a weight, or nullptr when it is held dense.
  const QuantizedWeight* quantized(const std::string& suffix) const;
  // A table entry read by rows has no tensor either: get() refuses it (see table_rows()).
  void set_table_rows(const std::string& name, TableRows rows);
  // The table's row reader, or nullptr when it is held whole.
  const TableRows* table_rows(const std::string& suffix) const;
  bool empty() const { return tensors_.empty() && quantized_.empty() && table_rows_.empty(); }
  void clear() {
    tensors_.clear();
    quantized_.clear();
    table_rows_.clear();
  }

 private:
  std::string key_of(const std::string& name) const;

  std::string prefix_;
  std::unordered_map<std::string, at::Tensor> tensors_;
  std::unordered_map<std::string, QuantizedWeight> quantized_;
  std::unordered_map<std::string, TableRows> table_rows_;
};

// Checkpoint-name prefix of a FlexGen layer's tensors: "model.decoder.layers.3." etc.
std::string layer_prefix(const struct Spec& spec, int64_t weight_layer_index);

}  // namespace tiergen::model
