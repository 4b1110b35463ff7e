// WeightSource over a memory-mapped safetensors checkpoint.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>

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

// The mapping was validated against the file's size when it was opened. A file cut
// shorter since (rewritten in place) would fault with SIGBUS on the pages past its
// new end; this turns that into an error naming the file. (A file cut between this
// check and the copy still faults: a narrow window, not a guarantee.)
void check_still_in_file(const TensorInfo& info) {
  struct stat st {};
  TG_CHECK(::stat(info.file.c_str(), &st) == 0, "{}: the checkpoint file is gone since it was opened: {}", info.file,
           std::strerror(errno));
  TG_CHECK(static_cast<uint64_t>(st.st_size) >= info.file_offset + info.nbytes,
           "{}: the checkpoint file shrank to {} bytes since it was opened, and tensor '{}' ends at byte {}: was it "
           "rewritten while tiergen ran?", info.file, static_cast<uint64_t>(st.st_size), info.name,
           info.file_offset + info.nbytes);
}

// NaN or infinite weights make every result garbage; said once, naming the tensor, as
// each tensor is read. max and min propagate a NaN and show an infinity, without a
// temporary the size of the tensor.
void check_finite(const at::Tensor& t, const TensorInfo& info) {
  if (t.numel() == 0 || !at::isFloatingType(t.scalar_type())) return;
  const double largest = t.max().item<double>(), smallest = t.min().item<double>();
  TG_CHECK(std::isfinite(largest) && std::isfinite(smallest),
           "{}: tensor '{}' holds non-finite values (NaN or infinity; largest {}, smallest {}): the checkpoint is "
           "damaged", info.file, info.name, largest, smallest);
}

class CheckpointWeights final : public WeightSource {
 public:
  explicit CheckpointWeights(std::unique_ptr<Checkpoint> checkpoint) : checkpoint_(std::move(checkpoint)) {}

  at::Tensor read(const TensorSpec& tensor, at::ScalarType dtype) const override {
    // from_blob does not copy: the conversion (or clone) below produces an owned tensor
    // so nothing keeps pointing into the mapping.
    const TensorInfo& info = readable(tensor);
    const at::Tensor view = mapped_view(info);
    at::Tensor owned = view.scalar_type() == dtype ? view.clone() : view.to(dtype);
    release_pages(info);
    check_finite(owned, info);
    return owned;
  }

  void read_into(const TensorSpec& tensor, const at::Tensor& out) const override {
    const TensorInfo& info = readable(tensor);
    TG_CHECK(out.sizes() == at::IntArrayRef(info.shape), "internal: tensor '{}' read into a home of another shape",
             info.name);
    out.copy_(mapped_view(info));
    release_pages(info);
    check_finite(out, info);
  }

  const TensorInfo* file_tensor(const TensorSpec& tensor) const override {
    return checkpoint_->find(tensor.source_name);
  }

  std::string describe() const override { return "safetensors checkpoint " + checkpoint_->path(); }

 private:
  const TensorInfo& readable(const TensorSpec& tensor) const {
    const TensorInfo& info = checkpoint_->at(tensor.source_name);
    TG_CHECK(info.shape == tensor.shape, "{}: tensor '{}' has an unexpected shape", info.file, info.name);
    check_still_in_file(info);
    return info;
  }

  static at::Tensor mapped_view(const TensorInfo& info) {
    return at::from_blob(const_cast<uint8_t*>(info.data), info.shape,
                         at::TensorOptions().dtype(to_scalar_type(info.dtype)));
  }

  std::unique_ptr<Checkpoint> checkpoint_;
};

}  // namespace

std::unique_ptr<WeightSource> open_checkpoint_weights(const std::string& model_dir, const Spec& spec) {
  auto checkpoint = Checkpoint::open(model_dir);
  checkpoint->validate_against(spec);
  return std::make_unique<CheckpointWeights>(std::move(checkpoint));
}

}  // namespace tiergen::model
