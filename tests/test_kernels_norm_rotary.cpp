// The fused CPU kernels of a LLaMA layer's elementwise work (kernels/cpu/rms_norm,
// kernels/cpu/rotary, kernels/cpu/silu_gate) against the LibTorch operators they replace, which follow
// transformers: the same roundings in the element type, so 16-bit results agree to the
// last bit where the operators' order is the kernel's (RoPE) and to one unit in the last
// place where only a sum's order differs (RMSNorm's mean); fp32 to rounding.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/rms_norm.h"
#include "kernels/cpu/rotary.h"
#include "kernels/cpu/silu_gate.h"
#include "tiergen/common/error.h"
#include "tiergen/common/kernel_elem_type.h"

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

}  // namespace
}  // namespace tiergen::kernels
