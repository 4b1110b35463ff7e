#pragma once
// Software prefetch of W rows that a product streams from memory once (decode: a few rows
// of x, unblocked). The SIMD kernels read a tile's W rows side by side, several streams a
// row's length apart, and the hardware prefetchers alone kept too few lines in flight:
// on a 2-core Emerald Rapids guest, a TinyLlama layer's fp32 matrices times one row ran at
// 21.8-22.7 GB/s in tiles of four W rows and at 22.9-24.1 GB/s with each row prefetched
// 2 KiB ahead (a plain read of the same bytes: 25-27 GB/s; eight interleaved rounds).
// 1 KiB ahead gave about the same, 512 B less; a non-temporal hint halved the rate.
// Prefetches never fault, so addresses past W's end are harmless. Nothing here touches a
// result: the sums are the same with or without it.
#include <cstdint>

#include "kernels/cpu/quantize.h"

namespace tiergen::kernels::detail {

constexpr int64_t kWStreamPrefetchBytes = 2048;

// W rows' elements per 64-byte line.
template <ElemType T>
constexpr int64_t w_line_elements() {
  static_assert(T == ElemType::F32 || T == ElemType::F16 || T == ElemType::BF16);
  return T == ElemType::F32 ? 16 : 32;
}

// Prefetches the line kWStreamPrefetchBytes past element p of a W row. The kernels call it
// once per line (p a multiple of w_line_elements), in a copy of their k loop of its own,
// for the first tile of x rows only (the tiles after it find W in cache). A first try
// that tested, per W row and step, whether to prefetch, in every tile, made fp32 batch-16
// decode and batch-1 prefill 0.77-0.86x as fast (TinyLlama shape, the same guest).
template <ElemType T>
inline void prefetch_w_ahead(const void* row, int64_t p) {
  constexpr int64_t kElemBytes = 64 / w_line_elements<T>();
  // As an integer: the address may lie past W's allocation.
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(row) + uintptr_t(p * kElemBytes + kWStreamPrefetchBytes);
  __builtin_prefetch(reinterpret_cast<const char*>(ahead), 0, 3);
}

}  // namespace tiergen::kernels::detail
