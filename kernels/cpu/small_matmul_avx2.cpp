// AVX2/FMA kernel of small_matmul(). A tile is R rows of W (output columns) x C rows
// of x: each step over k loads eight elements of each W row once, converts them to
// fp32 in registers, and feeds R*C independent FMA chains, so W streams from memory
// once per call while the few rows of x stay in cache. Tiles of 4 x 3 keep twelve
// chains in flight within the sixteen ymm registers (twelve accumulators, three rows
// of x, one of W): 1.2-1.3x the products of 4 x 2 tiles, which kept eight, at 128 and
// 512 rows on a 2-core Zen 4 (bench/RESULTS.md).
//
// Many rows of x (a prefill) are cache-blocked (small_matmul_blocking.h): each block of
// x rows is multiplied by the chunk's W tiles a span of k at a time, the accumulators
// kept in memory between spans, so a W tile's span stays in L1 and the x block in L2
// instead of every W tile streaming all of x from L3 (0.97-1.23x at 512 rows over five
// runs on the same noisy Zen 4 guest; 1.02-1.08x at 64 and 128). An element's chain of
// FMAs is the same as unblocked: a row's result does not depend on the blocking either.
#if defined(__x86_64__)
#include <algorithm>
#include <cmath>

#include "kernels/cpu/elements.h"
#include "kernels/cpu/row_sequential.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/small_matmul_blocking.h"
#include "kernels/cpu/small_matmul_impl.h"
#include "kernels/cpu/w_stream_prefetch.h"

namespace tiergen::kernels::detail {
namespace {

constexpr int kTileW = 4;  // rows of W per tile
constexpr int kTileX = 3;  // rows of x per tile
constexpr int kLanes = 8;  // fp32 elements of k per step
// Fewer rows of x than this run unblocked (decode: W streams from memory once either way;
// blocking gained 1.05x at 16 rows on a 2-core Zen 4, bench/RESULTS.md).
constexpr int64_t kMinBlockedRows = 8;

// acc[r][c] += W row r times x row c over the span, eight lanes per step; with
// kPrefetchW, each W row's line kWStreamPrefetchBytes ahead (kOneWRowPrefetchBytes for a
// tile of one W row) is prefetched once per line.
template <ElemType T, int R, int C, bool kPrefetchW>
TG_AVX2 __attribute__((always_inline)) inline void accumulate(const void* const (&w)[R], const float* const (&x)[C],
                                                             KSpan span, __m256 (&acc)[R][C]) {
  for (int64_t p = span.begin; p < span.end; p += kLanes) {
    if constexpr (kPrefetchW) prefetch_w_rows<T, R>(w, p);
    __m256 xv[C];
    for (int c = 0; c < C; ++c) xv[c] = _mm256_loadu_ps(x[c] + p);
    for (int r = 0; r < R; ++r) {
      const __m256 wv = avx2::load8<T>(w[r], p);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(wv, xv[c], acc[r][c]);
    }
  }
}

// y[m + c][j + r] for r < R, c < C, over the span `span` of k (its start and end
// multiples of 8, within k rounded down to 8). The accumulators start at zero on the
// span at k = 0 and from `saved` on a later one; a span that does not end the sums
// leaves them in `saved`, the one that does adds the lanes pairwise, then the k tail
// in k order (one explicit FMA per element: left to the compiler, `sum += w * x` was
// contracted into an FMA in some instantiations and not in others), then the bias.
// The per-element order (lanes over k in steps of 8, hsum, tail) is the same for every
// R, C and span.
template <ElemType T, int R, int C>
TG_AVX2 void tile(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j, int64_t m, KSpan span,
                  __m256* saved) {
  const int64_t k = a.k;
  const int64_t w_row_bytes = k * elem_size(T);
  const void* w[R];
  const float* x[C];
  for (int r = 0; r < R; ++r) w[r] = static_cast<const uint8_t*>(a.w) + (j + r) * w_row_bytes;
  for (int c = 0; c < C; ++c) x[c] = s.x_f32 + (m + c) * s.x_row_stride;

  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = span.begin == 0 ? _mm256_setzero_ps() : saved[r * C + c];
  if (tile_streams_w(m, span.begin, span.last)) {
    accumulate<T, R, C, true>(w, x, span, acc);
  } else {
    accumulate<T, R, C, false>(w, x, span, acc);
  }
  if (!span.last) {
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) saved[r * C + c] = acc[r][c];
    return;
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float sum = avx2::hsum(acc[r][c]);
      for (int64_t p = span.end; p < k; ++p) sum = std::fma(load_element(w[r], T, p), x[c][p], sum);
      if (a.bias) sum += a.bias[j + r];
      a.y[(m + c) * s.y_row_stride + j + r] = sum;
    }
  }
}

// W rows [j, j + R) against x rows [m0, m1), span after span of k. `saved` holds
// kTileW * kTileX accumulators per tile of x rows.
template <ElemType T, int R>
TG_AVX2 void x_block(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j, int64_t m0, int64_t m1,
                     const RowBlocking& blocking, __m256* saved) {
  for (KSpan span = blocking.first_span(); ; span = blocking.next_span(span)) {
    __m256* tile_saved = saved;
    // One span (unblocked) keeps nothing between spans: every tile may share `saved`.
    const int64_t saved_stride = span.begin == 0 && span.last ? 0 : kTileW * kTileX;
    int64_t m = m0;
    for (; m + kTileX <= m1; m += kTileX, tile_saved += saved_stride) tile<T, R, kTileX>(a, s, j, m, span, tile_saved);
    for (; m < m1; ++m, tile_saved += saved_stride) tile<T, R, 1>(a, s, j, m, span, tile_saved);
    if (span.last) break;
  }
}

template <ElemType T>
TG_AVX2 void columns(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j0, int64_t j1) {
  const RowBlocking blocking =
      row_blocking(a.rows, a.k, kLanes, kTileX, sizeof(float), kMinBlockedRows, s.blocking, kFp32XBlocks);
  alignas(32) __m256 saved[max_tiles_per_block(kTileX) * kTileW * kTileX];
  for (int64_t m0 = 0; m0 < a.rows; m0 += blocking.x_rows) {
    const int64_t m1 = std::min(a.rows, m0 + blocking.x_rows);
    int64_t j = j0;
    // One row of x times fp32 W where the CPU reads one stream faster: one W row at a time
    // (small_matmul_one_row_sequential; a W row's sums are the same in either form). Not
    // 16-bit W: one chain of FMAs then covers half the bytes per step, and fp16 W at one
    // row ran at 29.3 GB/s one row at a time against 48.5 in tiles (two profiles of a
    // 2-core Zen 5 guest).
    const bool row_by_row = T == ElemType::F32 && s.one_row_sequential && a.rows <= kRowSequentialMaxRows;
    if (!row_by_row) {
      for (; j + kTileW <= j1; j += kTileW) x_block<T, kTileW>(a, s, j, m0, m1, blocking, saved);
    }
    for (; j < j1; ++j) x_block<T, 1>(a, s, j, m0, m1, blocking, saved);
  }
}

}  // namespace

void small_matmul_columns_avx2(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j0, int64_t j1) {
  switch (a.w_type) {
    case ElemType::F32: return columns<ElemType::F32>(a, s, j0, j1);
    case ElemType::F16: return columns<ElemType::F16>(a, s, j0, j1);
    case ElemType::BF16: return columns<ElemType::BF16>(a, s, j0, j1);
  }
}

namespace {

template <ElemType T>
TG_AVX2 void widen_rows(const void* w, int64_t k, int64_t j0, int64_t j1, float* out) {
  const int64_t k8 = k / 8 * 8;
  for (int64_t j = j0; j < j1; ++j, out += k) {
    const void* row = static_cast<const uint8_t*>(w) + j * k * elem_size(T);
    for (int64_t p = 0; p < k8; p += 8) _mm256_storeu_ps(out + p, avx2::load8<T>(row, p));
    for (int64_t p = k8; p < k; ++p) out[p] = load_element(row, T, p);
  }
}

}  // namespace

void widen_w_rows_avx2(const SmallMatmulArgs& a, int64_t j0, int64_t j1, float* out) {
  switch (a.w_type) {
    case ElemType::F16: return widen_rows<ElemType::F16>(a.w, a.k, j0, j1, out);
    case ElemType::BF16: return widen_rows<ElemType::BF16>(a.w, a.k, j0, j1, out);
    case ElemType::F32: return widen_rows<ElemType::F32>(a.w, a.k, j0, j1, out);
  }
}

}  // namespace tiergen::kernels::detail
#endif  // __x86_64__
