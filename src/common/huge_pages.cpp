#include "tiergen/common/huge_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include <c10/util/accumulate.h>

namespace tiergen {

namespace {

// The deleter of a mapping made here; also how on_huge_pages recognises one.
struct Mapping {
  void* start = nullptr;
  size_t length = 0;
};

void unmap(void* context) {
  auto* mapping = static_cast<Mapping*>(context);
  ::munmap(mapping->start, mapping->length);
  delete mapping;
}

uintptr_t round_up(uintptr_t value, uintptr_t to) { return (value + to - 1) / to * to; }

}  // namespace

at::Tensor empty_on_huge_pages(at::IntArrayRef sizes, at::ScalarType type) {
  const auto bytes = static_cast<uint64_t>(c10::multiply_integers(sizes)) * c10::elementSize(type);
  const auto options = at::TensorOptions().dtype(type).device(at::kCPU);
  if (bytes < kHugePageBytes) return at::empty(sizes, options);
  // One huge page more than the tensor, so that a 2 MiB boundary falls within its first;
  // what lies before that boundary and past the tensor's last small page is unmapped
  // again, so no huge page can back memory the tensor does not own (THP "always").
  const size_t reserved = bytes + kHugePageBytes;
  void* base = ::mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return at::empty(sizes, options);
  const auto first = reinterpret_cast<uintptr_t>(base);
  const uintptr_t start = round_up(first, kHugePageBytes);
  const uintptr_t end = round_up(start + bytes, static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE)));
  if (start > first) ::munmap(base, start - first);
  if (first + reserved > end) ::munmap(reinterpret_cast<void*>(end), first + reserved - end);
  const size_t length = end - start;
  // The whole huge pages within the tensor; its last partial one stays on small pages.
  if (::madvise(reinterpret_cast<void*>(start), bytes / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE) != 0) {
    ::munmap(reinterpret_cast<void*>(start), length);  // no transparent huge pages here
    return at::empty(sizes, options);
  }
  auto* mapping = new Mapping{reinterpret_cast<void*>(start), length};
  c10::DataPtr data(mapping->start, mapping, &unmap, at::Device(at::kCPU));
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, std::move(data), /*allocator=*/nullptr,
                       /*resizable=*/false);
  return at::empty({0}, options).set_(storage, 0, sizes);
}

bool on_huge_pages(const at::Tensor& tensor) {
  return tensor.defined() && tensor.storage().data_ptr().get_deleter() == &unmap;
}

}  // namespace tiergen
