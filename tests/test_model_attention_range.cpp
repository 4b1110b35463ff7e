// model::attend where the raw query-key dot products exceed the range of the compute
// dtype but the scaled scores (q.k / sqrt(d)) do not. Scaling the scores after QK^T
// turns such a row into inf and then NaN; scaling q first (or a fused kernel that
// accumulates in fp32) keeps it finite. Real fp16 checkpoints reach this range.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tiergen/common/torch_compat.h"
#include "tiergen/model/forward.h"

namespace tiergen::model {
namespace {

constexpr int64_t kHeads = 4, kKvHeads = 2, kTokens = 5, kHeadDim = 64;

// q rows are all `magnitude`; key j is `magnitude * (0.7 + 0.1 j)`, so every scaled
// score is large, later keys score higher by a wide margin, and each query attends
// (almost) only to itself under the causal mask: output i is v_i.
struct RangeCase {
  at::Tensor q, k, v;
  StepInputs step;
};

RangeCase range_case(double magnitude, at::ScalarType dtype) {
  RangeCase c;
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  c.q = at::full({1, kHeads, kTokens, kHeadDim}, magnitude, f64);
  const at::Tensor factors = (at::arange(kTokens, f64) * 0.1 + 0.7).view({1, 1, kTokens, 1});
  c.k = (at::full({1, kKvHeads, kTokens, kHeadDim}, magnitude, f64) * factors);
  c.v = at::arange(kKvHeads * kTokens * kHeadDim, f64).view({1, kKvHeads, kTokens, kHeadDim}).remainder(7.0) - 3.0;
  c.q = c.q.to(dtype);
  c.k = c.k.to(dtype);
  c.v = c.v.to(dtype);
  c.step.pad = at::zeros({1}, at::kLong);
  c.step.positions = at::arange(kTokens, at::kLong).unsqueeze(0);
  c.step.past_len = 0;
  return c;
}

// Output i is v_i of query head h's kv head: [1, t, heads * d].
at::Tensor expected_output(const RangeCase& c) {
  const at::Tensor v = c.v.to(at::kDouble);
  const int64_t groups = kHeads / kKvHeads;
  const at::Tensor per_head = v.unsqueeze(2).expand({1, kKvHeads, groups, kTokens, kHeadDim}).reshape({1, kHeads, kTokens, kHeadDim});
  return per_head.transpose(1, 2).reshape({1, kTokens, kHeads * kHeadDim});
}

bool cpu_matmul_supports(at::ScalarType dtype) {
  try {
    const at::Tensor a = at::ones({2, 2}, at::TensorOptions().dtype(dtype));
    (void)at::matmul(a, a);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

void expect_finite_and_exact(const RangeCase& c, double tolerance) {
  const at::Tensor out = attend(c.q, c.k, c.v, c.step).to(at::kDouble);
  ASSERT_TRUE(at::isfinite(out).all().item<bool>()) << "attention produced inf/NaN:\n" << out.slice(2, 0, 4);
  const at::Tensor expected = expected_output(c);
  EXPECT_LE((out - expected).abs().max().item<double>(), tolerance);
}

// fp16: raw dot products up to 64 * 40^2 * 1.1 = 112640 > 65504 (fp16 max); scaled,
// at most 14080. LibTorch 1.13 has no fp16 matmul on the CPU, so there it skips.
TEST(AttentionRange, HalfScoresBeyondHalfRangeStayFinite) {
  if (!cpu_matmul_supports(at::kHalf)) GTEST_SKIP() << "this LibTorch has no fp16 matmul on the CPU";
  expect_finite_and_exact(range_case(40.0, at::kHalf), 1e-3);
}

#if !TIERGEN_HAS_SDPA || TIERGEN_SDPA_HAS_SCALE
// The same overflow in fp32, which every CPU LibTorch computes: raw dot products up to
// 64 * (3e18)^2 * 1.1 = 6.3e38 > 3.4e38 (fp32 max); scaled, at most 7.9e37. (LibTorch
// 2.0 has no `scale` argument for SDPA, so q cannot be scaled first there.)
TEST(AttentionRange, FloatScoresBeyondFloatRangeStayFinite) {
  expect_finite_and_exact(range_case(3e18, at::kFloat), 1e-5);
}
#endif

// Ordinary magnitudes: attention equals a double-precision reference with random
// inputs, grouped-query heads, left padding and cached positions.
TEST(AttentionRange, MatchesDoubleReferenceWithPaddingAndCache) {
  at::manual_seed(3);
  const int64_t b = 2, t = 3, past = 4, total = past + t;
  const at::Tensor q = at::randn({b, kHeads, t, kHeadDim});
  const at::Tensor k = at::randn({b, kKvHeads, total, kHeadDim});
  const at::Tensor v = at::randn({b, kKvHeads, total, kHeadDim});
  StepInputs step;
  step.pad = at::tensor(std::vector<int64_t>{0, 2}, at::kLong);
  step.past_len = past;
  const at::Tensor out = attend(q, k, v, step).to(at::kDouble);

  const int64_t groups = kHeads / kKvHeads;
  const at::Tensor qd = q.to(at::kDouble);
  const at::Tensor kd = k.to(at::kDouble).repeat_interleave(groups, 1);
  const at::Tensor vd = v.to(at::kDouble).repeat_interleave(groups, 1);
  at::Tensor scores = at::matmul(qd, kd.transpose(-1, -2)) / std::sqrt(static_cast<double>(kHeadDim));
  for (int64_t s = 0; s < b; ++s) {
    const int64_t pad = step.pad[s].item<int64_t>();
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t j = 0; j < total; ++j) {
        const bool visible = (j >= pad && j <= past + i) || j == past + i;
        if (!visible) scores[s].select(1, i).select(1, j).fill_(-INFINITY);
      }
    }
  }
  const at::Tensor expected = at::matmul(at::softmax(scores, -1), vd).transpose(1, 2).reshape({b, t, kHeads * kHeadDim});
  EXPECT_LE((out - expected).abs().max().item<double>(), 1e-5);
}

// cuDNN attention builds an execution graph per (batch, key length), and decode meets
// a new key length at every token (62 ms of host time per token on an H200): once the
// engine has attended, LibTorch's selector no longer offers it.
TEST(AttentionBackends, CudnnAttentionIsOffOnceTheEngineAttends) {
#if TIERGEN_SDPA_HAS_CUDNN
  const RangeCase c = range_case(1.0, at::kFloat);
  (void)attend(c.q, c.k, c.v, c.step);
  EXPECT_FALSE(at::globalContext().userEnabledCuDNNSDP());
  EXPECT_TRUE(at::globalContext().userEnabledMemEfficientSDP());
#else
  GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no cuDNN attention backend to switch off";
#endif
}

}  // namespace
}  // namespace tiergen::model
