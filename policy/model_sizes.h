#pragma once
// ModelSizes: the byte and FLOP sizes the cost and memory models need, taken from
// model::Spec (grouped-query KV, three MLP matrices for LLaMA, untied heads) and from
// the runtime's own per-tensor byte accounting, never from OPT's 8h²+4h·h₂ alone.
#include <cstdint>

#include "policy/product_row_lengths.h"
#include "tiergen/model/spec.h"
#include "tiergen/runtime/placement.h"
#include "tiergen/runtime/policy.h"

namespace tiergen::policy {

class ModelSizes {
 public:
  // `groups`: blocks resident at once, each with its own KV cache and activations (a
  // pipeline stage holds one per stage; a single process one).
  ModelSizes(const model::Spec& spec, int dtype_bytes, int64_t groups = 1);

  const model::Spec& spec() const { return spec_; }
  int dtype_bytes() const { return dtype_bytes_; }
  int64_t num_layers() const { return spec_.num_layers; }
  int64_t groups() const { return groups_; }
  // What the runtime's exact accounting (runtime::plan_memory) is told about groups.
  runtime::StageShape stage_shape() const { return runtime::StageShape{runtime::StageLayers{}, groups_}; }

  // Bytes one decoder layer's weights occupy at home / dense on the compute device.
  double layer_weight_bytes(const runtime::CompressionConfig& compress) const;
  double layer_weight_dense_bytes() const { return layer_dense_; }
  // All weights of the model (embedding, decoder layers, head) at home, a tied head's
  // uncompressed matrix counted once with the token table it is (but where the model
  // stands for a pipeline's stage: runtime::place_stage_weights).
  double total_weight_bytes(const runtime::CompressionConfig& compress) const;
  // Largest FlexGen layer at home, and the dense bytes of its compressed tensors:
  // what the runtime double-buffers on the gpu while streaming weights.
  double max_layer_weight_bytes(const runtime::CompressionConfig& compress) const;
  double max_layer_compressed_dense_bytes(const runtime::CompressionConfig& compress) const;
  // The embedding and head layers together (the model's "edges", stepped through like
  // decoder layers every token): bytes at home, and dense bytes of their compressed
  // tensors.
  double edge_weight_bytes(const runtime::CompressionConfig& compress) const;
  double edge_compressed_dense_bytes(const runtime::CompressionConfig& compress) const;
  // The embedding's tables (never compressed), which decode looks up where they live.
  double embedding_table_bytes() const { return embedding_tables_; }
  // The head's layer alone: bytes at home, and dense bytes of its compressed tensors.
  double head_weight_bytes(const runtime::CompressionConfig& compress) const { return stored(head_, compress); }
  double head_compressed_dense_bytes(const runtime::CompressionConfig& compress) const {
    return compressed_dense(head_, compress);
  }
  // The head's product for one token: FLOPs, and the dense bytes of its matrix.
  double head_flops_per_token() const { return head_flops_; }
  double head_dense_bytes() const { return head_flops_ / 2.0 * dtype_bytes_; }
  // What one position's embedding looked up on the CPU sends to the device: a row of
  // each of its tables (OPT: tokens and positions; a projection's input width too).
  double embedding_output_bytes_per_token() const { return embedding_row_elements_ * dtype_bytes_; }
  // One position's logits: what a head multiplied on the CPU sends back to the device.
  double logits_bytes_per_token() const { return double(vocab_size_) * dtype_bytes_; }
  // Dense bytes of the decoder layer's tensors that are stored compressed.
  double layer_compressed_dense_bytes(const runtime::CompressionConfig& compress) const;

  // Matmul FLOPs of one decoder layer for one token (2 per weight of every matrix).
  double linear_flops_per_token() const { return linear_flops_; }
  // Bytes of one token's inputs and outputs of all the decoder layer's matmuls: what
  // crosses the link when the matrices are multiplied on the host.
  double linear_input_bytes_per_token() const { return linear_inputs_ * dtype_bytes_; }
  double linear_output_bytes_per_token() const { return linear_outputs_ * dtype_bytes_; }
  // The decoder layer's matrices, and the head layer's (the vocabulary projection, and
  // OPT's project_out where the model has one): one product call each (HardwareProfile::
  // cpu_product_seconds prices the calls beside the bytes).
  double linear_products() const { return linear_products_; }
  double head_products() const { return head_products_; }
  // The row lengths of the decoder layer's and the head layer's products, by bytes
  // (product_row_lengths.h).
  const ProductRowLengths& layer_row_lengths() const { return layer_row_lengths_; }
  const ProductRowLengths& head_row_lengths() const { return head_row_lengths_; }
  // Attention FLOPs for one query token against `context` keys (QKᵀ and PV).
  double attention_flops(double context) const { return 4.0 * query_dim_ * context; }
  // KV cache bytes of one token in one layer, dense and as stored.
  double kv_bytes_per_token() const { return 2.0 * kv_dim_ * dtype_bytes_; }
  double kv_stored_bytes_per_token(const runtime::CompressionConfig& compress) const;
  // Hidden state bytes of one token (the activations FlexGen moves between layers).
  double hidden_bytes_per_token() const { return double(hidden_row_) * dtype_bytes_; }
  // q, k, v of one token (what CPU attention receives from the gpu).
  double qkv_bytes_per_token() const { return double(query_dim_ + 2 * kv_dim_) * dtype_bytes_; }
  const model::WeightLayer& decoder_layer() const { return decoder_; }
  int64_t num_heads() const { return spec_.num_heads; }
  int64_t num_kv_heads() const { return spec_.num_kv_heads; }
  int64_t head_dim() const { return spec_.head_dim; }

 private:
  double stored(const model::WeightLayer& layer, const runtime::CompressionConfig& compress) const;
  double compressed_dense(const model::WeightLayer& layer, const runtime::CompressionConfig& compress) const;

  model::Spec spec_;
  int dtype_bytes_;
  int64_t groups_ = 1;
  model::WeightLayer embedding_, decoder_, head_;
  double layer_dense_ = 0;
  double linear_flops_ = 0;
  double head_flops_ = 0;
  double linear_inputs_ = 0, linear_outputs_ = 0, linear_products_ = 0, head_products_ = 0;
  int64_t query_dim_ = 0, kv_dim_ = 0, hidden_row_ = 0, vocab_size_ = 0;
  double embedding_row_elements_ = 0;
  double embedding_tables_ = 0;
  ProductRowLengths layer_row_lengths_, head_row_lengths_;
};

}  // namespace tiergen::policy
