#include "tiergen/common/huge_pages.h"

#include <sys/mman.h>

#include <c10/util/accumulate.h>

namespace tiergen {

namespace {

// The deleter of a mapping made here; also how on_huge_pages recognises one.
struct HugeMapping {
  void* base = nullptr;
  size_t length = 0;
};

void unmap(void* context) {
  auto* mapping = static_cast<HugeMapping*>(context);
  ::munmap(mapping->base, mapping->length);
  delete mapping;
}

}  // namespace

at::Tensor empty_on_huge_pages(at::IntArrayRef sizes, at::ScalarType type) {
  const auto bytes = static_cast<uint64_t>(c10::multiply_integers(sizes)) * c10::elementSize(type);
  const auto options = at::TensorOptions().dtype(type).device(at::kCPU);
  if (bytes < kHugePageBytes) return at::empty(sizes, options);
  // One huge page more than the tensor, so a 2 MiB boundary falls within its first.
  const size_t length = bytes + kHugePageBytes;
  void* base = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return at::empty(sizes, options);
  const uintptr_t start = reinterpret_cast<uintptr_t>(base);
  const uintptr_t aligned = (start + kHugePageBytes - 1) & ~uintptr_t(kHugePageBytes - 1);
  const uint64_t whole = (start + length - aligned) / kHugePageBytes * kHugePageBytes;
  const uint64_t advised = std::min<uint64_t>(whole, bytes / kHugePageBytes * kHugePageBytes);
  if (::madvise(reinterpret_cast<void*>(aligned), advised, MADV_HUGEPAGE) != 0) {
    ::munmap(base, length);  // no transparent huge pages here: plain memory serves
    return at::empty(sizes, options);
  }
  auto* mapping = new HugeMapping{base, length};
  c10::DataPtr data(reinterpret_cast<void*>(aligned), mapping, &unmap, at::Device(at::kCPU));
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, std::move(data), /*allocator=*/nullptr,
                       /*resizable=*/false);
  return at::empty({0}, options).set_(storage, 0, sizes);
}

bool on_huge_pages(const at::Tensor& tensor) {
  return tensor.defined() && tensor.storage().data_ptr().get_deleter() == &unmap;
}

}  // namespace tiergen
