#include "policy/model_sizes.h"

#include <algorithm>

#include "tiergen/common/error.h"
#include "tiergen/runtime/placement.h"

namespace tiergen::policy {

namespace {

// The layer's matrices grouped by their row length (input features), by element count.
ProductRowLengths row_lengths_of(const model::WeightLayer& layer) {
  ProductRowLengths lengths;
  double elements = 0;
  for (const auto& t : layer.tensors) {
    if (t.shape.size() != 2) continue;
    elements += double(t.numel());
    auto at = std::find_if(lengths.begin(), lengths.end(), [&](const auto& l) { return l.row_length == t.shape[1]; });
    if (at == lengths.end()) at = lengths.insert(lengths.end(), RowLengthShare{t.shape[1], 0.0});
    at->bytes_fraction += double(t.numel());
  }
  for (auto& l : lengths) l.bytes_fraction /= elements;
  return lengths;
}

}  // namespace

ModelSizes::ModelSizes(const model::Spec& spec, int dtype_bytes, int64_t groups)
    : spec_(spec), dtype_bytes_(dtype_bytes), groups_(groups) {
  TG_CHECK(dtype_bytes == 2 || dtype_bytes == 4, "dtype size must be 2 or 4 bytes, got {}", dtype_bytes);
  TG_CHECK(groups >= 1, "internal: {} groups of blocks", groups);
  auto layers = spec.weight_layers();
  TG_CHECK(layers.size() >= 3, "{}: a model needs an embedding, decoder layers and a head", spec.name);
  embedding_ = layers.front();
  decoder_ = layers.at(1);
  head_ = layers.back();
  layer_dense_ = double(decoder_.numel()) * dtype_bytes;
  for (const auto& t : decoder_.tensors) {
    if (t.shape.size() != 2) continue;
    linear_flops_ += 2.0 * double(t.numel());
    linear_outputs_ += double(t.shape[0]);
    linear_inputs_ += double(t.shape[1]);
    linear_products_ += 1;
  }
  for (const auto& t : head_.tensors) {
    if (t.shape.size() == 2) head_products_ += 1;
  }
  layer_row_lengths_ = row_lengths_of(decoder_);
  // The head's matrix: the vocabulary projection from the (projected) hidden state.
  const int64_t head_input = spec.word_embed_proj_dim > 0 ? spec.word_embed_proj_dim : spec.hidden_size;
  head_flops_ = 2.0 * double(spec.vocab_size) * double(head_input);
  // What head_dense_bytes counts: the vocabulary projection, rows of its input.
  head_row_lengths_ = {RowLengthShare{head_input, 1.0}};
  query_dim_ = spec.num_heads * spec.head_dim;
  kv_dim_ = spec.kv_dim();
  hidden_row_ = std::max(spec.hidden_size, spec.word_embed_proj_dim);
  vocab_size_ = spec.vocab_size;
  for (const auto& t : embedding_.tensors) {
    if (t.shape.size() == 2) embedding_row_elements_ += double(t.shape[1]);
    if (embedding_.is_lookup_table(t)) embedding_tables_ += double(t.numel()) * dtype_bytes;
  }
}

double ModelSizes::stored(const model::WeightLayer& layer, const runtime::CompressionConfig& compress) const {
  double bytes = 0;
  for (const auto& t : layer.tensors) bytes += double(runtime::weight_stored_bytes(layer, t, dtype_bytes_, compress));
  return bytes;
}

double ModelSizes::compressed_dense(const model::WeightLayer& layer,
                                    const runtime::CompressionConfig& compress) const {
  double bytes = 0;
  for (const auto& t : layer.tensors) {
    if (runtime::weight_is_compressed(layer, t, compress)) bytes += double(t.numel()) * dtype_bytes_;
  }
  return bytes;
}

double ModelSizes::layer_weight_bytes(const runtime::CompressionConfig& compress) const {
  return stored(decoder_, compress);
}

double ModelSizes::total_weight_bytes(const runtime::CompressionConfig& compress) const {
  // A tied head's uncompressed matrix is the token table's home (runtime::place_stage_weights),
  // except in a model standing for a pipeline's stage (groups > 1).
  double shared = 0;
  for (const auto& t : head_.tensors) {
    if (groups_ == 1 && runtime::weight_is_tied_table(head_, t, compress)) shared += double(t.numel()) * dtype_bytes_;
  }
  return stored(embedding_, compress) + double(spec_.num_layers) * stored(decoder_, compress) +
         stored(head_, compress) - shared;
}

double ModelSizes::edge_weight_bytes(const runtime::CompressionConfig& compress) const {
  return stored(embedding_, compress) + stored(head_, compress);
}

double ModelSizes::edge_compressed_dense_bytes(const runtime::CompressionConfig& compress) const {
  return compressed_dense(embedding_, compress) + compressed_dense(head_, compress);
}

double ModelSizes::max_layer_weight_bytes(const runtime::CompressionConfig& compress) const {
  return std::max({stored(embedding_, compress), stored(decoder_, compress), stored(head_, compress)});
}

double ModelSizes::max_layer_compressed_dense_bytes(const runtime::CompressionConfig& compress) const {
  return std::max(compressed_dense(decoder_, compress), compressed_dense(head_, compress));
}

double ModelSizes::layer_compressed_dense_bytes(const runtime::CompressionConfig& compress) const {
  return compressed_dense(decoder_, compress);
}

double ModelSizes::kv_stored_bytes_per_token(const runtime::CompressionConfig& compress) const {
  if (!compress.enabled) return kv_bytes_per_token();
  // The runtime stores each (sequence, kv head) unit as [positions, head_dim] groups.
  const double per_position = double(runtime::quantized_bytes(1, spec_.head_dim, compress));
  return 2.0 * double(spec_.num_kv_heads) * per_position;
}

}  // namespace tiergen::policy
