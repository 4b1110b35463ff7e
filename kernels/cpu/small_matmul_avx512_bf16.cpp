// AVX-512 BF16 kernel of small_matmul() for bf16 weights times bf16 activations:
// vdpbf16ps multiplies 32 bf16 pairs (exact products) and adds them into 16 fp32
// lanes, so no conversion instructions sit between the loads and the multiply-adds.
// Tiles of 6 W rows x 4 x rows keep 24 accumulators in flight (29 of the 32 zmm
// registers), the W tile in L1 while the x rows stream from L2; a chunk's last 4 W rows,
// and fewer than 4 rows of x, go in tiles of 4 W rows; one row of x (decode at batch 1)
// takes one W row at a time (row_sequential.h). Where a W tile's rows are too long for
// L1, many rows of x are cache-blocked as in the fp32 kernels, to sizes of its own
// (kXBlocks; small_matmul_blocking.h).
// The k tail is a masked load (zeros add nothing), so every element's order is: lanes
// over k in steps of 32, then the lanes summed pairwise, blocked or not. Like the
// instruction, results treat bf16 subnormal inputs as zero.
#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/simd_avx512_bf16.h"
#include "kernels/cpu/small_matmul_blocking.h"
#include "kernels/cpu/small_matmul_impl.h"

namespace tiergen::kernels::detail {
namespace {

constexpr int kTileW = 4;  // rows of W per tile
constexpr int kTileX = 4;  // rows of x per tile
// W rows per tile from kTileX rows of x on: 4 x loads (from L2, where the x rows stay)
// per 24 dot products instead of per 16. One TinyLlama layer
// (bench_matmul, 2-core Zen 5 guest, three interleaved rounds): 128 rows 17.6-17.9 ms
// against 19.8-20.9, 64 rows 8.2-9.2 against 9.7-10.1. 8 W rows x 3 x rows ran slower
// (24.2-24.6 ms at 128 rows).
constexpr int kTileWMany = 6;
constexpr int64_t kLanes = 32;  // bf16 elements of k per step
// Blocked only from this many rows of x, and only where a 6-row W tile spans more than
// kWTileBytes (k past 2048): shorter W tiles stay in L1 unblocked, and blocking them cost
// up to 5% (a TinyLlama layer at 64-256 rows, every product blocked: 0.95-1.00x). On a
// 2-core Zen 5 guest (bench_matmul --sections bfloat16, blocked with the fp32 kernels'
// block sizes / unblocked ms per layer, two or three rounds): LLaMA-7B shapes (hidden 4096)
// 1.08-1.14x at 32 rows, 1.18x at 64, 1.06-1.11x at 128, 1.15-1.16x at 256; hidden 3072
// 1.11-1.14x at 32-128; TinyLlama (down_proj, k = 5632, blocked only) 1.01x at 32 rows,
// 1.05-1.06x at 128, 1.07-1.08x at 256. At 16 rows it gained nothing sure (hidden 4096
// 1.00-1.06x, TinyLlama 0.97-1.01x, and batch-16 bf16 TinyLlama decode 0.98x in 5
// interleaved pairs), so 16 rows stay unblocked.
constexpr int64_t kMinBlockedRows = 32;
constexpr int64_t kWTileBytes = 24 << 10;
// Blocks of x: up to 512 KiB of x rows (half of a 1 MiB L2), each W tile meeting them a
// span of 2048 elements at a time, so the span of a 6-row W tile is kWTileBytes, as an
// unblocked tile of k = 2048 is. bench_matmul --sections bfloat16, ms per layer, 2-core Zen
// 5 guest, two rounds, against the fp32 kernels' sizes (256 KiB, spans of 1024): hidden
// 4096 at 128 rows 45.2-45.9 against 48.9-49.3, at 64 rows 22.6-22.9 against 25.6-26.2;
// hidden 5120 (intermediate 13824) at 128 rows 120-127 in three rounds of four (148 in one)
// against 126-140; hidden 3072 41.5-42.2 against 44.0-45.8; TinyLlama 15.3 against
// 15.7-16.5. Blocks of 768 KiB ran alike, spans of 4096 elements 10-20% slower.
constexpr BlockBytes kXBlocks{int64_t(512) << 10, kWTileBytes / kTileWMany};

TG_AVX512_BF16 inline __m512bh load32(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }

TG_AVX512_BF16 inline __m512bh load_tail(const uint16_t* p, __mmask32 mask) {
  return (__m512bh)_mm512_maskz_loadu_epi16(mask, p);
}

// y[m + c][j + r] for r < R, c < C over the span `span` of k: accumulators from zero
// at k = 0, else from `saved`; a span that does not end the sums leaves them in
// `saved`; the last one adds the k tail (a masked step) and then each accumulator's
// lanes. Without Spans, the span is all of k and `saved` unused: compiled apart, as the
// span's checks cost an unblocked tile of 16 rows 3-4% (bench_matmul). `next` (or
// null): a row of the next W tile, brought into L1 a line per step.
template <int R, int C, bool Spans>
TG_AVX512_BF16 void tile(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j, int64_t m, KSpan span,
                         __m512* saved, const uint16_t* next) {
  const int64_t k = a.k;
  const uint16_t* w[R];
  const uint16_t* x[C];
  for (int r = 0; r < R; ++r) w[r] = static_cast<const uint16_t*>(a.w) + (j + r) * k;
  for (int c = 0; c < C; ++c) x[c] = s.x_bf16 + (m + c) * s.x_row_stride;

  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = !Spans || span.begin == 0 ? _mm512_setzero_ps() : saved[r * C + c];
  for (int64_t p = span.begin; p < span.end; p += kLanes) {
    if (next) _mm_prefetch(reinterpret_cast<const char*>(next + p), _MM_HINT_T0);
    __m512bh xv[C];
    for (int c = 0; c < C; ++c) xv[c] = load32(x[c] + p);
    for (int r = 0; r < R; ++r) {
      const __m512bh wv = load32(w[r] + p);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], wv, xv[c]);
    }
  }
  if (Spans && !span.last) {
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) saved[r * C + c] = acc[r][c];
    return;
  }
  if (span.end < k) {
    const __mmask32 mask = __mmask32((uint64_t(1) << (k - span.end)) - 1);
    __m512bh xv[C];
    for (int c = 0; c < C; ++c) xv[c] = load_tail(x[c] + span.end, mask);
    for (int r = 0; r < R; ++r) {
      const __m512bh wv = load_tail(w[r] + span.end, mask);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], wv, xv[c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float sum = avx512::lane_sum(acc[r][c]);
      if (a.bias) sum += a.bias[j + r];
      a.y[(m + c) * s.y_row_stride + j + r] = sum;
    }
  }
}

// W rows [j, j + R) against x rows [m0, m1) over one span of k: tiles of kTileX rows of
// x, then single rows. With Spans, each tile keeps its accumulators in `saved` between
// spans, a block's tiles one after another. With several tiles of x, each tile's pass
// over the W rows also prefetches one row of the next W rows (pass i, row i mod R; at 16
// rows of x four of them): the first pass over a W tile otherwise waits on memory, and a
// throwaway copy of this loop ran 0.7 dot products per cycle with W streaming from
// memory against 1.7 with W in L2 (bench/RESULTS.md, the Zen 5 section).
template <int R, bool Spans>
TG_AVX512_BF16 void span_of_block(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j, int64_t m0,
                                  int64_t m1, KSpan span, __m512* saved) {
  const bool prefetch = m1 - m0 >= 2 * kTileX && j + 2 * R <= a.n;
  int64_t m = m0;
  for (int pass = 0; m + kTileX <= m1; m += kTileX, ++pass, saved += Spans ? R * kTileX : 0) {
    const uint16_t* next_row = prefetch ? static_cast<const uint16_t*>(a.w) + (j + R + pass % R) * a.k : nullptr;
    tile<R, kTileX, Spans>(a, s, j, m, span, saved, next_row);
  }
  for (; m < m1; ++m, saved += Spans ? R : 0) tile<R, 1, Spans>(a, s, j, m, span, saved, nullptr);
}

// W rows [j, j + R) against x rows [m0, m1), span after span of k (one span unblocked).
template <int R>
TG_AVX512_BF16 void x_block(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j, int64_t m0, int64_t m1,
                            const RowBlocking& blocking, __m512* saved) {
  KSpan span = blocking.first_span();
  if (span.last) return span_of_block<R, false>(a, s, j, m0, m1, span, saved);
  for (;; span = blocking.next_span(span)) {
    span_of_block<R, true>(a, s, j, m0, m1, span, saved);
    if (span.last) break;
  }
}

template <int R>
TG_AVX512_BF16 void w_tiles(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t& j, int64_t j1, int64_t m0,
                            int64_t m1, const RowBlocking& blocking, __m512* saved) {
  for (; j + R <= j1; j += R) x_block<R>(a, s, j, m0, m1, blocking, saved);
}

}  // namespace

void small_matmul_columns_avx512_bf16(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j0,
                                      int64_t j1) {
  const bool w_tile_fits_l1 = a.k * int64_t(sizeof(uint16_t)) * kTileWMany <= kWTileBytes;
  const RowBlocking blocking =
      row_blocking(a.rows, a.k, kLanes, kTileX, sizeof(uint16_t), kMinBlockedRows, s.blocking && !w_tile_fits_l1,
                   kXBlocks);
  // Accumulators kept between spans: a block's whole tiles (at most kMaxBlockRows rows),
  // then its single rows, for the widest W tile.
  alignas(64) __m512 saved[max_tiles_per_block(kTileX) * kTileX * kTileWMany];
  for (int64_t m0 = 0; m0 < a.rows; m0 += blocking.x_rows) {
    const int64_t m1 = std::min(a.rows, m0 + blocking.x_rows);
    int64_t j = j0;
    // One row of x: one W row at a time, W read front to back (kRowSequentialMaxRows).
    if (a.rows > kRowSequentialMaxRows) {
      if (a.rows >= kTileX) w_tiles<kTileWMany>(a, s, j, j1, m0, m1, blocking, saved);
      w_tiles<kTileW>(a, s, j, j1, m0, m1, blocking, saved);
    }
    w_tiles<1>(a, s, j, j1, m0, m1, blocking, saved);
  }
}

}  // namespace tiergen::kernels::detail
#endif  // __x86_64__
