#pragma once
// What the AMX kernels share (Sapphire Rapids and later): the tile configuration of a
// bf16 product (C: 16 rows x 16 fp32; A: 16 rows x 32 bf16; B: 16 pairs of k x 16
// columns x 2 bf16) and x packed into B tiles. Callers must be TG_AMX functions, run
// only where use_amx_kernels() (cpu_features.h) says so.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>
#include <vector>

#define TG_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16,f16c")))

namespace tiergen::kernels::detail::amx {

constexpr int64_t kTileRows = 16;                    // W rows per tile, x rows per block
constexpr int64_t kStepK = 32;                       // elements of k per tile step
constexpr int64_t kPackedStep = kTileRows * kStepK;  // bf16 per packed B tile

// Tiles 0 (C), 1 (A) and 2 (B), each 16 rows of 64 bytes. The tile intrinsics take
// the register number as a literal.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

inline TileConfig bf16_tile_config() {
  TileConfig c;
  for (int t = 0; t < 3; ++t) {
    c.rows[t] = kTileRows;
    c.colsb[t] = 64;
  }
  return c;
}

inline int64_t k_steps(int64_t k) { return (k + kStepK - 1) / kStepK; }
inline int64_t x_blocks(int64_t rows) { return (rows + kTileRows - 1) / kTileRows; }

// x [rows, k] bf16 (row stride `stride`) as B tiles: [block][step][pair kk][x row n][2]
// holds x[block * 16 + n][step * 32 + 2 kk + (0, 1)], zero past the last row and past k,
// so every block runs the same steps in the same order whatever the row count.
inline std::vector<uint16_t> pack_rows(const uint16_t* x, int64_t rows, int64_t k, int64_t stride) {
  const int64_t steps = k_steps(k);
  std::vector<uint16_t> packed(size_t(x_blocks(rows) * steps * kPackedStep), 0);
  for (int64_t m = 0; m < rows; ++m) {
    const uint16_t* row = x + m * stride;
    uint16_t* block = packed.data() + (m / kTileRows) * steps * kPackedStep + (m % kTileRows) * 2;
    for (int64_t p = 0; p < k; ++p) {
      const int64_t step = p / kStepK, kk = (p % kStepK) / 2;
      block[step * kPackedStep + kk * 2 * kTileRows + (p & 1)] = row[p];
    }
  }
  return packed;
}

}  // namespace tiergen::kernels::detail::amx
#endif  // __x86_64__
