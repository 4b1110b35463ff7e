// The small-row CPU matmul (kernels/cpu/small_matmul) against a double-precision
// reference over the exact stored operands, for every kernel (portable, AVX2, AVX-512
// BF16 and AMX where the CPU has them), weight type and awkward shape; results per row that do
// not depend on the batch around it or the thread count; and model::linear_product's
// routing between the kernel and at::linear.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/half.h"
#if defined(__x86_64__)
#include "kernels/cpu/simd_avx512_bf16.h"
#endif
#include "kernels/cpu/small_matmul.h"
#include "tiergen/common/error.h"
#include "tiergen/model/linear.h"

namespace tiergen::kernels {
namespace {

enum class Path { Portable, Avx2, Avx512Bf16, Amx };

const char* path_name(Path p) {
  switch (p) {
    case Path::Portable: return "portable";
    case Path::Avx2: return "avx2";
    case Path::Avx512Bf16: return "avx512bf16";
    case Path::Amx: return "amx";
  }
  return "?";
}

// Selects a kernel for the scope; false when this CPU cannot run it.
class KernelScope {
 public:
  explicit KernelScope(Path p) {
    set_avx2_kernels_enabled(p != Path::Portable);
    set_avx512_bf16_kernels_enabled(p == Path::Avx512Bf16 || p == Path::Amx);
    set_amx_kernels_enabled(p == Path::Amx);
    available_ = p == Path::Portable || (p == Path::Avx2       ? use_avx2_kernels()
                                         : p == Path::Avx512Bf16 ? use_avx512_bf16_kernels()
                                                                 : use_amx_kernels());
  }
  ~KernelScope() {
    set_avx2_kernels_enabled(true);
    set_avx512_bf16_kernels_enabled(true);
    set_amx_kernels_enabled(true);
  }
  bool available() const { return available_; }

 private:
  bool available_ = false;
};

// A matrix stored as `type`, with the floats it holds exactly.
struct Stored {
  std::vector<float> values;
  std::vector<float> f32;
  std::vector<uint16_t> bits;
  const void* data(ElemType type) const { return type == ElemType::F32 ? static_cast<const void*>(f32.data()) : bits.data(); }
};

Stored make_stored(int64_t count, ElemType type, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  Stored s;
  for (int64_t i = 0; i < count; ++i) {
    const float v = normal(rng);
    if (type == ElemType::F32) {
      s.f32.push_back(v);
      s.values.push_back(v);
    } else {
      const uint16_t b = type == ElemType::F16 ? float_to_half(v) : float_to_bf16(v);
      s.bits.push_back(b);
      s.values.push_back(type == ElemType::F16 ? half_to_float(b) : bf16_to_float(b));
    }
  }
  return s;
}

struct Case {
  int64_t rows, k, n, x_stride, y_stride;
  bool bias;
};

struct Problem {
  Stored x, w;
  std::vector<float> bias, y;
  SmallMatmulArgs args;
};

Problem make_problem(const Case& c, ElemType x_type, ElemType w_type, uint32_t seed) {
  Problem p;
  p.x = make_stored(c.rows * c.x_stride, x_type, seed);
  p.w = make_stored(c.n * c.k, w_type, seed + 1);
  if (c.bias) p.bias = make_stored(c.n, ElemType::F32, seed + 2).f32;
  p.y.assign(size_t(c.rows * c.y_stride), -7.0f);
  p.args.x = p.x.data(x_type);
  p.args.x_type = x_type;
  p.args.rows = c.rows;
  p.args.k = c.k;
  p.args.x_row_stride = c.x_stride;
  p.args.w = p.w.data(w_type);
  p.args.w_type = w_type;
  p.args.n = c.n;
  p.args.bias = c.bias ? p.bias.data() : nullptr;
  p.args.y = p.y.data();
  p.args.y_row_stride = c.y_stride;
  return p;
}

// |y - exact| within the fp32 accumulation bound k * 2^-23 * sum |w x| (plus the bias).
void expect_close_to_exact(const Problem& p, const Case& c, const std::string& what) {
  for (int64_t m = 0; m < c.rows; ++m) {
    for (int64_t j = 0; j < c.n; ++j) {
      double exact = c.bias ? p.bias[j] : 0.0, magnitude = c.bias ? std::fabs(p.bias[j]) : 0.0;
      for (int64_t q = 0; q < c.k; ++q) {
        const double t = double(p.w.values[j * c.k + q]) * double(p.x.values[m * c.x_stride + q]);
        exact += t;
        magnitude += std::fabs(t);
      }
      const double got = p.y[m * c.y_stride + j];
      ASSERT_NEAR(got, exact, double(c.k + 2) * 1.2e-7 * magnitude + 1e-30) << what << " row " << m << " col " << j;
    }
    for (int64_t j = c.n; j < c.y_stride; ++j) ASSERT_EQ(p.y[m * c.y_stride + j], -7.0f) << what << ": wrote past n";
  }
}

const std::vector<Case> kCases = {
    {1, 1, 1, 1, 1, false},     {1, 8, 4, 8, 4, true},      {2, 7, 5, 9, 6, true},
    {3, 31, 17, 31, 17, false}, {5, 33, 33, 40, 35, true},  {17, 100, 9, 100, 9, true},
    {4, 64, 16, 64, 16, false}, {16, 257, 37, 260, 40, true}, {1, 2048, 70, 2048, 70, false},
    {33, 96, 48, 100, 50, true},  // three blocks of x rows for the AMX tiles
    // The AVX2 kernel cache-blocked: three blocks of x rows (30, 30, 10), k in five spans
    // (four of 512, one of 48) and a tail of 4.
    {70, 2100, 21, 2104, 23, true},
};

// The kernels' cache blocking (small_matmul_blocking.h) for the scope.
class BlockingScope {
 public:
  explicit BlockingScope(bool on) : saved_(small_matmul_blocking()) { set_small_matmul_blocking(on); }
  ~BlockingScope() { set_small_matmul_blocking(saved_); }

 private:
  bool saved_;
};

class OneRowSequentialScope {
 public:
  explicit OneRowSequentialScope(bool on) : saved_(small_matmul_one_row_sequential()) {
    set_small_matmul_one_row_sequential(on);
  }
  ~OneRowSequentialScope() { set_small_matmul_one_row_sequential(saved_); }

 private:
  bool saved_;
};

struct TypeCombo {
  ElemType x, w;
};

const std::vector<TypeCombo> kTypes = {{ElemType::F32, ElemType::F32}, {ElemType::F32, ElemType::F16},
                                       {ElemType::F32, ElemType::BF16}, {ElemType::BF16, ElemType::BF16}};

TEST(SmallMatmul, EveryKernelMatchesTheExactProduct) {
  for (Path path : {Path::Portable, Path::Avx2, Path::Avx512Bf16, Path::Amx}) {
    KernelScope scope(path);
    if (!scope.available()) continue;
    for (const TypeCombo& t : kTypes) {
      for (size_t i = 0; i < kCases.size(); ++i) {
        Problem p = make_problem(kCases[i], t.x, t.w, uint32_t(10 * i + 1));
        small_matmul(p.args);
        expect_close_to_exact(p, kCases[i],
                              std::string(path_name(path)) + " x " + elem_type_name(t.x) + " w " +
                                  elem_type_name(t.w) + " case " + std::to_string(i));
      }
    }
  }
}

// Each row's bits are the same alone and inside a batch, and with 1 or 2 threads: a
// sequence's tokens must not depend on its neighbours or the machine's core count.
TEST(SmallMatmul, RowResultsDoNotDependOnBatchOrThreads) {
  for (Path path : {Path::Portable, Path::Avx2, Path::Avx512Bf16, Path::Amx}) {
    KernelScope scope(path);
    if (!scope.available()) continue;
    // One block of x rows and one span of k; then several blocks and spans.
    for (const TypeCombo& t : kTypes) for (const Case& batch : {Case{13, 300, 41, 300, 41, true}, Case{75, 1500, 19, 1500, 19, true}}) {
      Problem p = make_problem(batch, t.x, t.w, 99);
      p.args.num_threads = 2;
      small_matmul(p.args);
      for (int64_t m = 0; m < batch.rows; ++m) {
        std::vector<float> alone(size_t(batch.n));
        SmallMatmulArgs one = p.args;
        one.rows = 1;
        one.x = static_cast<const char*>(p.args.x) + m * batch.x_stride * elem_size(t.x);
        one.y = alone.data();
        one.y_row_stride = 0;
        one.num_threads = 1;
        small_matmul(one);
        for (int64_t j = 0; j < batch.n; ++j)
          ASSERT_EQ(alone[j], p.y[m * batch.y_stride + j])
              << path_name(path) << " " << elem_type_name(t.w) << " row " << m << " col " << j;
      }
    }
  }
}

// Blocking (the AVX2 kernel's, the AVX-512 one's for fp32 x, the AVX-512 BF16 one's for
// long W rows) changes which operands sit in which cache, never the order of an element's
// sums: results are the same bits blocked and unblocked. Blocks of x rows for these shapes
// (small_matmul_blocking.h, AVX2 tiles of 3 rows): 30+30+10 rows, k in five spans and a
// tail; 8 rows (two tiles and two single rows), k two whole spans and a tail; 63+63+4, k a
// span and 8 more; 63+62 (the last block 20 tiles and two single rows, the most
// accumulators kept), three spans, no tail; and k shorter than one step; 30+30+30+7, k in
// five spans and a tail; 15+15+10, k in nine spans, no tail. (AVX-512, tiles of 8 rows,
// blocked from 80 rows: 64+64+2, 56+56+13 with a 5-row tail tile, 24+24+24+24 +1 with a
// 1-row tail tile; the others unblocked.) bf16 x: the AVX2 kernel converts it to fp32; the
// AVX-512 BF16 kernel that takes it above AVX2 blocks from 32 rows where k > 2048 (tiles of
// 4 rows, blocks of up to 64 rows, spans of 2048): 64+6 rows and 64+33, k in spans of 2048
// and 32 and a tail of 20; 40 rows (one block) with k in spans of 2048, 2048 and 96 and a
// tail of 8 (a span neither first nor last); through W tiles of 6, 4 and 1 rows; the others
// unblocked.
TEST(SmallMatmul, CacheBlockingNeverChangesTheBits) {
  const std::vector<Case> cases = {{70, 2100, 21, 2104, 23, true}, {8, 1030, 9, 1030, 9, false},
                                   {130, 520, 18, 520, 18, true},  {125, 1040, 7, 1040, 7, true},
                                   {9, 5, 6, 5, 6, true},          {97, 2100, 21, 2104, 23, true},
                                   {40, 4200, 11, 4200, 11, false}};
  int paths_run = 0;
  for (Path path : {Path::Avx2, Path::Avx512Bf16}) {
    KernelScope scope(path);
    if (!scope.available()) continue;
    ++paths_run;
    for (const TypeCombo& t : kTypes) {
      for (size_t i = 0; i < cases.size(); ++i) {
        Problem blocked = make_problem(cases[i], t.x, t.w, uint32_t(7 + i));
        Problem unblocked = make_problem(cases[i], t.x, t.w, uint32_t(7 + i));
        small_matmul(blocked.args);
        {
          BlockingScope off(false);
          small_matmul(unblocked.args);
        }
        for (size_t e = 0; e < blocked.y.size(); ++e)
          ASSERT_EQ(blocked.y[e], unblocked.y[e]) << path_name(path) << " x " << elem_type_name(t.x) << " w "
                                                  << elem_type_name(t.w) << " case " << i << " element " << e;
      }
    }
  }
  if (paths_run == 0) GTEST_SKIP() << "no AVX2 kernel on this CPU";
}

uint32_t float_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// One row of fp32 x times fp32 weights, one W row at a time or in tiles of four W rows
// (small_matmul_one_row_sequential, on by default on Zen 5 only): the same bits on every
// CPU, k with and without a tail, n with a chunk's last rows short of a tile, one thread
// and two, x and y strided; and near the exact sums. One row of fp32 x takes the AVX2
// kernel at every x86 level (the AVX-512 level included), so the AVX2 path is the one
// these run; 16-bit weights keep their tiles either way (the same bits trivially).
TEST(SmallMatmul, OneRowOneWRowAtATimeGivesTheTilesBits) {
  const std::vector<Case> cases = {{1, 2048, 70, 2048, 70, true}, {1, 1027, 45, 1030, 47, false},
                                   {1, 5, 6, 5, 6, true},         {1, 4096, 130, 4100, 131, true},
                                   {1, 203, 13, 205, 14, false}};
  int paths_run = 0;
  for (Path path : {Path::Avx2, Path::Avx512Bf16}) {
    KernelScope scope(path);
    if (!scope.available()) continue;
    ++paths_run;
    for (ElemType w : {ElemType::F32, ElemType::F16, ElemType::BF16}) {
      for (size_t i = 0; i < cases.size(); ++i) {
        for (int threads : {1, 2}) {
          Problem rows = make_problem(cases[i], ElemType::F32, w, uint32_t(51 + i));
          Problem tiles = make_problem(cases[i], ElemType::F32, w, uint32_t(51 + i));
          rows.args.num_threads = tiles.args.num_threads = threads;
          {
            OneRowSequentialScope on(true);
            small_matmul(rows.args);
          }
          {
            OneRowSequentialScope off(false);
            small_matmul(tiles.args);
          }
          for (size_t e = 0; e < rows.y.size(); ++e)
            ASSERT_EQ(float_bits(rows.y[e]), float_bits(tiles.y[e]))
                << path_name(path) << " w " << elem_type_name(w) << " case " << i << " threads " << threads
                << " element " << e;
          expect_close_to_exact(rows, cases[i], std::string(path_name(path)) + " one W row at a time");
        }
      }
    }
  }
  if (paths_run == 0) GTEST_SKIP() << "no AVX2 kernel on this CPU";
}


// The AVX-512 fp32 kernel (fp32 x, at the avx512-bf16 level) runs the AVX2 kernel's
// lanes two to a register: the same bits for every shape, every weight type, odd row
// counts (a last pair of one row), k tails, blocked and not, one thread and two (where
// the product is large enough to split), and 16-bit weights widened to fp32 first (64
// rows and more).
TEST(SmallMatmul, Avx512Fp32KernelGivesTheAvx2KernelsBits) {
  std::vector<Case> cases = kCases;
  for (const Case& c : {Case{125, 1040, 7, 1040, 7, true}, Case{130, 520, 18, 520, 18, true},
                        Case{9, 5, 6, 5, 6, true}, Case{70, 2100, 21, 2104, 23, true}})
    cases.push_back(c);
  for (int64_t rows = 1; rows <= 11; ++rows) cases.push_back({rows, 203, 13, 205, 14, rows % 2 == 0});
  // Large enough for two threads (column_chunks.h), a 7-row tail tile.
  cases.push_back({7, 1027, 70, 1030, 72, true});
  // From 64 rows, 16-bit weights are widened a chunk of 16 W rows at a time on AVX-512:
  // several chunks and a short last one, two threads, strided x and y, a k tail.
  cases.push_back({96, 2051, 45, 2053, 47, true});
  cases.push_back({64, 520, 33, 520, 33, false});
  for (ElemType w : {ElemType::F32, ElemType::F16, ElemType::BF16}) {
    for (size_t i = 0; i < cases.size(); ++i) {
      for (int threads : {1, 2}) {
        Problem avx2 = make_problem(cases[i], ElemType::F32, w, uint32_t(31 + i));
        Problem avx512 = make_problem(cases[i], ElemType::F32, w, uint32_t(31 + i));
        avx2.args.num_threads = avx512.args.num_threads = threads;
        {
          KernelScope scope(Path::Avx2);
          if (!scope.available()) GTEST_SKIP() << "no AVX2 kernel on this CPU";
          small_matmul(avx2.args);
        }
        KernelScope scope(Path::Avx512Bf16);
        if (!scope.available()) GTEST_SKIP() << "no AVX-512 kernels on this CPU (or TIERGEN_CPU_ISA caps them)";
        ASSERT_STREQ(small_matmul_kernel_name(ElemType::F32, w), "avx512-f32");
        small_matmul(avx512.args);
        for (size_t e = 0; e < avx2.y.size(); ++e)
          ASSERT_EQ(float_bits(avx512.y[e]), float_bits(avx2.y[e]))
              << "w " << elem_type_name(w) << " case " << i << " threads " << threads << " element " << e;
      }
    }
  }
}

#if defined(__x86_64__)
TG_AVX512_BF16 float avx512_lane_sum(const float* lanes) { return avx512::lane_sum(_mm512_loadu_ps(lanes)); }

// The 16-lane sum that ends every W row of the AVX-512 BF16 kernels keeps the order
// their results are defined by (lane i plus lane i + 8, then the same with 4, 2 and 1):
// on lanes of mixed signs and magnitudes, where another order shows in the bits, it
// equals that order computed one float at a time.
TEST(SmallMatmul, LaneSumKeepsItsPairwiseOrder) {
  KernelScope scope(Path::Avx512Bf16);
  if (!scope.available()) GTEST_SKIP() << "no AVX-512 BF16 kernels on this CPU (or TIERGEN_CPU_ISA caps them)";
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> exponent(-24, 24);
  int differs_from_in_order = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    float lanes[16], pairwise[16];
    for (int i = 0; i < 16; ++i) lanes[i] = pairwise[i] = std::ldexp(normal(rng), exponent(rng));
    for (int width = 8; width >= 1; width /= 2)
      for (int i = 0; i < width; ++i) pairwise[i] += pairwise[i + width];
    float in_order = 0.0f;
    for (float lane : lanes) in_order += lane;
    ASSERT_EQ(float_bits(avx512_lane_sum(lanes)), float_bits(pairwise[0])) << "trial " << trial;
    differs_from_in_order += float_bits(in_order) != float_bits(pairwise[0]);
  }
  EXPECT_GT(differs_from_in_order, 1000);  // the lanes do tell the orders apart
}
#endif

// x made ready once (SmallMatmulX) and multiplied by parts of W that start at multiples
// of 16 rows, as model::quantized_linear_product's dequantized tiles do, gives every
// output the bits of one call over all of W, on every kernel (AMX's packed x, with a
// last part of 8 W rows that its AVX-512 BF16 fallback takes; the AVX-512 fp32 kernel's
// row pairs; bf16 x widened for AVX2), at one row and at many; and a prepared x is
// refused for another x.
TEST(SmallMatmul, APreparedXOverPartsOfWGivesTheWholeProductsBits) {
  for (Path path : {Path::Portable, Path::Avx2, Path::Avx512Bf16, Path::Amx}) {
    KernelScope scope(path);
    if (!scope.available()) continue;
    for (const TypeCombo& t : kTypes) {
      for (const Case& c : {Case{1, 300, 200, 300, 200, true}, Case{37, 300, 200, 304, 203, false}}) {
        Problem whole = make_problem(c, t.x, t.w, 41);
        small_matmul(whole.args);
        Problem parts = make_problem(c, t.x, t.w, 41);
        const SmallMatmulX prepared(parts.args);
        for (int64_t first = 0; first < c.n; first += 64) {
          SmallMatmulArgs a = parts.args;
          a.n = std::min<int64_t>(64, c.n - first);
          a.w = static_cast<const char*>(parts.args.w) + first * c.k * elem_size(t.w);
          a.bias = parts.args.bias ? parts.args.bias + first : nullptr;
          a.y = parts.y.data() + first;
          a.y_row_stride = c.y_stride;
          a.num_threads = 1;
          small_matmul(a, prepared);
        }
        for (size_t i = 0; i < whole.y.size(); ++i) {
          ASSERT_EQ(parts.y[i], whole.y[i]) << path_name(path) << " x " << elem_type_name(t.x) << " w "
                                            << elem_type_name(t.w) << " rows " << c.rows << " at " << i;
        }
        Problem other = make_problem(c, t.x, t.w, 43);
        EXPECT_THROW(small_matmul(other.args, prepared), Error) << "x prepared for another x";
      }
    }
  }
}

TEST(SmallMatmul, RefusesInconsistentArguments) {
  Problem p = make_problem({2, 8, 4, 8, 4, false}, ElemType::F32, ElemType::F32, 5);
  SmallMatmulArgs a = p.args;
  a.x_row_stride = 7;
  EXPECT_THROW(small_matmul(a), Error);
  a = p.args;
  a.x_type = ElemType::BF16;  // bf16 activations need bf16 weights
  EXPECT_THROW(small_matmul(a), Error);
  a = p.args;
  a.w = nullptr;
  EXPECT_THROW(small_matmul(a), Error);
}

using MaxRowsScope = SmallMatmulMaxRowsScope;

TEST(LinearProduct, FewRowsUseTheKernelAndMatchAtLinear) {
  MaxRowsScope rows(16);
  at::manual_seed(3);
  const at::Tensor w = at::randn({48, 96}), b = at::randn({48});
  const at::Tensor x = at::randn({2, 3, 96});  // 6 rows after flattening
  ASSERT_TRUE(model::uses_small_matmul(x, w));
  const at::Tensor y = model::linear_product(x, w, b);
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 3, 48}));
  const at::Tensor exact = at::linear(x.to(at::kDouble), w.to(at::kDouble), b.to(at::kDouble));
  EXPECT_LT((y.to(at::kDouble) - exact).abs().max().item<double>(), 1e-4);

  const at::Tensor many = at::randn({17, 96});
  EXPECT_FALSE(model::uses_small_matmul(many, w)) << "17 rows are above the limit of 16";
  EXPECT_TRUE(at::equal(model::linear_product(many, w, b), at::linear(many, w, b)));
}

TEST(LinearProduct, Bf16ModelsKeepBf16Activations) {
  MaxRowsScope rows(16);
  at::manual_seed(4);
  const at::Tensor w = at::randn({40, 64}).to(at::kBFloat16), x = at::randn({3, 64}).to(at::kBFloat16);
  const at::Tensor y = model::linear_product(x, w);
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  const at::Tensor exact = at::linear(x.to(at::kDouble), w.to(at::kDouble));
  // One bf16 rounding of the fp32 sum: 2^-8 relative.
  EXPECT_LT(((y.to(at::kDouble) - exact).abs() / (exact.abs() + 1e-3)).max().item<double>(), 1.0 / 128);
}

TEST(LinearProduct, OffWhenTheLimitIsZeroOrTheWeightIsNotPlain) {
  at::manual_seed(5);
  const at::Tensor w = at::randn({8, 16}), x = at::randn({1, 16});
  {
    MaxRowsScope rows(0);
    EXPECT_FALSE(model::uses_small_matmul(x, w));
  }
  MaxRowsScope rows(16);
  EXPECT_FALSE(model::uses_small_matmul(x, at::randn({16, 8}).t())) << "transposed view";
  EXPECT_FALSE(model::uses_small_matmul(x.to(at::kDouble), w.to(at::kDouble))) << "float64 reference math";
  EXPECT_TRUE(model::uses_small_matmul(x, w));
}

// The defaults (no TIERGEN_SMALL_MATMUL_MAX_ROWS): 16 rows; fp16 weights at every row
// count on a CPU without native fp16 products, where LibTorch's fp16 GEMM is a slow
// fallback (2.x) or missing (1.13). A set limit applies to every type.
TEST(LinearProduct, Fp16WeightsTakeEveryRowCountWhereTheCpuLacksNativeFp16) {
  const SmallMatmulEveryRowCountScope gemm_beyond_the_limit(false);  // as --cpu-gemm runs
  MaxRowsScope defaults(-1);
  const at::Tensor w32 = at::randn({8, 16}), w16 = w32.to(at::kHalf);
  const at::Tensor many = at::randn({600, 16});
  EXPECT_TRUE(model::uses_small_matmul(at::randn({16, 16}), w32));
  EXPECT_FALSE(model::uses_small_matmul(at::randn({17, 16}), w32));
  EXPECT_FALSE(model::uses_small_matmul(at::randn({17, 16}).to(at::kBFloat16), w32.to(at::kBFloat16)));
  const bool unlimited = use_avx2_kernels() && !cpu_has_native_fp16_products();
  EXPECT_EQ(model::uses_small_matmul(many.to(at::kHalf), w16), unlimited);
  EXPECT_EQ(model::uses_small_matmul(many, w16), unlimited) << "fp32 activations alike";
  if (use_avx2_kernels()) {
    set_avx2_kernels_enabled(false);
    EXPECT_FALSE(model::uses_small_matmul(many, w16)) << "not on the portable kernel";
    set_avx2_kernels_enabled(true);
  }
  MaxRowsScope set(16);
  EXPECT_FALSE(model::uses_small_matmul(many, w16)) << "a set limit holds for fp16 too";
}

// A measured limit for one type (tiergen profile's cpu.small_matmul_max_rows, carried by
// a searched plan) replaces that type's default and no other's; a set limit still holds
// over it, and clearing the measurements restores the defaults.
TEST(LinearProduct, AMeasuredLimitReplacesItsTypesDefaultUnderTheSetting) {
  const SmallMatmulEveryRowCountScope gemm_beyond_the_limit(false);  // as --cpu-gemm runs
  MaxRowsScope defaults(-1);
  struct ClearMeasured {
    ~ClearMeasured() { clear_measured_small_matmul_max_rows(); }
  } clear;
  const at::Tensor w = at::randn({8, 16});
  const at::Tensor rows32 = at::randn({32, 16}), rows33 = at::randn({33, 16});
  ASSERT_FALSE(model::uses_small_matmul(rows32, w)) << "the default is 16 rows";
  set_measured_small_matmul_max_rows(ElemType::F32, 32);
  EXPECT_EQ(small_matmul_max_rows(ElemType::F32), 32);
  EXPECT_TRUE(model::uses_small_matmul(rows32, w));
  EXPECT_FALSE(model::uses_small_matmul(rows33, w));
  EXPECT_FALSE(model::uses_small_matmul(rows32.to(at::kBFloat16), w.to(at::kBFloat16))) << "bf16 keeps its default";
  EXPECT_EQ(small_matmul_max_rows(ElemType::BF16), default_small_matmul_max_rows(ElemType::BF16));
  {
    MaxRowsScope set(8);
    EXPECT_FALSE(model::uses_small_matmul(rows32, w)) << "a set limit holds over a measured one";
  }
  clear_measured_small_matmul_max_rows();
  EXPECT_FALSE(model::uses_small_matmul(rows32, w));
  EXPECT_EQ(small_matmul_max_rows(ElemType::F32), 16);
  EXPECT_THROW(set_measured_small_matmul_max_rows(ElemType::F32, -1), Error);
}

// The limit a plan will run under, known before its run applies it: what
// small_matmul_max_rows gives once the measured limit is set as the engine sets it.
TEST(LinearProduct, TheLimitUnderAMeasuredOneIsTheLimitOnceItIsSet) {
  MaxRowsScope defaults(-1);
  struct ClearMeasured {
    ~ClearMeasured() { clear_measured_small_matmul_max_rows(); }
  } clear;
  const int64_t every_row = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(small_matmul_max_rows_under(ElemType::F32, 32), every_row) << "batch-invariant products";
  const SmallMatmulEveryRowCountScope gemm_beyond_the_limit(false);  // as --cpu-gemm runs
  EXPECT_EQ(small_matmul_max_rows_under(ElemType::F32, 0), default_small_matmul_max_rows(ElemType::F32));
  for (ElemType type : {ElemType::F32, ElemType::F16, ElemType::BF16}) {
    const int64_t expected = small_matmul_max_rows_under(type, 32);
    // (Where the default has no limit the engine never sets a measured one.)
    if (default_small_matmul_max_rows(type) == every_row) {
      EXPECT_EQ(expected, every_row) << elem_type_name(type);
      continue;
    }
    EXPECT_EQ(expected, 32) << elem_type_name(type);
    set_measured_small_matmul_max_rows(type, 32);
    EXPECT_EQ(small_matmul_max_rows(type), expected) << elem_type_name(type);
    clear_measured_small_matmul_max_rows();
  }
  MaxRowsScope set(8);
  EXPECT_EQ(small_matmul_max_rows_under(ElemType::F32, 32), 8) << "a set limit holds over a measured one";
}

// Many rows go through the kernel in blocks (W read once per block, x converted a block
// at a time): every block's rows land in their place.
// Batch invariance, the default: every row count takes the small-row kernel, and an
// explicit limit still holds over it (benchmarks compare both kernels that way).
TEST(LinearProduct, ByDefaultEveryRowCountTakesTheKernel) {
  ASSERT_TRUE(small_matmul_for_every_row_count());
  const at::Tensor w = at::randn({16, 8});
  EXPECT_TRUE(model::uses_small_matmul(at::randn({5000, 8}), w));
  EXPECT_TRUE(model::uses_small_matmul(at::randn({5000, 8}).to(at::kBFloat16), w.to(at::kBFloat16)));
  EXPECT_FALSE(model::uses_widened_product(at::randn({5000, 8}).to(at::kBFloat16), w.to(at::kBFloat16)));
  {
    MaxRowsScope rows(16);
    EXPECT_FALSE(model::uses_small_matmul(at::randn({17, 8}), w)) << "a set limit holds";
  }
  const SmallMatmulEveryRowCountScope gemm(false);
  EXPECT_EQ(model::uses_small_matmul(at::randn({5000, 8}), w),
            default_small_matmul_max_rows(ElemType::F32) >= 5000);
}

TEST(LinearProduct, ManyRowsGoInBlocksThatLandInPlace) {
  MaxRowsScope rows(1 << 20);
  at::manual_seed(6);
  const at::Tensor w = at::randn({24, 40}).to(at::kHalf), b = at::randn({24});
  const at::Tensor x = at::randn({3, 211, 40}).to(at::kHalf);  // 633 rows: blocks of 256, 256 and 121
  ASSERT_TRUE(model::uses_small_matmul(x, w));
  const at::Tensor y = model::linear_product(x, w, b);
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{3, 211, 24}));
  EXPECT_EQ(y.scalar_type(), at::kHalf);
  const at::Tensor exact = at::linear(x.to(at::kDouble), w.to(at::kDouble), b.to(at::kDouble));
  // fp32 sums of fp16 operands, rounded once to fp16: 2^-11 relative, plus the sums'.
  EXPECT_LT(((y.to(at::kDouble) - exact).abs() / (exact.abs() + 1e-2)).max().item<double>(), 2e-3);

  // fp32 x (its blocks are views, the result written in place) and bf16 x bf16.
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor y32 = model::linear_product(x32, w, b);
  EXPECT_EQ(y32.scalar_type(), at::kFloat);
  EXPECT_LT(((y32.to(at::kDouble) - exact).abs() / (exact.abs() + 1e-2)).max().item<double>(), 1e-4);
  const at::Tensor wb = w.to(at::kBFloat16), xb = x.to(at::kBFloat16);
  const at::Tensor yb = model::linear_product(xb, wb, b);
  EXPECT_EQ(yb.scalar_type(), at::kBFloat16);
  const at::Tensor exact_b = at::linear(xb.to(at::kDouble), wb.to(at::kDouble), b.to(at::kDouble));
  EXPECT_LT(((yb.to(at::kDouble) - exact_b).abs() / (exact_b.abs() + 1e-2)).max().item<double>(), 1.0 / 64);
}

// Many-row products with bf16 weights on a CPU without native bf16 products widen the
// weight to fp32 a tile at a time: the result is the fp32 product of the stored values,
// rounded once to bf16, with every tile's columns in their place (n spans 3 tiles).
TEST(LinearProduct, WidenedBf16ProductIsTheFp32ProductOfTheStoredValues) {
  at::manual_seed(7);
  const int64_t k = 4096, n = 600;  // 256 rows per 4 MiB tile: tiles of 256, 256 and 88
  ASSERT_EQ(model::widened_tile_rows(k), 256);
  const at::Tensor w = at::randn({n, k}).to(at::kBFloat16), b = at::randn({n}).to(at::kBFloat16);
  const at::Tensor x = at::randn({2, 20, k}).to(at::kBFloat16);
  const at::Tensor y = model::widened_linear_product(x, w, b);
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 20, n}));
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  const at::Tensor exact = at::linear(x.to(at::kDouble), w.to(at::kDouble), b.to(at::kDouble));
  // One bf16 rounding of an fp32 sum over 4096 terms.
  EXPECT_LT(((y.to(at::kDouble) - exact).abs() / (exact.abs() + 1e-1)).max().item<double>(), 1.0 / 64);
  // fp32 activations keep an fp32 result.
  const at::Tensor y32 = model::widened_linear_product(x.to(at::kFloat), w);
  EXPECT_EQ(y32.scalar_type(), at::kFloat);
  const at::Tensor exact32 = at::linear(x.to(at::kDouble), w.to(at::kDouble));
  EXPECT_LT((y32.to(at::kDouble) - exact32).abs().max().item<double>(), 1e-3);
}

// The routing: bf16 weights above the small-row limit are widened exactly where the CPU
// (within TIERGEN_CPU_ISA) has no native bf16 products; fp32 weights and few rows never.
TEST(LinearProduct, ManyRowBf16ProductsWidenWhereTheCpuLacksNativeBf16) {
  MaxRowsScope rows(16);
  at::manual_seed(8);
  const at::Tensor w = at::randn({40, 64}).to(at::kBFloat16);
  const at::Tensor many = at::randn({33, 64}).to(at::kBFloat16), few = at::randn({4, 64}).to(at::kBFloat16);
  const bool widens = !cpu_has_native_bf16_products();
  EXPECT_EQ(model::uses_widened_product(many, w), widens);
  EXPECT_FALSE(model::uses_widened_product(few, w)) << "few rows go to small_matmul";
  EXPECT_FALSE(model::uses_widened_product(many.to(at::kFloat), w.to(at::kFloat))) << "fp32 weights";
  // Either route gives the fp32 product of the stored values, rounded once to bf16.
  const at::Tensor y = model::linear_product(many, w), exact = at::linear(many.to(at::kDouble), w.to(at::kDouble));
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  EXPECT_LT(((y.to(at::kDouble) - exact).abs() / (exact.abs() + 1e-1)).max().item<double>(), 1.0 / 64);
  EXPECT_EQ(cpu_has_native_bf16_products(), cpu_isa_in_use() >= CpuIsa::Avx512Bf16);
}

// The path linear_product names for each dtype is the one it takes on this CPU, within
// TIERGEN_CPU_ISA (tests/run_isa_levels.sh runs this at every level): the kernel
// small_matmul picks, the row limit, and above it the widened or LibTorch product.
TEST(LinearProduct, NamesThePathItTakesForEachDtypeOnThisCpu) {
  const CpuIsa in_use = cpu_isa_in_use();
  const std::string level = in_use >= CpuIsa::Avx2 ? "avx2" : "portable";
  const std::string bf16_kernel = in_use >= CpuIsa::Amx          ? "amx"
                                  : in_use >= CpuIsa::Avx512Bf16 ? "avx512-bf16"
                                                                 : level;
  const std::string fp32_kernel = in_use >= CpuIsa::Avx512Bf16 ? "avx512-f32" : level;
  EXPECT_EQ(small_matmul_kernel_name(ElemType::BF16, ElemType::BF16), bf16_kernel);
  EXPECT_EQ(small_matmul_kernel_name(ElemType::F32, ElemType::BF16), fp32_kernel) << "fp32 x: no bf16 pair kernel";
  // Batch-invariant (the default): every row count on the kernel.
  EXPECT_EQ(model::linear_product_paths(at::kBFloat16), "small_matmul (" + bf16_kernel + ") at every row count");
  EXPECT_EQ(model::linear_product_paths(at::kFloat), "small_matmul (" + fp32_kernel + ") at every row count");
  EXPECT_EQ(model::linear_product_path(at::kFloat, 4096), "small_matmul (" + fp32_kernel + ")");
  // With a limit, the many-row side: widened where bf16 products are not native.
  MaxRowsScope rows(16);
  const std::string bf16_above = cpu_has_native_bf16_products() ? "LibTorch GEMM (bfloat16)"
                                                                : "fp32 GEMM over widened bf16 tiles";
  EXPECT_EQ(model::linear_product_paths(at::kBFloat16),
            "small_matmul (" + bf16_kernel + ") up to 16 rows, " + bf16_above + " above");
  EXPECT_EQ(model::linear_product_path(at::kBFloat16, 17), bf16_above);
  EXPECT_EQ(model::linear_product_path(at::kBFloat16, 16), "small_matmul (" + bf16_kernel + ")");
  EXPECT_EQ(model::linear_product_path(at::kFloat, 17), "LibTorch GEMM (float32)");
  // What the names claim is what runs: a widened product where named so.
  const at::Tensor w = at::randn({8, 64}).to(at::kBFloat16), x = at::randn({17, 64}).to(at::kBFloat16);
  EXPECT_EQ(model::uses_widened_product(x, w), bf16_above == "fp32 GEMM over widened bf16 tiles");
  MaxRowsScope none(0);
  EXPECT_EQ(model::linear_product_paths(at::kFloat), "LibTorch GEMM (float32) at every row count");
}

// TIERGEN_CPU_ISA caps the level for the process (tests/run_isa_levels.sh runs the
// kernel suites once per level): the level in use is the lower of the cap and what the
// CPU supports, and enabling a kernel never goes above it.
TEST(CpuIsa, TheCapHoldsOverEveryKernelSwitch) {
  for (CpuIsa isa : {CpuIsa::Portable, CpuIsa::Avx2, CpuIsa::Avx512Bf16, CpuIsa::Amx}) {
    EXPECT_EQ(cpu_isa_from_name(cpu_isa_name(isa)), isa);
  }
  EXPECT_FALSE(cpu_isa_from_name("avx512").has_value());
  const CpuIsa in_use = cpu_isa_in_use();
  EXPECT_LE(in_use, cpu_isa_cap());
  EXPECT_LE(in_use, cpu_isa_supported());
  EXPECT_TRUE(in_use == cpu_isa_cap() || in_use == cpu_isa_supported());
  set_avx2_kernels_enabled(true);
  set_avx512_bf16_kernels_enabled(true);
  set_amx_kernels_enabled(true);
  EXPECT_EQ(use_avx2_kernels(), in_use >= CpuIsa::Avx2);
  EXPECT_EQ(use_avx512_bf16_kernels(), in_use >= CpuIsa::Avx512Bf16);
  EXPECT_EQ(use_amx_kernels(), in_use >= CpuIsa::Amx);
  const char* expected = std::getenv("TIERGEN_EXPECT_CPU_ISA");  // set by run_isa_levels.sh
  if (expected != nullptr) EXPECT_STREQ(cpu_isa_name(in_use), expected);
}

}  // namespace
}  // namespace tiergen::kernels
