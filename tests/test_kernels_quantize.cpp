// Group-wise quantization: the pinned byte format, the error bound, fp16/bf16 helpers,
// and agreement of the portable and AVX2 kernels.
#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/quantize.h"
#include "tiergen/common/error.h"

namespace tiergen::kernels {
namespace {

struct Quantized {
  QuantizedLayout layout;
  std::vector<uint8_t> packed;
  std::vector<uint16_t> mins, scales;
};

Quantized run_quantize(const void* src, ElemType type, int64_t rows, int64_t cols, QuantFormat f) {
  Quantized q;
  q.layout = quantized_layout(rows, cols, f);
  q.packed.assign(q.layout.packed_bytes(), 0xAB);  // padding must be overwritten with 0
  q.mins.assign(q.layout.meta_elems(), 0);
  q.scales.assign(q.layout.meta_elems(), 0);
  quantize(src, type, rows, cols, f, q.packed.data(), q.mins.data(), q.scales.data());
  return q;
}

// Source data stored as `type`, plus the same values as floats.
struct Matrix {
  std::vector<float> values;
  std::vector<uint8_t> bytes;
};

Matrix random_matrix(ElemType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  Matrix m;
  m.values.resize(rows * cols);
  m.bytes.resize(rows * cols * elem_size(type));
  for (int64_t r = 0; r < rows; ++r) {
    // Rows of very different magnitudes and offsets, as in real K/V and weights.
    const float mag = std::pow(10.0f, uni(rng) * 3.0f);
    const float offset = (r % 3 == 0) ? uni(rng) * 100.0f : 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      float v = std::clamp(offset + normal(rng) * mag, -60000.0f, 60000.0f);
      if (type == ElemType::F16) {
        const uint16_t h = float_to_half(v);
        std::memcpy(&m.bytes[(r * cols + c) * 2], &h, 2);
        v = half_to_float(h);
      } else if (type == ElemType::BF16) {
        uint16_t b = float_to_bf16(v);
        if (std::fabs(bf16_to_float(b)) > kHalfMax) b = float_to_bf16(0.0f);
        std::memcpy(&m.bytes[(r * cols + c) * 2], &b, 2);
        v = bf16_to_float(b);
      } else {
        std::memcpy(&m.bytes[(r * cols + c) * 4], &v, 4);
      }
      m.values[r * cols + c] = v;
    }
  }
  return m;
}

float read_elem(const std::vector<uint8_t>& bytes, ElemType type, int64_t i) {
  if (type == ElemType::F32) {
    float f;
    std::memcpy(&f, &bytes[i * 4], 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, &bytes[i * 2], 2);
  return type == ElemType::F16 ? half_to_float(h) : bf16_to_float(h);
}

TEST(KernelsHalf, HalfToFloatMatchesC10ForAllPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float ours = half_to_float(uint16_t(h));
    const float ref = static_cast<float>(c10::Half(uint16_t(h), c10::Half::from_bits()));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(ours)) << h;
    } else {
      EXPECT_EQ(float_to_bits(ours), float_to_bits(ref)) << h;
    }
  }
}

TEST(KernelsHalf, FloatToHalfAndBf16RoundToNearestEven) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    // Random bit patterns cover subnormals, overflow, ties and NaN.
    uint32_t u = rng();
    if (i % 2) u = (u & 0x8FFFFFFFu) | 0x30000000u;  // bias toward the fp16 range
    const float f = bits_to_float(u);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f))));
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f))));
      continue;
    }
    ASSERT_EQ(float_to_half(f), c10::Half(f).x) << f;
    ASSERT_EQ(float_to_bf16(f), c10::BFloat16(f).x) << f;
  }
}

TEST(KernelsHalf, DirectedRoundingBracketsTheValue) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> exponent(-30.0f, 16.0f);
  for (int i = 0; i < 100000; ++i) {
    const float x = (i % 2 ? -1.0f : 1.0f) * std::pow(2.0f, exponent(rng));
    if (std::fabs(x) > kHalfMax) continue;
    const uint16_t down = float_to_half_down(x), up = float_to_half_up(x);
    ASSERT_LE(half_to_float(down), x);
    ASSERT_GE(half_to_float(up), x);
    if (half_to_float(down) == x) {
      ASSERT_EQ(half_to_float(up), x);
    } else {
      ASSERT_EQ(half_to_float(half_next_up(down)), half_to_float(up)) << x;
    }
  }
  EXPECT_EQ(float_to_half_down(0.1f), 0x2E66);  // 0.0999755859375
  EXPECT_EQ(float_to_half_up(0.1f), 0x2E67);    // 0.100036621
  EXPECT_EQ(float_to_half_up(70000.0f), 0x7C00);
  EXPECT_EQ(float_to_half_down(70000.0f), 0x7BFF);
}

TEST(KernelsQuantize, LayoutSizes) {
  const QuantizedLayout l = quantized_layout(10, 130, {4, 64});
  EXPECT_EQ(l.groups_per_row, 3);
  EXPECT_EQ(l.packed_bytes_per_row, 96);
  EXPECT_EQ(l.packed_bytes(), 960);
  EXPECT_EQ(l.meta_elems(), 30);
  EXPECT_EQ(l.total_bytes(), 960 + 2 * 30 * 2);
  EXPECT_EQ(quantized_layout(2, 128, {8, 64}).packed_bytes_per_row, 128);
}

// Hand-computed: g = 4, 4 bits.
//  row 0 group 0: [0, 1, 2, 15]   min 0, scale 15/15 = 1     -> levels 0 1 2 15  -> 0x10 0xF2
//  row 0 group 1: [-1, .5, 2, 6.5] min -1, scale 7.5/15 = .5 -> levels 0 3 6 15  -> 0x30 0xF6
//  row 1 group 0: [0.1 x4]  min = fp16 below 0.1 = 0x2E66 (0.0999755859375);
//      span/15 = 1.6277e-6 = 27.3 fp16 subnormal steps, rounded up to 28 -> 0x001C;
//      (0.1 - min)/scale = 14.63 -> level 15 for all                  -> 0xFF 0xFF
//  row 1 group 1: partial [3, -3]: min -3 (0xC200); 6/15 = 0.4 rounded up to fp16
//      0x3667 (0.400146484); levels 15 (low nibble), 0 (high), padding -> 0x0F 0x00
TEST(KernelsQuantize, PinnedFourBitLayout) {
  const float row0[8] = {0, 1, 2, 15, -1, 0.5f, 2, 6.5f};
  Quantized q = run_quantize(row0, ElemType::F32, 1, 8, {4, 4});
  EXPECT_EQ(q.packed, (std::vector<uint8_t>{0x10, 0xF2, 0x30, 0xF6}));
  EXPECT_EQ(q.mins, (std::vector<uint16_t>{0x0000, 0xBC00}));
  EXPECT_EQ(q.scales, (std::vector<uint16_t>{0x3C00, 0x3800}));

  const float row1[6] = {0.1f, 0.1f, 0.1f, 0.1f, 3, -3};
  q = run_quantize(row1, ElemType::F32, 1, 6, {4, 4});
  EXPECT_EQ(q.packed, (std::vector<uint8_t>{0xFF, 0xFF, 0x0F, 0x00}));
  EXPECT_EQ(q.mins, (std::vector<uint16_t>{0x2E66, 0xC200}));
  EXPECT_EQ(q.scales, (std::vector<uint16_t>{0x001C, 0x3667}));

  float back[6];
  dequantize(q.packed.data(), q.mins.data(), q.scales.data(), 1, 6, {4, 4}, back, ElemType::F32);
  EXPECT_EQ(back[4], -3.0f + 15 * half_to_float(0x3667));
  EXPECT_EQ(back[5], -3.0f);
}

TEST(KernelsQuantize, PinnedEightBitLayout) {
  const float x[4] = {0, 255, 1, 2};
  const Quantized q = run_quantize(x, ElemType::F32, 1, 4, {8, 4});
  EXPECT_EQ(q.packed, (std::vector<uint8_t>{0x00, 0xFF, 0x01, 0x02}));
  EXPECT_EQ(q.mins, (std::vector<uint16_t>{0x0000}));
  EXPECT_EQ(q.scales, (std::vector<uint16_t>{0x3C00}));
}

TEST(KernelsQuantize, ConstantGroupsHaveZeroScale) {
  std::vector<uint16_t> x(100, float_to_half(-3.5f));
  for (int bits : {4, 8}) {
    const Quantized q = run_quantize(x.data(), ElemType::F16, 2, 50, {bits, 16});
    for (uint16_t s : q.scales) EXPECT_EQ(s, 0);
    for (uint16_t m : q.mins) EXPECT_EQ(m, float_to_half(-3.5f));
    for (uint8_t b : q.packed) EXPECT_EQ(b, 0);
    std::vector<uint16_t> back(100);
    dequantize(q.packed.data(), q.mins.data(), q.scales.data(), 2, 50, {bits, 16}, back.data(), ElemType::F16);
    EXPECT_EQ(back, x);
  }
}

// Every element comes back within half a step (the stored fp16 scale) of its group,
// up to fp32 rounding of min + q*scale and of the division that picks q (~3e-5 steps),
// plus half an ulp of the output type.
TEST(KernelsQuantize, RoundTripWithinHalfAStep) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1}, {3, 7}, {5, 64}, {7, 130}, {64, 200}, {33, 1000}};
  for (ElemType type : {ElemType::F32, ElemType::F16, ElemType::BF16}) {
    for (int bits : {4, 8}) {
      for (int g : {2, 6, 32, 64, 128}) {
        for (auto [rows, cols] : shapes) {
          SCOPED_TRACE(testing::Message() << elem_type_name(type) << " bits " << bits << " g " << g
                                          << " shape " << rows << "x" << cols);
          const Matrix m = random_matrix(type, rows, cols, uint32_t(rows * 131 + cols + g + bits));
          const QuantFormat f{bits, g};
          const Quantized q = run_quantize(m.bytes.data(), type, rows, cols, f);
          std::vector<uint8_t> back(m.bytes.size());
          dequantize(q.packed.data(), q.mins.data(), q.scales.data(), rows, cols, f, back.data(), type);
          const double out_ulp = type == ElemType::F32 ? 0 : type == ElemType::F16 ? 0x1p-11 : 0x1p-8;
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < cols; ++c) {
              const int64_t i = r * cols + c;
              const double scale = half_to_float(q.scales[r * q.layout.groups_per_row + c / g]);
              const double x = m.values[i], y = read_elem(back, type, i);
              const double tol = scale * (0.5 + 4e-5) + std::fabs(x) * 0x1p-23 + std::fabs(y) * out_ulp + 0x1p-25;
              ASSERT_LE(std::fabs(y - x), tol) << "row " << r << " col " << c;
            }
          }
          // Padding levels of a partial last group are zero.
          const int64_t last = (q.layout.groups_per_row - 1) * g * bits / 8;
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t e = cols - (q.layout.groups_per_row - 1) * g; e < g; ++e) {
              const uint8_t b = q.packed[r * q.layout.packed_bytes_per_row + last + e * bits / 8];
              const int level = bits == 8 ? b : (e % 2 ? b >> 4 : b & 0xF);
              ASSERT_EQ(level, 0) << "padding element " << e << " of row " << r;
            }
          }
        }
      }
    }
  }
}

TEST(KernelsQuantize, PortableAndAvx2KernelsWriteIdenticalBytes) {
  if (!use_avx2_kernels()) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C; only the portable kernels run";
  for (ElemType type : {ElemType::F32, ElemType::F16, ElemType::BF16}) {
    for (int bits : {4, 8}) {
      for (int g : {4, 20, 64}) {
        const int64_t rows = 37, cols = 203;
        const Matrix m = random_matrix(type, rows, cols, uint32_t(bits * 100 + g));
        const QuantFormat f{bits, g};
        const Quantized simd = run_quantize(m.bytes.data(), type, rows, cols, f);
        std::vector<uint8_t> back_simd(m.bytes.size()), back_plain(m.bytes.size());
        dequantize(simd.packed.data(), simd.mins.data(), simd.scales.data(), rows, cols, f, back_simd.data(), type);
        set_avx2_kernels_enabled(false);
        const Quantized plain = run_quantize(m.bytes.data(), type, rows, cols, f);
        dequantize(simd.packed.data(), simd.mins.data(), simd.scales.data(), rows, cols, f, back_plain.data(), type);
        set_avx2_kernels_enabled(true);
        EXPECT_EQ(simd.packed, plain.packed);
        EXPECT_EQ(simd.mins, plain.mins);
        EXPECT_EQ(simd.scales, plain.scales);
        EXPECT_EQ(back_simd, back_plain);
      }
    }
  }
}

// Dequantizing writes the same bytes on every kernel path this CPU has: the portable
// row, the AVX2 row (4-bit into bf16 or fp16 by lookup, 16 levels a step: groups of 20
// leave it a tail of 4, groups of 4 are all tail) and the AVX-512 BF16 row (4-bit into
// any of the three, 32 levels a step; groups of 48 leave it a tail of 16, rows of 203
// one of 11).
TEST(KernelsQuantize, EveryDequantizePathWritesTheSameBytes) {
  if (!use_avx2_kernels()) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C; only the portable kernels run";
  const bool avx512 = use_avx512_bf16_kernels();
  for (ElemType type : {ElemType::F32, ElemType::F16, ElemType::BF16}) {
    for (int bits : {4, 8}) {
      for (int g : {4, 20, 48, 64, 96}) {
        const int64_t rows = 29, cols = 203;
        const Matrix m = random_matrix(type, rows, cols, uint32_t(bits * 1000 + g));
        const QuantFormat f{bits, g};
        const Quantized q = run_quantize(m.bytes.data(), type, rows, cols, f);
        const auto dequantized = [&](bool avx2_on, bool avx512_on) {
          set_avx2_kernels_enabled(avx2_on);
          set_avx512_bf16_kernels_enabled(avx512_on);
          std::vector<uint8_t> out(m.bytes.size());
          dequantize(q.packed.data(), q.mins.data(), q.scales.data(), rows, cols, f, out.data(), type);
          set_avx2_kernels_enabled(true);
          set_avx512_bf16_kernels_enabled(true);
          return out;
        };
        const std::vector<uint8_t> plain = dequantized(false, false);
        EXPECT_EQ(dequantized(true, false), plain) << "avx2, bits " << bits << " group " << g;
        if (avx512) EXPECT_EQ(dequantized(true, true), plain) << "avx512-bf16, bits " << bits << " group " << g;
      }
    }
  }
  // Groups at the edges of the format: ranges so small the fp16 scale is subnormal,
  // constant groups (scale 0), values up to fp16's largest, and large offsets with tiny
  // spreads; dequantized into each type.
  std::mt19937 rng(77);
  std::normal_distribution<float> normal;
  const int64_t rows = 16, cols = 160;
  std::vector<float> edges(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float& v = edges[r * cols + c];
      switch (r % 4) {
        case 0: v = normal(rng) * 1e-6f; break;
        case 1: v = r % 8 == 1 ? 3.5f : -0.0f; break;
        case 2: v = std::clamp(normal(rng) * 40000.0f, -65504.0f, 65504.0f); break;
        default: v = 1000.0f + normal(rng) * 1e-3f; break;
      }
    }
  }
  for (int bits : {4, 8}) {
    const QuantFormat f{bits, 32};
    const Quantized q = run_quantize(edges.data(), ElemType::F32, rows, cols, f);
    for (ElemType type : {ElemType::F32, ElemType::F16, ElemType::BF16}) {
      const auto dequantized = [&](bool avx2_on, bool avx512_on) {
        set_avx2_kernels_enabled(avx2_on);
        set_avx512_bf16_kernels_enabled(avx512_on);
        std::vector<uint8_t> out(size_t(rows * cols) * elem_size(type));
        dequantize(q.packed.data(), q.mins.data(), q.scales.data(), rows, cols, f, out.data(), type);
        set_avx2_kernels_enabled(true);
        set_avx512_bf16_kernels_enabled(true);
        return out;
      };
      const std::vector<uint8_t> plain = dequantized(false, false);
      EXPECT_EQ(dequantized(true, false), plain) << "avx2, edges, bits " << bits;
      if (avx512) EXPECT_EQ(dequantized(true, true), plain) << "avx512-bf16, edges, bits " << bits;
    }
  }
  if (!avx512) GTEST_SKIP() << "no AVX-512 BF16 kernels on this CPU (or TIERGEN_CPU_ISA caps them): AVX2 checked";
}

TEST(KernelsQuantize, StridedRowsMatchDenseRows) {
  // Rows 0, 3, 6 of a padded destination, as when writing one token into a KV cache.
  const int64_t rows = 3, cols = 128, stride_rows = 3;
  const QuantFormat f{4, 64};
  const Matrix m = random_matrix(ElemType::F32, rows, cols, 5);
  const Quantized dense = run_quantize(m.bytes.data(), ElemType::F32, rows, cols, f);
  const QuantizedLayout l = quantized_layout(rows * stride_rows, cols, f);
  std::vector<uint8_t> packed(l.packed_bytes());
  std::vector<uint16_t> mins(l.meta_elems()), scales(l.meta_elems());
  quantize_strided(m.bytes.data(), ElemType::F32, cols, rows, cols, f,
                   {packed.data(), mins.data(), scales.data(), l.packed_bytes_per_row * stride_rows,
                    l.groups_per_row * stride_rows});
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < l.packed_bytes_per_row; ++b) {
      ASSERT_EQ(packed[r * stride_rows * l.packed_bytes_per_row + b], dense.packed[r * l.packed_bytes_per_row + b]);
    }
    for (int64_t k = 0; k < l.groups_per_row; ++k) {
      EXPECT_EQ(mins[r * stride_rows * l.groups_per_row + k], dense.mins[r * l.groups_per_row + k]);
      EXPECT_EQ(scales[r * stride_rows * l.groups_per_row + k], dense.scales[r * l.groups_per_row + k]);
    }
  }
  std::vector<float> back(rows * cols);
  dequantize_strided({packed.data(), mins.data(), scales.data(), l.packed_bytes_per_row * stride_rows,
                      l.groups_per_row * stride_rows},
                     rows, cols, f, back.data(), ElemType::F32, cols);
  std::vector<float> back_dense(rows * cols);
  dequantize(dense.packed.data(), dense.mins.data(), dense.scales.data(), rows, cols, f, back_dense.data(), ElemType::F32);
  EXPECT_EQ(back, back_dense);
}

TEST(KernelsQuantize, BadArgumentsAreErrors) {
  std::vector<float> x(64, 1.0f);
  std::vector<uint8_t> p(64);
  std::vector<uint16_t> mins(64), scales(64);
  EXPECT_THROW(quantized_layout(1, 64, {3, 64}), Error);
  EXPECT_THROW(quantized_layout(1, 64, {4, 0}), Error);
  EXPECT_THROW(quantized_layout(1, 64, {4, 5}), Error);  // odd 4-bit groups cannot be packed
  EXPECT_THROW(quantized_layout(-1, 64, {4, 64}), Error);
  EXPECT_THROW(quantize(x.data(), ElemType::F32, 1, 64, {3, 64}, p.data(), mins.data(), scales.data()), Error);
  EXPECT_THROW(dequantize(p.data(), mins.data(), scales.data(), 1, 64, {4, 0}, x.data(), ElemType::F32), Error);
  EXPECT_THROW(quantize(nullptr, ElemType::F32, 1, 64, {4, 64}, p.data(), mins.data(), scales.data()), Error);
  EXPECT_NO_THROW(quantized_layout(1, 64, {8, 5}));
}

TEST(KernelsQuantize, NonFiniteOrOutOfRangeInputIsAnError) {
  for (float badv : {NAN, INFINITY, -INFINITY, 1e6f}) {
    std::vector<float> x(4 * 100, 0.5f);
    x[2 * 100 + 37] = badv;
    x[3 * 100 + 5] = badv;
    std::vector<uint8_t> p(4 * 100);
    std::vector<uint16_t> mins(4 * 2), scales(4 * 2);
    try {
      quantize(x.data(), ElemType::F32, 4, 100, {4, 64}, p.data(), mins.data(), scales.data());
      ADD_FAILURE() << "no error for " << badv;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("row 2, column 37"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tiergen::kernels
