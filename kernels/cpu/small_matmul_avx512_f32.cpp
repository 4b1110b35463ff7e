// AVX-512 kernel of small_matmul() for fp32 x (fp32, fp16 or bf16 weights), on CPUs at
// the avx512-bf16 level and above. Each output element sums in sixteen lanes over k in
// steps of sixteen (lane l holds the elements p = l mod 16 in k order), the lanes are
// added pairwise (avx512::lane_sum), then the k tail in k order, then the bias: the
// same order at every row count, tile, span and thread, so a row's result never
// depends on the rows around it.
//
// Why sixteen lanes and not the AVX2 kernel's eight: one row of x (decode at batch 1)
// then reads one W row at a time front to back, one stream the hardware prefetchers
// follow, with one 16-lane FMA chain per W row. The AVX2 order needs either one 8-lane
// chain per W row (bound by the FMA's latency) or tiles of several W rows read side by
// side (several streams a row apart, which these hosts' prefetchers follow more slowly;
// row_sequential.h). So fp32 results on a CPU at this level differ in their last bits
// from the AVX2 kernel's (as the AVX2 kernel's differ from the portable one's); each
// level is checked against the exact product.
//
// More rows: tiles of kTileW W rows x kTileX x rows (16 accumulators, 4 x vectors and
// one W vector of the 32 registers), cache-blocked as in the AVX2 kernel
// (small_matmul_blocking.h).
#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/elements.h"
#include "kernels/cpu/simd_avx512_bf16.h"
#include "kernels/cpu/small_matmul_blocking.h"
#include "kernels/cpu/small_matmul_impl.h"

// avx512::lane_sum's target and the conversions' (avx2, fma, f16c): the kernel runs only
// where use_avx512_bf16_kernels() holds.
#define TG_AVX512_F32 __attribute__((target("avx512f,avx512bw,avx512bf16,avx2,fma,f16c")))

namespace tiergen::kernels::detail {
namespace {

constexpr int kTileW = 4;    // rows of W per tile
constexpr int kTileX = 4;    // rows of x per tile
constexpr int kLanes = 16;   // fp32 elements of k per step

// Sixteen elements of a W row from element p, widened to fp32.
template <ElemType T>
TG_AVX512_F32 inline __m512 load16(const void* row, int64_t p) {
  if constexpr (T == ElemType::F32) {
    return _mm512_loadu_ps(static_cast<const float*>(row) + p);
  } else {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(row) + p));
    if constexpr (T == ElemType::F16) {
      return _mm512_maskz_cvtph_ps(__mmask16(0xFFFF), bits);
    } else {
      // (Zero-masked forms throughout: GCC 12's plain ones trip -Wmaybe-uninitialized.)
      const __mmask16 all = 0xFFFF;
      return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, _mm512_maskz_cvtepu16_epi32(all, bits), 16));
    }
  }
}

// y[m + c][j + r] for r < R, c < C, over the span `span` of k (its start and end
// multiples of 16, within k rounded down to 16). The accumulators start at zero on the
// span at k = 0 and from `saved` on a later one; a span that does not end the sums
// leaves them in `saved`; the one that does adds the lanes (avx512::lane_sum), then the
// k tail in k order (one explicit FMA per element, as the AVX2 kernel does), then the
// bias.
template <ElemType T, int R, int C>
TG_AVX512_F32 void tile(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j, int64_t m, KSpan span,
                        __m512* saved) {
  const int64_t k = a.k;
  const int64_t w_row_bytes = k * elem_size(T);
  const void* w[R];
  const float* x[C];
  for (int r = 0; r < R; ++r) w[r] = static_cast<const uint8_t*>(a.w) + (j + r) * w_row_bytes;
  for (int c = 0; c < C; ++c) x[c] = s.x_f32 + (m + c) * s.x_row_stride;

  // The loops over R and C unrolled explicitly, so that the accumulators stay in
  // registers (as in the AVX-512 BF16 kernels).
  __m512 acc[R][C];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r][c] = span.begin == 0 ? _mm512_setzero_ps() : saved[r * C + c];
  for (int64_t p = span.begin; p < span.end; p += kLanes) {
    __m512 xv[C];
    #pragma GCC unroll 16
    for (int c = 0; c < C; ++c) xv[c] = _mm512_loadu_ps(x[c] + p);
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 wv = load16<T>(w[r], p);
      #pragma GCC unroll 16
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(wv, xv[c], acc[r][c]);
    }
  }
  if (!span.last) {
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
      #pragma GCC unroll 16
      for (int c = 0; c < C; ++c) saved[r * C + c] = acc[r][c];
    return;
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float sum = avx512::lane_sum(acc[r][c]);
      for (int64_t p = span.end; p < k; ++p) sum = std::fma(load_element(w[r], T, p), x[c][p], sum);
      if (a.bias) sum += a.bias[j + r];
      a.y[(m + c) * s.y_row_stride + j + r] = sum;
    }
  }
}

// W rows [j, j + R) against x rows [m0, m1), span after span of k. `saved` holds
// kTileW * kTileX accumulators per tile of x rows.
template <ElemType T, int R>
TG_AVX512_F32 void x_block(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j, int64_t m0, int64_t m1,
                           const RowBlocking& blocking, __m512* saved) {
  for (KSpan span = blocking.first_span(); ; span = blocking.next_span(span)) {
    __m512* tile_saved = saved;
    // One span (unblocked) keeps nothing between spans: every tile may share `saved`.
    const int64_t saved_stride = span.begin == 0 && span.last ? 0 : kTileW * kTileX;
    int64_t m = m0;
    for (; m + kTileX <= m1; m += kTileX, tile_saved += saved_stride) tile<T, R, kTileX>(a, s, j, m, span, tile_saved);
    for (; m < m1; ++m, tile_saved += saved_stride) tile<T, R, 1>(a, s, j, m, span, tile_saved);
    if (span.last) break;
  }
}

template <ElemType T>
TG_AVX512_F32 void columns(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j0, int64_t j1) {
  const RowBlocking blocking = row_blocking(a.rows, a.k, kLanes, kTileX, sizeof(float), s.blocking);
  alignas(64) __m512 saved[max_tiles_per_block(kTileX) * kTileW * kTileX];
  // One row of x: one W row at a time, W read front to back (row_sequential.h).
  const int64_t tile_w = a.rows <= kRowSequentialMaxRows ? 1 : kTileW;
  for (int64_t m0 = 0; m0 < a.rows; m0 += blocking.x_rows) {
    const int64_t m1 = std::min(a.rows, m0 + blocking.x_rows);
    int64_t j = j0;
    if (tile_w == kTileW) {
      for (; j + kTileW <= j1; j += kTileW) x_block<T, kTileW>(a, s, j, m0, m1, blocking, saved);
    }
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
