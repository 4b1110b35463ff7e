// The fused CPU kernels of a LLaMA layer's elementwise work (kernels/cpu/rms_norm,
// kernels/cpu/rotary, kernels/cpu/silu_gate) against the LibTorch operators they replace, which follow
// transformers: the same roundings in the element type, so 16-bit results agree to the
// last bit where the operators' order is the kernel's (RoPE) and to one unit in the last
// place where only a sum's order differs (RMSNorm's mean); fp32 to rounding.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cpu/rotary.h"
#include "kernels/cpu/silu_gate.h"
#include "tiergen/common/error.h"
#include "tiergen/common/kernel_elem_type.h"
#if defined(__x86_64__)
#include "kernels/cpu/simd_avx2.h"
#endif

namespace tiergen::kernels {
namespace {

const at::ScalarType kTypes[] = {at::kFloat, at::kBFloat16, at::kHalf};

// transformers' LlamaRMSNorm as LibTorch operators.
at::Tensor rms_norm_operators(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor xf = x.to(at::kFloat);
  return weight * (xf * at::rsqrt(xf.pow(2).mean(-1, true) + eps)).to(x.scalar_type());
}

at::Tensor rms_norm_kernel(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor y = at::empty_like(x);
  RmsNormArgs a;
  a.x = x.data_ptr();
  a.weight = weight.data_ptr();
  a.y = y.data_ptr();
  a.type = kernel_elem_type(x.scalar_type());
  a.cols = x.size(-1);
  a.rows = x.numel() / a.cols;
  a.eps = static_cast<float>(eps);
  rms_norm(a);
  return y;
}

// Largest difference in units of the element type's spacing at each reference value.
double max_ulps(const at::Tensor& got, const at::Tensor& want) {
  const int mantissa = want.scalar_type() == at::kBFloat16 ? 7 : want.scalar_type() == at::kHalf ? 10 : 23;
  const at::Tensor w = want.to(at::kDouble), g = got.to(at::kDouble);
  const at::Tensor spacing = at::pow(2.0, at::floor(at::log2(w.abs().clamp_min(1e-30))) - mantissa);
  return ((g - w).abs() / spacing).max().item<double>();
}

TEST(RmsNormKernel, MatchesTransformersRoundingsInEveryType) {
  at::manual_seed(3);
  for (at::ScalarType type : kTypes) {
    for (int64_t cols : {7, 64, 2048, 2051}) {
      SCOPED_TRACE(std::string(c10::toString(type)) + " cols " + std::to_string(cols));
      const at::Tensor x = (at::randn({5, cols}) * 3).to(type);
      const at::Tensor weight = (at::rand({cols}) + 0.5).to(type);
      const at::Tensor got = rms_norm_kernel(x, weight, 1e-5);
      const at::Tensor want = rms_norm_operators(x, weight, 1e-5);
      // The normalized value is rounded once more before the weight multiplies: a
      // mean summed in another order can move it, and so the result, by one unit.
      EXPECT_LE(max_ulps(got, want), type == at::kFloat ? 4.0 : 1.0);
      EXPECT_LT((got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>(),
                (type == at::kFloat ? 1e-5 : 2e-2) * want.abs().max().item<double>());
    }
  }
}

TEST(RmsNormKernel, ARowOfZerosStaysZeroAndEpsCounts) {
  const at::Tensor x = at::zeros({2, 16});
  const at::Tensor weight = at::ones({16});
  EXPECT_TRUE(at::equal(rms_norm_kernel(x, weight, 1e-6), x));
  // A tiny row: eps dominates the mean, as in the operators.
  const at::Tensor tiny = at::full({1, 8}, 1e-4f);
  EXPECT_TRUE(at::allclose(rms_norm_kernel(tiny, at::ones({8}), 1e-2), rms_norm_operators(tiny, at::ones({8}), 1e-2)));
}

TEST(RmsNormKernel, BadArgumentsAreRefused) {
  RmsNormArgs a;
  EXPECT_THROW(rms_norm(a), Error);
  float x[4] = {}, w[4] = {}, y[4] = {};
  a.x = x;
  a.weight = w;
  a.y = y;
  a.rows = 1;
  a.cols = 0;
  EXPECT_THROW(rms_norm(a), Error);
}

// transformers' apply_rotary_pos_emb on [b, heads, t, d] with tables [b, 1, t, d].
at::Tensor rotary_operators(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

TEST(RotaryKernel, MatchesTransformersBitForBitIn16BitTypesAndToRoundingInFp32) {
  at::manual_seed(5);
  const int64_t b = 3, t = 4, heads = 5, d = 64;
  const at::Tensor angles = at::rand({b, 1, t, d / 2}) * 40;
  const at::Tensor emb = at::cat({angles, angles}, -1);
  for (at::ScalarType type : kTypes) {
    SCOPED_TRACE(c10::toString(type));
    const at::Tensor cos = emb.cos().to(type), sin = emb.sin().to(type);
    const at::Tensor projection = (at::randn({b, t, heads * d}) * 4).to(type);  // as a q projection leaves it
    const at::Tensor want = rotary_operators(projection.view({b, t, heads, d}).transpose(1, 2), cos, sin);
    at::Tensor got = projection.clone();
    RotaryArgs a;
    a.x = got.data_ptr();
    a.cos = cos.data_ptr();
    a.sin = sin.data_ptr();
    a.type = kernel_elem_type(type);
    a.rows = b * t;
    a.heads = heads;
    a.head_dim = d;
    apply_rotary(a);
    const at::Tensor got_heads = got.view({b, t, heads, d}).transpose(1, 2);
    if (type == at::kFloat) {
      EXPECT_LT((got_heads - want).abs().max().item<double>(), 1e-5 * want.abs().max().item<double>());
    } else {
      EXPECT_TRUE(at::equal(got_heads, want));
    }
  }
}

// A prefill's rows are shared between threads: every row the same as on one thread,
// and as that row alone.
TEST(RmsNormAndRotaryKernels, PrefillRowsOnTwoThreadsAreTheRowsAlone) {
  at::manual_seed(11);
  const int64_t rows = 96, heads = 8, d = 64, cols = heads * d * 4;  // above the kernels' parallel limits
  for (at::ScalarType type : kTypes) {
    SCOPED_TRACE(c10::toString(type));
    const at::Tensor x = (at::randn({rows, cols}) * 3).to(type), weight = (at::rand({cols}) + 0.5).to(type);
    auto norm = [&](const at::Tensor& in, int threads) {
      at::Tensor y = at::empty_like(in);
      RmsNormArgs a;
      a.x = in.data_ptr();
      a.weight = weight.data_ptr();
      a.y = y.data_ptr();
      a.type = kernel_elem_type(type);
      a.cols = cols;
      a.rows = in.numel() / cols;
      a.eps = 1e-5f;
      a.num_threads = threads;
      rms_norm(a);
      return y;
    };
    const at::Tensor normed = norm(x, 2);
    EXPECT_TRUE(at::equal(normed, norm(x, 1)));
    for (int64_t row : {0, 31, 95}) EXPECT_TRUE(at::equal(normed[row], norm(x[row].contiguous(), 2))) << row;

    const at::Tensor angles = at::rand({rows, d / 2}) * 40;
    const at::Tensor emb = at::cat({angles, angles}, -1);
    const at::Tensor cos = emb.cos().to(type), sin = emb.sin().to(type);
    const at::Tensor q = (at::randn({rows, heads * d}) * 4).to(type);
    auto rotate = [&](const at::Tensor& in, int64_t first_row, int threads) {
      at::Tensor out = in.clone();
      RotaryArgs a;
      a.x = out.data_ptr();
      a.cos = cos[first_row].data_ptr();
      a.sin = sin[first_row].data_ptr();
      a.type = kernel_elem_type(type);
      a.rows = in.numel() / (heads * d);
      a.heads = heads;
      a.head_dim = d;
      a.num_threads = threads;
      apply_rotary(a);
      return out;
    };
    const at::Tensor rotated = rotate(q, 0, 2);
    EXPECT_FALSE(at::equal(rotated, q));
    EXPECT_TRUE(at::equal(rotated, rotate(q, 0, 1)));
    for (int64_t row : {0, 40, 95}) EXPECT_TRUE(at::equal(rotated[row], rotate(q[row].contiguous(), row, 2))) << row;
  }
}

TEST(RotaryKernel, AnOddHeadDimIsRefused) {
  float x[6] = {}, cs[3] = {};
  RotaryArgs a;
  a.x = x;
  a.cos = cs;
  a.sin = cs;
  a.rows = 1;
  a.heads = 2;
  a.head_dim = 3;
  EXPECT_THROW(apply_rotary(a), Error);
}

at::Tensor silu_gate_kernel(const at::Tensor& gate, const at::Tensor& up, int threads) {
  at::Tensor y = at::empty_like(gate);
  SiluGateArgs a;
  a.gate = gate.data_ptr();
  a.up = up.data_ptr();
  a.y = y.data_ptr();
  a.type = kernel_elem_type(gate.scalar_type());
  a.count = gate.numel();
  a.num_threads = threads;
  silu_gate(a);
  return y;
}

// transformers' act_fn(gate) * up: the same roundings in every type (silu's own last
// bits may differ from LibTorch's vector exp by a unit in fp32), and every element the
// same alone as among any number of others and on any number of threads: a row's
// activations do not depend on its batch, which at::silu's scalar tail broke.
TEST(SiluGateKernel, MatchesTransformersAndDoesNotDependOnTheRowsBesideIt) {
  at::manual_seed(5);
  for (at::ScalarType type : kTypes) {
    SCOPED_TRACE(c10::toString(type));
    const at::Tensor gate = (at::randn({37, 131}) * 4).to(type), up = at::randn({37, 131}).to(type);
    const at::Tensor got = silu_gate_kernel(gate, up, 2);
    // silu in fp32 rounded to the type (LibTorch 1.13 has no fp16 silu on the CPU): a
    // unit of fp32 can cross a 16-bit rounding boundary, and the product rounds again.
    const at::Tensor want = at::silu(gate.to(at::kFloat)).to(type) * up;
    EXPECT_LE(max_ulps(got, want), type == at::kFloat ? 4.0 : 2.0);
    EXPECT_TRUE(at::equal(silu_gate_kernel(gate, up, 1), got)) << "thread count";
    for (int64_t row : {0, 17, 36}) {
      const at::Tensor alone = silu_gate_kernel(gate[row].contiguous(), up[row].contiguous(), 1);
      EXPECT_TRUE(at::equal(alone, got[row])) << "row " << row;
    }
  }
  SiluGateArgs bad;
  bad.count = 3;
  EXPECT_THROW(silu_gate(bad), Error) << "null pointers";
}

// Beyond the range of the random test: where e^-g overflows (silu is -0), underflows
// (silu is g), and non-finite gates, the same as the scalar formula with std::exp.
TEST(SiluGateKernel, ExtremeGatesGiveWhatTheScalarFormulaGives) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> gates = {-1e30f, -200.0f, -104.5f, -89.0f, -88.7f, -87.0f, -30.0f, -1e-30f, 0.0f,
                                    1e-30f, 30.0f, 87.0f, 88.8f, 104.5f, 200.0f, 1e30f, inf, -inf};
  const at::Tensor gate = at::tensor(gates), up = at::ones({static_cast<int64_t>(gates.size())});
  const at::Tensor got = silu_gate_kernel(gate, up, 1);
  for (size_t i = 0; i < gates.size(); ++i) {
    const float g = gates[i];
    const float want = g / (1.0f + std::exp(-g));
    const float have = got[static_cast<int64_t>(i)].item<float>();
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(have)) << "gate " << g;
    } else if (std::isinf(want)) {
      EXPECT_EQ(have, want) << "gate " << g;
    } else {
      EXPECT_NEAR(have, want, 4 * std::abs(want) * std::numeric_limits<float>::epsilon()) << "gate " << g;
      EXPECT_EQ(std::signbit(have), std::signbit(want)) << "gate " << g;
    }
  }
  const at::Tensor nan = silu_gate_kernel(at::full({9}, std::nanf("")), at::ones({9}), 1);
  EXPECT_TRUE(nan.isnan().all().item<bool>()) << "a NaN gate stays NaN";
}

// Many elements, split into tasks between threads: the same on one thread and two, and
// every slice the same as computed alone (its tail through the kernel's padded copy).
TEST(SiluGateKernel, TasksAndTailsDoNotChangeAnElement) {
  at::manual_seed(9);
  const int64_t count = 3 * 16384 + 5;
  for (at::ScalarType type : kTypes) {
    SCOPED_TRACE(c10::toString(type));
    const at::Tensor gate = (at::randn({count}) * 6).to(type), up = at::randn({count}).to(type);
    const at::Tensor got = silu_gate_kernel(gate, up, 2);
    EXPECT_TRUE(at::equal(silu_gate_kernel(gate, up, 1), got));
    for (int64_t begin : {int64_t{0}, int64_t{3}, int64_t{16380}, count - 13}) {
      const at::Tensor alone = silu_gate_kernel(gate.narrow(0, begin, 13).contiguous(), up.narrow(0, begin, 13).contiguous(), 1);
      EXPECT_TRUE(at::equal(alone, got.narrow(0, begin, 13))) << "from " << begin;
    }
  }
}

#if defined(__x86_64__)
TG_AVX2 void exp8_of(const float* x, float* y) { avx2::store8_f32(y, avx2::exp8(avx2::load8_f32(x))); }

// The AVX2 silu's exp: within 2 units of fp32 of the exact value over the whole range
// (subnormal results within 2 subnormal units), +inf past ln(FLT_MAX), 0 far below,
// NaN for NaN, and each lane alone (the same value in every lane position).
TEST(SiluGateKernel, TheVectorExpIsWithinTwoUnitsEverywhere) {
  if (!use_avx2_kernels()) GTEST_SKIP() << "no AVX2 kernels on this CPU or under this TIERGEN_CPU_ISA";
  std::vector<float> xs;
  for (double x = -106.0; x <= 89.0; x += 0.0137) xs.push_back(static_cast<float>(x));
  for (float x : {88.72283935546875f, 88.7228f, 88.7229f, -87.3365f, -103.97f, -0.0f, 1e-7f, -1e-7f, 0.5f * 0.6931472f})
    xs.push_back(x);
  while (xs.size() % 8) xs.push_back(1.0f);
  std::vector<float> ys(xs.size());
  for (size_t i = 0; i < xs.size(); i += 8) exp8_of(&xs[i], &ys[i]);
  const double unit_min = std::numeric_limits<float>::denorm_min(), flt_max = std::numeric_limits<float>::max();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double exact = std::exp(static_cast<double>(xs[i]));
    if (exact > flt_max) {
      EXPECT_TRUE(std::isinf(ys[i])) << "x " << xs[i];
      continue;
    }
    const double unit = std::max(unit_min, std::ldexp(1.0, std::ilogb(exact) - 23));
    EXPECT_LE(std::abs(ys[i] - exact), 2 * unit) << "x " << xs[i] << " got " << ys[i] << " exact " << exact;
  }
  float specials[8] = {std::nanf(""), std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                       -1e30f, 1e30f, -200.0f, 0.0f, 1.0f};
  float out[8];
  exp8_of(specials, out);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isinf(out[1]) && out[1] > 0);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 0.0f);
  EXPECT_TRUE(std::isinf(out[4]) && out[4] > 0);
  EXPECT_EQ(out[5], 0.0f);
  EXPECT_EQ(out[6], 1.0f);
  // Lane position does not matter: 1.0 in lane 7 here, in lane 0 of its own.
  float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1}, e1[8];
  exp8_of(ones, e1);
  for (float e : e1) EXPECT_EQ(e, out[7]);
}
#endif

}  // namespace
}  // namespace tiergen::kernels
