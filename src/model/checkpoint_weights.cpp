// WeightSource over a memory-mapped safetensors checkpoint.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

#include "tiergen/common/error.h"
#include "tiergen/model/checkpoint.h"
#include "tiergen/model/weight_source.h"

namespace tiergen::model {

namespace {

// The copy above is what the tiers account for; the mapped pages it was read from
// would otherwise stay resident and hold a second copy of the model in host memory.
void release_pages(const TensorInfo& info) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(info.data) & ~(page - 1);
  const auto end = reinterpret_cast<uintptr_t>(info.data) + info.nbytes;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

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
    at::Tensor owned = view.scalar_type() == dtype ? view.clone() : view.to(dtype);
    release_pages(info);
    return owned;
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
