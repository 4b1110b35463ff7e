// quantized_matmul (kernels/cpu/quantized_matmul): 4- and 8-bit group-wise weights
// multiplied in place, against a double-precision product with the dequantized
// weights, for the portable and the AVX2 kernel, partial last groups and group sizes
// the AVX2 kernel does not take; the AVX-512 BF16 and AMX kernels for x holding bf16
// values; per-row results independent of the batch and threads; x's preparation (its
// groups' sums in k's order, the nibble-split slots) and the split of columns between
// threads.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/column_chunks.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/quantized_matmul.h"
#include "kernels/cpu/quantized_matmul_impl.h"
#include "tiergen/common/error.h"

namespace tiergen::kernels {
namespace {

struct Problem {
  std::vector<float> x, dequantized, bias, y;
  std::vector<uint16_t> x_bf16;
  std::vector<uint8_t> packed;
  std::vector<uint16_t> mins, scales;
  QuantizedMatmulArgs args;
};

Problem make_problem(int64_t rows, int64_t k, int64_t n, QuantFormat f, uint32_t seed, bool bias) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  Problem p;
  std::vector<float> w(size_t(n * k));
  for (float& v : w) v = normal(rng);
  p.x.resize(size_t(rows * k));
  for (float& v : p.x) v = normal(rng);
  if (bias) p.bias.assign(size_t(n), 0.5f);
  const QuantizedLayout l = quantized_layout(n, k, f);
  p.packed.resize(size_t(l.packed_bytes()));
  p.mins.resize(size_t(l.meta_elems()));
  p.scales.resize(size_t(l.meta_elems()));
  quantize(w.data(), ElemType::F32, n, k, f, p.packed.data(), p.mins.data(), p.scales.data());
  p.dequantized.resize(w.size());
  dequantize(p.packed.data(), p.mins.data(), p.scales.data(), n, k, f, p.dequantized.data(), ElemType::F32);
  p.y.assign(size_t(rows * n), -7.0f);
  p.args.x = p.x.data();
  p.args.rows = rows;
  p.args.k = k;
  p.args.packed = p.packed.data();
  p.args.mins = p.mins.data();
  p.args.scales = p.scales.data();
  p.args.format = f;
  p.args.n = n;
  p.args.bias = bias ? p.bias.data() : nullptr;
  p.args.y = p.y.data();
  return p;
}

// Within fp32 accumulation (and the dequantized values' own fp32 rounding) of the
// product with the dequantized weights.
void expect_matches_dequantized(const Problem& p, const std::string& what) {
  const auto& a = p.args;
  for (int64_t m = 0; m < a.rows; ++m) {
    for (int64_t j = 0; j < a.n; ++j) {
      double exact = a.bias ? a.bias[j] : 0.0, magnitude = 1.0;
      for (int64_t i = 0; i < a.k; ++i) {
        const double t = double(p.dequantized[j * a.k + i]) * double(p.x[m * a.k + i]);
        exact += t;
        magnitude += std::fabs(t);
      }
      ASSERT_NEAR(p.y[m * a.n + j], exact, double(a.k + 4) * 2.4e-7 * magnitude) << what << " row " << m << " col " << j;
    }
  }
}

struct Shape {
  int64_t rows, k, n;
  QuantFormat format;
};

const std::vector<Shape> kShapes = {
    {1, 64, 8, {4, 64}},   {3, 100, 9, {4, 64}},  {2, 48, 5, {4, 16}},  {5, 30, 7, {4, 6}},
    {1, 64, 8, {8, 64}},   {4, 130, 17, {8, 64}}, {2, 40, 4, {8, 8}},   {3, 21, 6, {8, 5}},
    {1, 2048, 40, {4, 64}}, {1, 2048, 40, {8, 64}},
    // Enough rows for the AVX2 kernel's many-row path: several blocks of rows, a
    // partial one, and W rows past the last full tile.
    {70, 256, 22, {4, 64}}, {37, 96, 13, {8, 32}},
};

TEST(QuantizedMatmul, MatchesTheProductWithDequantizedWeights) {
  for (bool simd : {false, true}) {
    set_avx2_kernels_enabled(simd);
    for (size_t s = 0; s < kShapes.size(); ++s) {
      const Shape& sh = kShapes[s];
      Problem p = make_problem(sh.rows, sh.k, sh.n, sh.format, uint32_t(s + 1), s % 2 == 0);
      quantized_matmul(p.args);
      expect_matches_dequantized(p, std::string(simd ? "avx2" : "portable") + " shape " + std::to_string(s) +
                                        " bits " + std::to_string(sh.format.bits));
    }
  }
  set_avx2_kernels_enabled(true);
}

// The whole batch on 2 threads, then each row alone on one: bit-identical results.
void expect_rows_match_alone(Problem& p, const std::string& what) {
  p.args.num_threads = 2;
  quantized_matmul(p.args);
  for (int64_t m = 0; m < p.args.rows; ++m) {
    std::vector<float> alone(size_t(p.args.n));
    QuantizedMatmulArgs one = p.args;
    one.rows = 1;
    if (one.x) one.x = p.x.data() + m * p.args.k;
    if (one.x_bf16) one.x_bf16 = p.x_bf16.data() + m * p.args.k;
    one.y = alone.data();
    one.num_threads = 1;
    quantized_matmul(one);
    for (int64_t j = 0; j < p.args.n; ++j) ASSERT_EQ(alone[j], p.y[m * p.args.n + j]) << what << " row " << m;
  }
}

// The AVX2 kernel's levels shared by a block of rows, or converted for each row: the
// same bits.
TEST(QuantizedMatmul, SharedLevelsNeverChangeTheBits) {
  for (int bits : {4, 8}) {
    for (const Shape& sh : {Shape{8, 64, 8, {bits, 64}}, Shape{70, 1024, 23, {bits, 128}}, Shape{33, 512, 9, {bits, 16}}}) {
      Problem p = make_problem(sh.rows, sh.k, sh.n, sh.format, 7, true);
      p.args.num_threads = 2;
      quantized_matmul(p.args);
      const std::vector<float> shared = p.y;
      set_quantized_matmul_shared_levels(false);
      quantized_matmul(p.args);
      set_quantized_matmul_shared_levels(true);
      EXPECT_EQ(shared, p.y) << bits << "-bit, " << sh.rows << " rows, k " << sh.k;
    }
  }
}

// Rows alone take the AVX2 kernel's one-row path and rows in numbers its many-row path
// (levels converted once per block of rows): the same bits, in every block of rows.
TEST(QuantizedMatmul, RowResultsDoNotDependOnBatchOrThreads) {
  for (int bits : {4, 8}) {
    for (const Shape& sh : {Shape{9, 300, 37, {bits, 64}}, Shape{7, 128, 8, {bits, 32}}, Shape{8, 160, 9, {bits, 32}},
                            Shape{70, 1024, 23, {bits, 128}}, Shape{33, 2048, 6, {bits, 16}}}) {
      Problem p = make_problem(sh.rows, sh.k, sh.n, sh.format, 42, true);
      expect_rows_match_alone(p, fmt::format("{}-bit, {} rows, k {}, group {}", bits, sh.rows, sh.k,
                                             sh.format.group_size));
    }
  }
}

// x given as bf16, as a bf16 model's activations reach the kernel (p.x holds the same
// values for the reference).
Problem make_bf16_problem(int64_t rows, int64_t k, int64_t n, QuantFormat f, uint32_t seed, bool bias) {
  Problem p = make_problem(rows, k, n, f, seed, bias);
  for (float& v : p.x) {
    p.x_bf16.push_back(float_to_bf16(v));
    v = bf16_to_float(p.x_bf16.back());
  }
  p.args.x = nullptr;
  p.args.x_bf16 = p.x_bf16.data();
  return p;
}

// Every kernel setting a CPU can have: AMX and AVX-512 BF16 (where the CPU has them),
// AVX-512 BF16 without AMX, AVX2 only, portable.
struct KernelSetting {
  bool amx, avx512_bf16, avx2;
  std::string name;
};
const std::vector<KernelSetting> kKernelSettings = {{true, true, true, "amx"},
                                                    {false, true, true, "avx512-bf16"},
                                                    {false, false, true, "avx2"},
                                                    {false, false, false, "portable"}};

void use_kernels(const KernelSetting& k) {
  set_amx_kernels_enabled(k.amx);
  set_avx512_bf16_kernels_enabled(k.avx512_bf16);
  set_avx2_kernels_enabled(k.avx2);
}

void restore_kernels() { use_kernels(kKernelSettings.front()); }

TEST(QuantizedMatmul, Bf16ActivationsMatchTheProductWithDequantizedWeights) {
  // 4 bits in groups of 64, 128, 192 and 320 (the AVX-512 BF16 and AMX kernels), 8 bits
  // in groups of 32 and 64 (AMX, else AVX2), a partial last group, W rows not a multiple
  // of the tiles (4, 16), 1-6, 9 and 17 rows of x (tiles of four rows of x and the rows
  // past them; two blocks of AMX B tiles); groups of 16 go to the other kernels with the
  // same x.
  const std::vector<Shape> shapes = {
      {1, 64, 8, {4, 64}},     {3, 100, 9, {4, 64}},   {5, 2048, 37, {4, 64}}, {2, 300, 13, {4, 128}},
      {1, 5632, 6, {4, 64}},   {4, 130, 17, {8, 64}},  {2, 48, 5, {4, 16}},    {1, 2048, 48, {4, 64}},
      {1, 700, 35, {4, 128}},  {17, 640, 33, {4, 64}}, {3, 576, 32, {4, 192}}, {1, 2048, 48, {8, 64}},
      {17, 640, 33, {8, 64}},  {2, 100, 20, {8, 32}},   {9, 650, 21, {4, 128}}, {6, 700, 19, {4, 320}},
  };
  for (const KernelSetting& kernels : kKernelSettings) {
    use_kernels(kernels);
    for (size_t s = 0; s < shapes.size(); ++s) {
      const Shape& sh = shapes[s];
      Problem p = make_bf16_problem(sh.rows, sh.k, sh.n, sh.format, uint32_t(100 + s), s % 2 == 1);
      quantized_matmul(p.args);
      expect_matches_dequantized(p, kernels.name + " bf16 x, shape " + std::to_string(s));
    }
  }
  restore_kernels();
}

TEST(QuantizedMatmul, Bf16RowResultsDoNotDependOnBatchOrThreads) {
  for (const KernelSetting& kernels : kKernelSettings) {
    use_kernels(kernels);
    // 7 rows: a tile of four rows of x and three single rows on the AVX-512 BF16
    // kernel; 18 rows: four tiles and two rows there, two blocks of B tiles on AMX. 61
    // W rows: three AMX tiles and 13 rows on the vector kernel (three tiles of four W
    // rows and one), and enough weights for two threads. k = 650: a partial last group
    // in every format. Groups of 128, 192 and 256 take two to four steps of levels per
    // group, each with its own instance of the AVX-512 BF16 tile; 320 the one that
    // reads the group size at run time.
    const std::vector<QuantFormat> formats = {{4, 64}, {8, 64}, {4, 128}, {4, 192}, {4, 256}, {4, 320}};
    for (const QuantFormat format : formats) {
      for (int64_t rows : {7, 18}) {
        Problem p = make_bf16_problem(rows, 650, 61, format, 7, true);
        expect_rows_match_alone(p, fmt::format("{} {}-bit in groups of {}, {} rows", kernels.name, format.bits,
                                               format.group_size, rows));
      }
    }
  }
  restore_kernels();
}

// Products stay in place for more rows where a lookup serves more rows of x, with bf16
// x: 32 on AMX (4 and 8 bits), 16 on AVX-512 BF16 (4 bits); else 8 (on CPUs without a
// kernel, the smaller limit applies).
TEST(QuantizedMatmul, InPlaceRowLimitFollowsTheKernel) {
  const QuantFormat four_bit{4, 64}, eight_bit{8, 64};
  for (const KernelSetting& kernels : kKernelSettings) {
    use_kernels(kernels);
    const int64_t amx = use_amx_kernels() ? 4 * kQuantizedInPlaceMaxRows : 0;
    const int64_t four_expected = amx                         ? amx
                                  : use_avx512_bf16_kernels() ? 2 * kQuantizedInPlaceMaxRows
                                                              : kQuantizedInPlaceMaxRows;
    EXPECT_EQ(quantized_in_place_max_rows(true, four_bit), four_expected) << kernels.name;
    EXPECT_EQ(quantized_in_place_max_rows(true, eight_bit), amx ? amx : kQuantizedInPlaceMaxRows) << kernels.name;
    EXPECT_EQ(quantized_in_place_max_rows(false, four_bit), kQuantizedInPlaceMaxRows) << kernels.name;
    EXPECT_EQ(quantized_in_place_max_rows(false, eight_bit), kQuantizedInPlaceMaxRows) << kernels.name;
  }
  restore_kernels();
}

// x prepared for the kernels: each group's sum added one element at a time in k's
// order (the min terms' bits depend on it, whichever way prepare_x runs the groups),
// values in the slots the kernels read (a 4-bit group's even elements, then its odd
// ones, on the SIMD paths), zero past k. Shapes: fewer groups than prepare_x sums side
// by side, more, and partial last groups of odd and even length.
TEST(QuantizedMatmul, PreparedXKeepsTheGroupSumsOrderAndSlots) {
  for (const Shape& sh : {Shape{2, 301, 1, {4, 64}}, Shape{3, 64 * 11 + 13, 1, {4, 64}}, Shape{1, 64 * 16, 1, {4, 64}},
                          Shape{2, 96 * 9 + 2, 1, {4, 32}}, Shape{1, 21, 1, {8, 5}}}) {
    // x given in fp32 and prepared in fp32; given in bf16 and prepared in fp32 (the AVX2
    // kernels' view of a bf16 model's x) or in bf16.
    for (const auto& [bf16_in, as_bf16] : {std::pair{false, false}, std::pair{true, false}, std::pair{true, true}}) {
      for (bool split : {false, true}) {
        if (split && sh.format.group_size % 2) continue;
        // Sums of dozens of normal values round, so any other order of the adds shows.
        const Problem p = bf16_in ? make_bf16_problem(sh.rows, sh.k, sh.n, sh.format, 11, false)
                                  : make_problem(sh.rows, sh.k, sh.n, sh.format, 11, false);
        const std::string what = fmt::format("k {}, group {}, {} x as {}{}", sh.k, sh.format.group_size,
                                             bf16_in ? "bf16" : "fp32", as_bf16 ? "bf16" : "fp32",
                                             split ? ", split" : "");
        const detail::PreparedX x = detail::prepare_x(p.args, sh.k, split, as_bf16);
        const int64_t g = sh.format.group_size;
        ASSERT_EQ(x.groups, (sh.k + g - 1) / g) << what;
        ASSERT_EQ(x.row_len, x.groups * g) << what;
        for (int64_t m = 0; m < sh.rows; ++m) {
          for (int64_t group = 0; group < x.groups; ++group) {
            float sum = 0.0f;
            for (int64_t i = group * g; i < std::min(sh.k, group * g + g); ++i) sum += p.x[m * sh.k + i];
            const float got = x.group_sums[m * x.groups + group];
            EXPECT_EQ(std::memcmp(&got, &sum, sizeof sum), 0) << what << " row " << m << " group " << group;
          }
          for (int64_t slot = 0; slot < x.row_len; ++slot) {
            const int64_t group = slot / g, in_group = slot % g;
            const int64_t i = group * g + (split ? (in_group < g / 2 ? 2 * in_group : 2 * (in_group - g / 2) + 1) : in_group);
            const float want = i < sh.k ? p.x[m * sh.k + i] : 0.0f;
            const float have = as_bf16 ? bf16_to_float(x.values_bf16[m * x.row_len + slot]) : x.values[m * x.row_len + slot];
            ASSERT_EQ(have, want) << what << " row " << m << " slot " << slot;
          }
        }
      }
    }
  }
}

// The kernels that set up per call (AVX-512 BF16, AMX) get the columns in runs of whole
// chunks that cover [0, n) once, each run inside it; one thread takes all of a matrix
// too small to share.
TEST(QuantizedMatmul, ThreadColumnRunsCoverEveryColumnOnce) {
  for (int threads : {1, 2, 3}) {
    for (int64_t n : {1, 15, 16, 17, 100, 1000, 4097}) {
      for (int64_t k : {int64_t(8), detail::kParallelMinWeights}) {
        std::mutex mutex;
        std::vector<std::pair<int64_t, int64_t>> runs;
        detail::for_each_thread_columns(n, k, threads, [&](int64_t j0, int64_t j1) {
          std::lock_guard<std::mutex> lock(mutex);
          runs.emplace_back(j0, j1);
        });
        const std::string what = fmt::format("{} threads, n {}, k {}", threads, n, k);
        std::sort(runs.begin(), runs.end());
        int64_t covered = 0;
        for (const auto& [j0, j1] : runs) {
          EXPECT_EQ(j0, covered) << what;
          EXPECT_LT(j0, j1) << what;
          EXPECT_EQ(j0 % detail::kColumnsPerChunk, 0) << what;
          EXPECT_TRUE(j1 == n || j1 % detail::kColumnsPerChunk == 0) << what;
          covered = j1;
        }
        EXPECT_EQ(covered, n) << what;
        if (threads == 1 || n * k < detail::kParallelMinWeights || n <= detail::kColumnsPerChunk) {
          EXPECT_EQ(runs.size(), 1u) << what;
        }
      }
    }
  }
}

TEST(QuantizedMatmul, RefusesInconsistentArguments) {
  Problem p = make_problem(1, 64, 4, {4, 64}, 3, false);
  QuantizedMatmulArgs a = p.args;
  a.format.bits = 3;
  EXPECT_THROW(quantized_matmul(a), Error);
  a = p.args;
  a.x_row_stride = 10;
  EXPECT_THROW(quantized_matmul(a), Error);
  a = p.args;
  a.scales = nullptr;
  EXPECT_THROW(quantized_matmul(a), Error);
  const std::vector<uint16_t> x_bf16(p.x.size(), 0);
  a = p.args;
  a.x_bf16 = x_bf16.data();  // both x and x_bf16
  EXPECT_THROW(quantized_matmul(a), Error);
  a.x = nullptr;
  a.x_bf16 = nullptr;  // neither
  EXPECT_THROW(quantized_matmul(a), Error);
}

}  // namespace
}  // namespace tiergen::kernels
