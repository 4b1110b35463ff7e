// WeightSource over a memory-mapped safetensors checkpoint.
#include "tiergen/common/error.h"
#include "tiergen/model/checkpoint.h"
#include "tiergen/model/weight_source.h"

namespace tiergen::model {

namespace {

at::ScalarType to_scalar_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return at::kFloat;
    case DType::F16: return at::kHalf;
    case DType::BF16: return at::kBFloat16;
  }
  return at::kFloat;
}

class CheckpointWeights final : public WeightSource {
 public:
  explicit CheckpointWeights(std::unique_ptr<Checkpoint> checkpoint) : checkpoint_(std::move(checkpoint)) {}

  at::Tensor read(const TensorSpec& tensor, at::ScalarType dtype) const override {
    const TensorInfo& info = checkpoint_->at(tensor.source_name);
    TG_CHECK(info.shape == tensor.shape, "{}: tensor '{}' has an unexpected shape", info.file, info.name);
    // from_blob does not copy: the conversion (or clone) below produces an owned tensor
    // so nothing keeps pointing into the mapping.
    const at::Tensor view = at::from_blob(const_cast<uint8_t*>(info.data), info.shape,
                                          at::TensorOptions().dtype(to_scalar_type(info.dtype)));
    return view.scalar_type() == dtype ? view.clone() : view.to(dtype);
  }

  const TensorInfo* file_tensor(const TensorSpec& tensor) const override {
    return checkpoint_->find(tensor.source_name);
  }

  std::string describe() const override { return "safetensors checkpoint " + checkpoint_->path(); }

 private:
  std::unique_ptr<Checkpoint> checkpoint_;
};

}  // namespace

std::unique_ptr<WeightSource> open_checkpoint_weights(const std::string& model_dir, const Spec& spec) {
  auto checkpoint = Checkpoint::open(model_dir);
  checkpoint->validate_against(spec);
  return std::make_unique<CheckpointWeights>(std::move(checkpoint));
}

}  // namespace tiergen::model
