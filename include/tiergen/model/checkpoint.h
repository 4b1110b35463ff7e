#pragma once
// A model directory's weights: model.safetensors, or shards listed by
// model.safetensors.index.json ("weight_map": tensor name -> shard file). Every file is
// memory-mapped once and validated on open (see safetensors.h); validate_against then
// checks the checkpoint against what a model::Spec needs before any work starts.
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tiergen/model/safetensors.h"
#include "tiergen/model/spec.h"

namespace tiergen::model {

class Checkpoint {
 public:
  // `path` is a model directory, or a single .safetensors file. In a directory the index
  // wins over model.safetensors when both exist (as in Hugging Face loaders).
  static std::unique_ptr<Checkpoint> open(const std::string& path);

  const std::string& path() const { return path_; }
  // The files opened, in index order (shard 1 first).
  std::vector<std::string> files() const;

  // The tensor named `name`; if absent and `name` starts with "model.", the name without
  // that prefix (some OPT checkpoints store "decoder.layers..."). nullptr when neither
  // exists or the tensor's dtype is unsupported.
  const TensorInfo* find(const std::string& name) const;
  // As find(), but throws naming the tensor and the checkpoint (and the dtype, when the
  // tensor exists with an unsupported one).
  const TensorInfo& at(const std::string& name) const;
  // Every tensor name in the checkpoint, unsupported dtypes included, sorted.
  std::vector<std::string> names() const;

  // Throws when a tensor the spec reads (TensorSpec::source_name) is missing, has an
  // unsupported dtype or another shape, or when the checkpoint holds tensors the spec
  // does not know (except harmless extras: rotary inv_freq buffers, an lm_head.weight
  // stored despite tied embeddings). The message lists the problems, each naming the
  // tensor and its file.
  void validate_against(const Spec& spec) const;

 private:
  Checkpoint() = default;
  // Resolves the "model." fallback; "" when the tensor is not in the checkpoint at all.
  std::string resolve(const std::string& name) const;

  struct Entry {
    const SafetensorsFile* file;
    const TensorInfo* tensor;             // null when the dtype is unsupported
    const UnsupportedTensor* unsupported;  // null when supported
  };
  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string, Entry> tensors_;
};

}  // namespace tiergen::model
