#pragma once
// Software prefetch of W rows that an fp32-activation product (the AVX2 and AVX-512 fp32
// small_matmul kernels) streams from memory once: decode's few rows of x, W unblocked.
// Those kernels read a tile's W rows side by side, several streams a row's length apart,
// and the hardware prefetchers alone kept too few lines in flight: on a 2-core Emerald
// Rapids guest, a TinyLlama layer's fp32 matrices times one row ran at 21.8-22.7 GB/s in
// tiles of four W rows and at 22.9-24.1 GB/s with each row prefetched 2 KiB ahead (a
// plain read of the same bytes: 25.3-27.2 GB/s; the same rounds). 1 KiB ahead gave about
// the same, 512 B less; a non-temporal hint halved the rate. The kernels prefetch in the
// first tile of x rows when one span covers all of k (the tiles after it find W in
// cache), in a copy of their k loop of its own: testing per W row and step, in every
// tile, whether to prefetch made fp32 batch-16 decode 0.77-0.86x and batch-1 prefill about
// 0.75x as fast. A tile of one W row (the rows a chunk leaves past its tiles of four, and
// every row where small_matmul_one_row_sequential reads them one at a time) is
// prefetched further ahead: on a 2-core Zen 5 guest, a TinyLlama layer's fp32 matrices times one row,
// one row at a time, 4 KiB ahead read at 0.89-0.99 of llama.cpp's order (three runs of 41
// interleaved repetitions) against 0.79-0.96 at 2 KiB and 0.81-0.93 unprefetched, where
// tiles of four rows 2 KiB ahead read at 0.80-0.83. Nothing here touches a result.
#include <cstdint>

#include "kernels/cpu/prefetch_address.h"
#include "kernels/cpu/quantize.h"  // ElemType, elem_size

namespace tiergen::kernels::detail {

constexpr int64_t kWStreamPrefetchBytes = 2048;
constexpr int64_t kOneWRowPrefetchBytes = 4096;
constexpr int64_t kCacheLineBytes = 64;

// Prefetches, where element p of the W rows starts a line, each row's line
// kWStreamPrefetchBytes ahead (kOneWRowPrefetchBytes for a single row): called at every
// step of a k loop over p, it touches each line once.
template <ElemType T, int R>
__attribute__((always_inline)) inline void prefetch_w_rows(const void* const (&w)[R], int64_t p) {
  constexpr int64_t kElemBytes = elem_size(T);
  constexpr int64_t kAhead = R == 1 ? kOneWRowPrefetchBytes : kWStreamPrefetchBytes;
  if (p * kElemBytes % kCacheLineBytes != 0) return;
  for (int r = 0; r < R; ++r) {
    __builtin_prefetch(prefetch_address(w[r], p * kElemBytes + kAhead), 0, 3);
  }
}

// Whether the tile of x rows starting at m reads W from memory over `span`: the first
// tile, when one span covers all of k.
inline bool tile_streams_w(int64_t m, int64_t span_begin, bool span_last) {
  return m == 0 && span_begin == 0 && span_last;
}

}  // namespace tiergen::kernels::detail
