#pragma once
// Host tensors for weights that stay in host memory and are read whole, front to back,
// at every token: backed by transparent huge pages where the kernel offers them. Its
// default policy ("madvise", Debian's) gives 2 MiB pages only to memory that asks for
// them; with 4 KiB pages a decode that streams the weights walks a new page, and misses
// the TLB, every 4 KiB. (On a 2-core Zen 5 guest, TinyLlama decode at batch 1 with its
// weights on huge pages, interleaved pairs: fp32 median 1.06x over 8, bf16 1.04x over 10;
// bench/RESULTS.md.)
#include <ATen/ATen.h>

#include <cstdint>

namespace tiergen {

// Tensors from this size up are placed on huge pages; smaller ones gain nothing.
constexpr uint64_t kHugePageBytes = uint64_t(2) << 20;

// An uninitialised contiguous CPU tensor that starts on a 2 MiB boundary, its whole huge
// pages advised for huge pages (MADV_HUGEPAGE) before anything touches them; its last
// partial huge page stays on small pages and nothing is mapped past its last small page,
// so no memory is spent beyond the tensor's bytes (rounded to a small page). Below
// kHugePageBytes, and where the advice or the mapping is refused, a plain at::empty.
at::Tensor empty_on_huge_pages(at::IntArrayRef sizes, at::ScalarType type);

// Whether `tensor`'s memory was advised for huge pages by empty_on_huge_pages.
bool on_huge_pages(const at::Tensor& tensor);

}  // namespace tiergen
