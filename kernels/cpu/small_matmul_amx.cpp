// AMX kernel of small_matmul() for bf16 weights times bf16 x (Sapphire Rapids and
// later). One tile instruction (tdpbf16ps) multiplies 16 rows of W by 32 of their
// elements against up to 16 rows of x: 8192 exact bf16 products summed in fp32, where
// vdpbf16ps does 32. A decode batch of 16 is then bound by reading W, not by the
// multiply-adds (the AVX-512 BF16 kernel spends 90% of a batch-16 decode computing).
//
// W is read in place: an A tile is 16 consecutive rows of W, 64 bytes each (stride k).
// x is packed once per call into B tiles (pairs of k-adjacent elements per x row, the
// layout tdpbf16ps reads), zero beyond the last row and past k, so every block of 16
// x rows runs the same steps over k in the same order: a row's result does not depend
// on how many rows share its call. The last step of a k that is not a multiple of 32
// reads W from a zero-padded copy; a chunk of fewer than 16 W rows (the matrix's last)
// goes to the AVX-512 BF16 kernel.
#if defined(__x86_64__)
#include <algorithm>
#include <cstring>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/small_matmul_impl.h"

namespace tiergen::kernels::detail {

using amx::kPackedStep;
using amx::kStepK;
using amx::kTileRows;

TG_AMX void small_matmul_columns_amx(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j0, int64_t j1) {
  const auto* w = static_cast<const uint16_t*>(a.w);
  const int64_t steps = amx::k_steps(a.k), full_steps = a.k / kStepK, blocks = amx::x_blocks(a.rows);
  const int64_t tail = a.k - full_steps * kStepK;
  const amx::TileConfig config = amx::bf16_tile_config();
  alignas(64) uint16_t w_tail[kTileRows * kStepK];
  alignas(64) float c[kTileRows * kTileRows];
  int64_t j = j0;
  _tile_loadconfig(&config);
  for (; j + kTileRows <= j1; j += kTileRows) {
    const uint16_t* wj = w + j * a.k;
    if (tail > 0) {
      std::memset(w_tail, 0, sizeof(w_tail));
      for (int64_t r = 0; r < kTileRows; ++r) std::memcpy(w_tail + r * kStepK, wj + r * a.k + full_steps * kStepK, tail * 2);
    }
    for (int64_t block = 0; block < blocks; ++block) {
      const uint16_t* xb = s.x_amx + block * steps * kPackedStep;
      _tile_zero(0);
      for (int64_t step = 0; step < full_steps; ++step) {
        _tile_loadd(1, wj + step * kStepK, a.k * 2);
        _tile_loadd(2, xb + step * kPackedStep, 64);
        _tile_dpbf16ps(0, 1, 2);
      }
      if (tail > 0) {
        _tile_loadd(1, w_tail, 64);
        _tile_loadd(2, xb + full_steps * kPackedStep, 64);
        _tile_dpbf16ps(0, 1, 2);
      }
      _tile_stored(0, c, 64);
      const int64_t rows = std::min(kTileRows, a.rows - block * kTileRows);
      for (int64_t m = 0; m < rows; ++m) {
        float* y = a.y + (block * kTileRows + m) * s.y_row_stride + j;
        for (int64_t i = 0; i < kTileRows; ++i) y[i] = a.bias ? c[i * kTileRows + m] + a.bias[j + i] : c[i * kTileRows + m];
      }
    }
  }
  _tile_release();
  if (j < j1) small_matmul_columns_avx512_bf16(a, s, j, j1);
}

}  // namespace tiergen::kernels::detail
#endif  // __x86_64__
