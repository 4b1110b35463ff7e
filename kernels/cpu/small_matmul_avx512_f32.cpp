// AVX-512 kernel of small_matmul() for fp32 x (fp32, fp16 or bf16 weights), bit for bit
// the AVX2 kernel's results (small_matmul_avx2.cpp) at twice the multiply-adds per
// instruction. The AVX2 kernel keeps each output element in eight lanes over k in steps
// of eight, then adds the lanes pairwise; a 16-lane register here holds two such
// elements side by side, the same W row's eight elements broadcast to both halves and
// the eight elements of two rows of x, one per half. So every lane runs exactly the
// AVX2 lane's chain of FMAs, and the halves are summed as AVX2 sums its register:
// results do not change with the ISA level, the row count, the tile or the thread.
//
// A tile is kTileW W rows times kPairs pairs of x rows: 16 accumulators, 4 x vectors
// and one W vector of the 32 registers, 16 FMAs per 4 W loads (the AVX2 tile: 12 per 4).
// Many rows of x are cache-blocked as in the AVX2 kernel (small_matmul_blocking.h).
#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/elements.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/small_matmul_blocking.h"
#include "kernels/cpu/small_matmul_impl.h"
#include "kernels/cpu/w_stream_prefetch.h"

#define TG_AVX512_F32 __attribute__((target("avx512f,avx2,fma,f16c")))

namespace tiergen::kernels::detail {
namespace {

constexpr int kTileW = 4;   // rows of W per tile
constexpr int kPairs = 4;   // pairs of x rows per tile (8 rows)
constexpr int kLanes = 8;   // fp32 elements of k per step, as in the AVX2 kernel
// Tiles start at even rows only if every block of x rows (row_blocking) is whole tiles.
static_assert(kMaxBlockRows % (2 * kPairs) == 0);
// Fewer rows of x than this run unblocked. Tiles of 8 rows meet a W tile's span only a few
// times below it, too few to pay for keeping the accumulators between spans: on a 2-core
// Zen 5 guest, a TinyLlama layer blocked ran 0.90-0.91x unblocked at 8 rows, 0.93-0.95x at
// 16, 0.92-0.93x at 32, 0.98-0.99x at 64, 1.01x at 80 and 96, 1.06-1.08x at 128 and
// 1.22-1.23x at 256 (bench_matmul --sections float, two rounds; the AVX2 kernel's own
// threshold was measured on a Zen 4).
constexpr int64_t kMinBlockedRowsAvx512 = 80;

// Eight elements of a W row, widened to fp32, in both halves. (The zero-masked forms
// of these intrinsics: the plain ones start from an undefined register, which GCC 12
// reports as maybe uninitialized.)
template <ElemType T>
TG_AVX512_F32 inline __m512 load8_twice(const void* row, int64_t p) {
  return _mm512_castpd_ps(_mm512_maskz_broadcast_f64x4(0xFF, _mm256_castps_pd(avx2::load8<T>(row, p))));
}

// The half of a pair's accumulator that holds x row c % 2.
TG_AVX512_F32 inline __m256 half_of(__m512 both, int c) {
  const __m512d d = _mm512_castps_pd(both);
  const __m256d half = c % 2 == 0 ? _mm512_maskz_extractf64x4_pd(0xF, d, 0) : _mm512_maskz_extractf64x4_pd(0xF, d, 1);
  return _mm256_castpd_ps(half);
}

// acc[r][q] += W row r (in both halves) times pair q over the span; with kPrefetchW,
// each W row's line kWStreamPrefetchBytes ahead (kOneWRowPrefetchBytes for a tile of one
// W row) is prefetched once per line.
template <ElemType T, int R, int P, bool kPrefetchW>
TG_AVX512_F32 __attribute__((always_inline)) inline void accumulate(const void* const (&w)[R],
                                                                   const float* const (&pairs)[P], KSpan span,
                                                                   __m512 (&acc)[R][P]) {
  for (int64_t p = span.begin; p < span.end; p += kLanes) {
    if constexpr (kPrefetchW) prefetch_w_rows<T, R>(w, p);
    __m512 xv[P];
    for (int q = 0; q < P; ++q) xv[q] = _mm512_loadu_ps(pairs[q] + 2 * p);
    for (int r = 0; r < R; ++r) {
      const __m512 wv = load8_twice<T>(w[r], p);
      for (int q = 0; q < P; ++q) acc[r][q] = _mm512_fmadd_ps(wv, xv[q], acc[r][q]);
    }
  }
}

// y[m + c][j + r] for r < R and the `rows` rows c < rows <= 2P, over the span `span` of
// k (as the AVX2 tile: accumulators from zero at k = 0, else from `saved`; a span that
// does not end the sums leaves them in `saved`; the last one adds each half's lanes as
// avx2::hsum does, then the k tail in k order, then the bias). A last pair of one row
// multiplies zeros in its high half (x_rows_in_pairs) and drops the result.
template <ElemType T, int R, int P>
TG_AVX512_F32 void tile(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j, int64_t m, int rows,
                        KSpan span, __m512* saved) {
  const int64_t k = a.k;
  const int64_t w_row_bytes = k * elem_size(T);
  const void* w[R];
  const float* x[2 * P];
  const float* pairs[P];
  for (int r = 0; r < R; ++r) w[r] = static_cast<const uint8_t*>(a.w) + (j + r) * w_row_bytes;
  for (int c = 0; c < 2 * P; ++c) x[c] = s.x_f32 + (m + std::min(c, rows - 1)) * s.x_row_stride;
  // m is even: blocks and tiles are whole multiples of 8 rows (but the last).
  const int64_t pair_floats = 2 * (k / kLanes * kLanes);  // as x_rows_in_pairs lays them out
  for (int q = 0; q < P; ++q) pairs[q] = s.x_pairs + (m / 2 + q) * pair_floats;

  __m512 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < P; ++q) acc[r][q] = span.begin == 0 ? _mm512_setzero_ps() : saved[r * P + q];
  if (tile_streams_w(m, span.begin, span.last)) {
    accumulate<T, R, P, true>(w, pairs, span, acc);
  } else {
    accumulate<T, R, P, false>(w, pairs, span, acc);
  }
  if (!span.last) {
    for (int r = 0; r < R; ++r)
      for (int q = 0; q < P; ++q) saved[r * P + q] = acc[r][q];
    return;
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < rows; ++c) {
      float sum = avx2::hsum(half_of(acc[r][c / 2], c));
      for (int64_t p = span.end; p < k; ++p) sum = std::fma(load_element(w[r], T, p), x[c][p], sum);
      if (a.bias) sum += a.bias[j + r];
      a.y[(m + c) * s.y_row_stride + j + r] = sum;
    }
  }
}

// The last rows of a block, fewer than a whole tile, in the fewest pairs.
template <ElemType T, int R>
TG_AVX512_F32 void tail_tile(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j, int64_t m, int rows,
                             KSpan span, __m512* saved) {
  switch ((rows + 1) / 2) {
    case 1: return tile<T, R, 1>(a, s, j, m, rows, span, saved);
    case 2: return tile<T, R, 2>(a, s, j, m, rows, span, saved);
    case 3: return tile<T, R, 3>(a, s, j, m, rows, span, saved);
    default: return tile<T, R, kPairs>(a, s, j, m, rows, span, saved);  // 7 rows
  }
}

// W rows [j, j + R) against x rows [m0, m1), span after span of k. `saved` holds
// kTileW * kPairs accumulators per tile of x rows.
template <ElemType T, int R>
TG_AVX512_F32 void x_block(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j, int64_t m0, int64_t m1,
                           const RowBlocking& blocking, __m512* saved) {
  constexpr int kTileRows = 2 * kPairs;
  for (KSpan span = blocking.first_span(); ; span = blocking.next_span(span)) {
    __m512* tile_saved = saved;
    // One span (unblocked) keeps nothing between spans: every tile may share `saved`.
    const int64_t saved_stride = span.begin == 0 && span.last ? 0 : kTileW * kPairs;
    int64_t m = m0;
    for (; m + kTileRows <= m1; m += kTileRows, tile_saved += saved_stride) {
      tile<T, R, kPairs>(a, s, j, m, kTileRows, span, tile_saved);
    }
    if (m < m1) tail_tile<T, R>(a, s, j, m, int(m1 - m), span, tile_saved);
    if (span.last) break;
  }
}

template <ElemType T>
TG_AVX512_F32 void columns(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j0, int64_t j1) {
  constexpr int kTileRows = 2 * kPairs;
  const RowBlocking blocking =
      row_blocking(a.rows, a.k, kLanes, kTileRows, sizeof(float), kMinBlockedRowsAvx512, s.blocking, kFp32XBlocks);
  // Accumulators kept between spans: a block's whole tiles (at most kMaxBlockRows rows),
  // then one tail tile.
  alignas(64) __m512 saved[(kMaxBlockRows / kTileRows + 1) * kTileW * kPairs];
  for (int64_t m0 = 0; m0 < a.rows; m0 += blocking.x_rows) {
    const int64_t m1 = std::min(a.rows, m0 + blocking.x_rows);
    int64_t j = j0;
    for (; j + kTileW <= j1; j += kTileW) x_block<T, kTileW>(a, s, j, m0, m1, blocking, saved);
    for (; j < j1; ++j) x_block<T, 1>(a, s, j, m0, m1, blocking, saved);
  }
}

}  // namespace

void small_matmul_columns_avx512_f32(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j0, int64_t j1) {
  switch (a.w_type) {
    case ElemType::F32: return columns<ElemType::F32>(a, s, j0, j1);
    case ElemType::F16: return columns<ElemType::F16>(a, s, j0, j1);
    case ElemType::BF16: return columns<ElemType::BF16>(a, s, j0, j1);
  }
}

}  // namespace tiergen::kernels::detail
#endif  // __x86_64__
