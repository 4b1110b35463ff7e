// AVX2/FMA kernel of small_matmul(). A tile is R rows of W (output columns) x C rows
// of x: each step over k loads eight elements of each W row once, converts them to
// fp32 in registers, and feeds R*C independent FMA chains, so W streams from memory
// once per call while the few rows of x stay in cache. Tiles of 4 x 2 keep eight
// chains in flight (enough to hide FMA latency) within the sixteen ymm registers.
#if defined(__x86_64__)
#include "kernels/cpu/half.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/small_matmul_impl.h"

namespace tiergen::kernels::detail {
namespace {

constexpr int kTileW = 4;  // rows of W per tile
constexpr int kTileX = 2;  // rows of x per tile

template <ElemType T>
TG_AVX2 inline __m256 load_w8(const void* row, int64_t p) {
  if constexpr (T == ElemType::F32) {
    return avx2::load8_f32(static_cast<const float*>(row) + p);
  } else if constexpr (T == ElemType::F16) {
    return avx2::load8_f16(static_cast<const uint16_t*>(row) + p);
  } else {
    return avx2::load8_bf16(static_cast<const uint16_t*>(row) + p);
  }
}

template <ElemType T>
inline float w_at(const void* row, int64_t p) {
  if constexpr (T == ElemType::F32) {
    return static_cast<const float*>(row)[p];
  } else if constexpr (T == ElemType::F16) {
    return half_to_float(static_cast<const uint16_t*>(row)[p]);
  } else {
    return bf16_to_float(static_cast<const uint16_t*>(row)[p]);
  }
}

// y[m + c][j + r] for r < R, c < C. The per-element order (lanes over k in steps of 8,
// hsum, then the tail in k order) is the same for every R and C.
template <ElemType T, int R, int C>
TG_AVX2 void tile(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j, int64_t m) {
  const int64_t k = a.k, k8 = k & ~int64_t(7);
  const int64_t w_row_bytes = k * elem_size(T);
  const void* w[R];
  const float* x[C];
  for (int r = 0; r < R; ++r) w[r] = static_cast<const uint8_t*>(a.w) + (j + r) * w_row_bytes;
  for (int c = 0; c < C; ++c) x[c] = s.x_f32 + (m + c) * s.x_row_stride;

  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  for (int64_t p = 0; p < k8; p += 8) {
    __m256 xv[C];
    for (int c = 0; c < C; ++c) xv[c] = _mm256_loadu_ps(x[c] + p);
    for (int r = 0; r < R; ++r) {
      const __m256 wv = load_w8<T>(w[r], p);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(wv, xv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float sum = avx2::hsum(acc[r][c]);
      for (int64_t p = k8; p < k; ++p) sum += w_at<T>(w[r], p) * x[c][p];
      if (a.bias) sum += a.bias[j + r];
      a.y[(m + c) * s.y_row_stride + j + r] = sum;
    }
  }
}

template <ElemType T, int R>
TG_AVX2 void all_rows(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j) {
  int64_t m = 0;
  for (; m + kTileX <= a.rows; m += kTileX) tile<T, R, kTileX>(a, s, j, m);
  for (; m < a.rows; ++m) tile<T, R, 1>(a, s, j, m);
}

template <ElemType T>
TG_AVX2 void columns(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j0, int64_t j1) {
  int64_t j = j0;
  for (; j + kTileW <= j1; j += kTileW) all_rows<T, kTileW>(a, s, j);
  for (; j < j1; ++j) all_rows<T, 1>(a, s, j);
}

}  // namespace

void small_matmul_columns_avx2(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j0, int64_t j1) {
  switch (a.w_type) {
    case ElemType::F32: return columns<ElemType::F32>(a, s, j0, j1);
    case ElemType::F16: return columns<ElemType::F16>(a, s, j0, j1);
    case ElemType::BF16: return columns<ElemType::BF16>(a, s, j0, j1);
  }
}

}  // namespace tiergen::kernels::detail
#endif  // __x86_64__
