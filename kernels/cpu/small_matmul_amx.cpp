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
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/small_matmul_impl.h"

#define TG_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16,f16c")))

namespace tiergen::kernels::detail {
namespace {

constexpr int64_t kTileRows = 16;  // W rows per tile, x rows per block
constexpr int64_t kStepK = 32;     // elements of k per tile step (64 bytes of bf16)
constexpr int64_t kPackedStep = kTileRows * kStepK;  // bf16 per packed B tile

// The tiles: C (tmm0) accumulates W rows x x rows in fp32, A (tmm1) holds W, B (tmm2)
// holds packed x. The tile intrinsics take the register number as a literal.
constexpr int kTilesUsed = 3;

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

TileConfig tile_config() {
  TileConfig c;
  for (int t = 0; t < kTilesUsed; ++t) {
    c.rows[t] = kTileRows;
    c.colsb[t] = 64;  // C: 16 fp32; A: 32 bf16; B: 16 x rows x 2 bf16
  }
  return c;
}

}  // namespace

int64_t amx_k_steps(int64_t k) { return (k + kStepK - 1) / kStepK; }

int64_t amx_x_blocks(int64_t rows) { return (rows + kTileRows - 1) / kTileRows; }

std::vector<uint16_t> pack_x_for_amx(const SmallMatmulArgs& a, const SmallMatmulShape& s) {
  const int64_t steps = amx_k_steps(a.k), blocks = amx_x_blocks(a.rows);
  std::vector<uint16_t> packed(size_t(blocks * steps * kPackedStep), 0);
  // packed[block][step][pair kk][x row n][2] = x[block * 16 + n][step * 32 + 2 kk + (0, 1)]
  for (int64_t m = 0; m < a.rows; ++m) {
    const uint16_t* x = s.x_bf16 + m * s.x_row_stride;
    uint16_t* block = packed.data() + (m / kTileRows) * steps * kPackedStep + (m % kTileRows) * 2;
    for (int64_t p = 0; p < a.k; ++p) {
      const int64_t step = p / kStepK, kk = (p % kStepK) / 2;
      block[step * kPackedStep + kk * 2 * kTileRows + (p & 1)] = x[p];
    }
  }
  return packed;
}

TG_AMX void small_matmul_columns_amx(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j0, int64_t j1) {
  const auto* w = static_cast<const uint16_t*>(a.w);
  const int64_t steps = amx_k_steps(a.k), full_steps = a.k / kStepK, blocks = amx_x_blocks(a.rows);
  const int64_t tail = a.k - full_steps * kStepK;
  const TileConfig config = tile_config();
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
