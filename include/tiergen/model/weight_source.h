#pragma once
// Where weights come from: a Hugging Face safetensors checkpoint (memory-mapped), or
// deterministic dummy values for throughput benchmarks on presets without a checkpoint.
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>

#include "tiergen/model/spec.h"

namespace tiergen::model {

struct TensorInfo;

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // A new host tensor holding `tensor` (its source_name) converted to `dtype`.
  virtual at::Tensor read(const TensorSpec& tensor, at::ScalarType dtype) const = 0;
  // The same values written into `out` (a host tensor of `tensor`'s shape, in the dtype
  // they are converted to): for homes allocated by their owner (huge_pages.h). By
  // default through read(); a checkpoint converts straight into `out`.
  virtual void read_into(const TensorSpec& tensor, const at::Tensor& out) const;
  // The checkpoint bytes of a tensor, for reading it straight from its file at its
  // offset; null for dummy weights.
  virtual const TensorInfo* file_tensor(const TensorSpec& tensor) const { return nullptr; }
  virtual std::string describe() const = 0;
};

// Opens `model_dir`'s safetensors (single or sharded) and validates it against `spec`.
std::unique_ptr<WeightSource> open_checkpoint_weights(const std::string& model_dir, const Spec& spec);

// Seeded uniform values scaled by 1/sqrt(fan-in) (norm weights 1, biases and
// position embeddings small) so activations stay finite in fp16 over many layers.
std::unique_ptr<WeightSource> make_dummy_weights(uint64_t seed);

}  // namespace tiergen::model
