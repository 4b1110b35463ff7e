#pragma once
// Cache blocking of the small-row kernels (AVX2: small_matmul_avx2.cpp; AVX-512 for fp32
// x: small_matmul_avx512_f32.cpp; AVX-512 BF16, where its W tiles are too long for L1:
// small_matmul_avx512_bf16.cpp) when x has many rows. Unblocked, each tile of W rows
// passes over every row of x, so a prefill streams all of x (128 rows x 2048 fp32 =
// 1 MiB) from beyond L2 once per four W rows. Blocked, the rows of x go in blocks that
// stay in L2, and each W tile meets a block a span of k at a time, so the W tile's span
// stays in L1 while the block's tiles of x pass under it. The accumulators of a tile
// are kept in memory between spans; an element's multiply-adds still run in k order
// in the same lanes, so blocking never changes a result's bits.
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace tiergen::kernels::detail {

// Rows of x per block at most (bounds the accumulators kept between spans); a block is
// whole tiles of x rows, so 63 with tiles of 3.
constexpr int64_t kMaxBlockRows = 64;
// The sizes a kernel blocks x to.
struct BlockBytes {
  // Bytes of x per block, beside the chunk's W rows in L2. A block has at least one
  // tile of x rows, so for a long enough k a block is larger.
  int64_t x_block = 0;
  // Bytes of one x row per span of k: the W tile's span must stay in L1 beside the
  // x tile's.
  int64_t span_x = 0;
};

// The fp32 kernels' (x in fp32): a quarter of a 1 MiB L2 per block (Zen 4; tuned
// there), and spans where a four-row W tile's span is 8 KiB (fp32 W) or 4 KiB (16-bit W).
constexpr BlockBytes kFp32XBlocks{int64_t(256) << 10, 2048};

// Tiles of x rows in one block at most: whole tiles, then the rows left over one by one.
constexpr int64_t max_tiles_per_block(int64_t tile_x) { return kMaxBlockRows / tile_x + tile_x - 1; }

// A span [begin, end) of the vector part of k; `last` when it ends the sums.
struct KSpan {
  int64_t begin = 0;
  int64_t end = 0;
  bool last = true;
};

struct RowBlocking {
  int64_t x_rows = 0;   // rows of x per block
  int64_t k_vec = 0;    // k rounded down to the kernel's lanes
  int64_t span = 0;     // k per span: a multiple of the lanes, or k_vec (one span)
  KSpan first_span() const { return span_from(0); }
  KSpan next_span(const KSpan& s) const { return span_from(s.end); }
  KSpan span_from(int64_t begin) const {
    const int64_t end = std::min(k_vec, begin + span);
    return KSpan{begin, end, end == k_vec};
  }
};

// The blocking for `rows` rows of x of `x_elem_bytes` elements and k, for a kernel of
// `lanes` elements per step and tiles of `tile_x` rows of x, to the kernel's `sizes`.
// Unblocked (fewer rows than the kernel's `min_blocked_rows`, or `blocking_on` false:
// small_matmul_blocking()): one block of all rows and one span of k.
inline RowBlocking row_blocking(int64_t rows, int64_t k, int64_t lanes, int64_t tile_x, size_t x_elem_bytes,
                                int64_t min_blocked_rows, bool blocking_on, BlockBytes sizes) {
  RowBlocking b;
  b.k_vec = k / lanes * lanes;
  if (rows < min_blocked_rows || !blocking_on) {
    b.x_rows = rows;
    b.span = b.k_vec;
    return b;
  }
  const int64_t fit = sizes.x_block / (k * int64_t(x_elem_bytes));
  b.x_rows = std::clamp(fit / tile_x * tile_x, tile_x, kMaxBlockRows / tile_x * tile_x);
  b.span = std::max(lanes, sizes.span_x / int64_t(x_elem_bytes) / lanes * lanes);
  return b;
}

}  // namespace tiergen::kernels::detail
