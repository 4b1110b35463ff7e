// AVX-512 BF16 kernel of small_matmul() for bf16 weights times bf16 activations:
// vdpbf16ps multiplies 32 bf16 pairs (exact products) and adds them into 16 fp32
// lanes, so no conversion instructions sit between the loads and the multiply-adds.
// Tiles of 6 W rows x 4 x rows keep 24 accumulators in flight (29 of the 32 zmm
// registers), the W tile in L1 while the x rows stream from L2; a chunk's last 4 W rows,
// and fewer than 4 rows of x, go in tiles of 4 W rows; one row of x (decode at batch 1)
// takes one W row at a time
// (row_sequential.h). The k tail is a masked load (zeros add nothing), so every element's
// order is: lanes over k in steps of 32, then the lanes summed pairwise. Like the
// instruction, results treat bf16 subnormal inputs as zero.
#if defined(__x86_64__)
#include <immintrin.h>

#include "kernels/cpu/simd_avx512_bf16.h"
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

TG_AVX512_BF16 inline __m512bh load32(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }

TG_AVX512_BF16 inline __m512bh load_tail(const uint16_t* p, __mmask32 mask) {
  return (__m512bh)_mm512_maskz_loadu_epi16(mask, p);
}

// `next` (or null): a row of the next W tile, brought into L1 a line per step.
template <int R, int C>
TG_AVX512_BF16 void tile(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j, int64_t m,
                         const uint16_t* next) {
  const int64_t k = a.k, k32 = k & ~int64_t(31);
  const uint16_t* w[R];
  const uint16_t* x[C];
  for (int r = 0; r < R; ++r) w[r] = static_cast<const uint16_t*>(a.w) + (j + r) * k;
  for (int c = 0; c < C; ++c) x[c] = s.x_bf16 + (m + c) * s.x_row_stride;

  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k32; p += 32) {
    if (next) _mm_prefetch(reinterpret_cast<const char*>(next + p), _MM_HINT_T0);
    __m512bh xv[C];
    for (int c = 0; c < C; ++c) xv[c] = load32(x[c] + p);
    for (int r = 0; r < R; ++r) {
      const __m512bh wv = load32(w[r] + p);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], wv, xv[c]);
    }
  }
  if (k32 < k) {
    const __mmask32 mask = __mmask32((uint64_t(1) << (k - k32)) - 1);
    __m512bh xv[C];
    for (int c = 0; c < C; ++c) xv[c] = load_tail(x[c] + k32, mask);
    for (int r = 0; r < R; ++r) {
      const __m512bh wv = load_tail(w[r] + k32, mask);
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

// With several tiles of x, each tile's pass over the W rows also prefetches one row of
// the next W rows (pass i, row i mod R; at 16 rows of x four of them): the first pass over
// a W tile otherwise waits on memory, and a throwaway copy of this loop ran 0.7 dot
// products per cycle with W streaming from memory against 1.7 with W in L2
// (bench/RESULTS.md, the Zen 5 section).
template <int R>
TG_AVX512_BF16 void all_rows(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j) {
  const bool prefetch = a.rows >= 2 * kTileX && j + 2 * R <= a.n;
  int64_t m = 0;
  for (int pass = 0; m + kTileX <= a.rows; m += kTileX, ++pass) {
    const uint16_t* next_row = prefetch ? static_cast<const uint16_t*>(a.w) + (j + R + pass % R) * a.k : nullptr;
    tile<R, kTileX>(a, s, j, m, next_row);
  }
  for (; m < a.rows; ++m) tile<R, 1>(a, s, j, m, nullptr);
}

}  // namespace

void small_matmul_columns_avx512_bf16(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j0,
                                      int64_t j1) {
  int64_t j = j0;
  // One row of x: one W row at a time, W read front to back (kRowSequentialMaxRows).
  if (a.rows > kRowSequentialMaxRows) {
    if (a.rows >= kTileX) {
      for (; j + kTileWMany <= j1; j += kTileWMany) all_rows<kTileWMany>(a, s, j);
    }
    for (; j + kTileW <= j1; j += kTileW) all_rows<kTileW>(a, s, j);
  }
  for (; j < j1; ++j) all_rows<1>(a, s, j);
}

}  // namespace tiergen::kernels::detail
#endif  // __x86_64__
