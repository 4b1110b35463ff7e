// When a copy between [n, len, width] views may be one 2-D copy (src/runtime/
// pitched_rows.h, what the CUDA path hands to cudaMemcpy2DAsync), and when it must fall
// back to a plain copy: the pitches and width it would pass, and the cases the 2-D copy
// cannot take.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "src/runtime/pitched_rows.h"

namespace tiergen::runtime {
namespace {

// A unit-major cache [units, capacity, width] and its first `len` positions, as a
// decode step's copies see it.
at::Tensor cache_prefix(int64_t units, int64_t capacity, int64_t width, int64_t len) {
  return at::zeros({units, capacity, width}, at::kHalf).narrow(1, 0, len);
}

TEST(PitchedRows, ACachePrefixIsOneCopyOfItsRows) {
  const at::Tensor src = cache_prefix(4, 16, 8, 5);
  const at::Tensor dst = at::empty({4, 5, 8}, at::kHalf);
  const auto p = pitched_rows(dst, src);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->rows, 4u);
  EXPECT_EQ(p->width_bytes, 5u * 8 * 2);
  EXPECT_EQ(p->src_pitch, 16u * 8 * 2);
  EXPECT_EQ(p->dst_pitch, 5u * 8 * 2);
  // Into a prefix of another cache, both sides pitched.
  const auto both = pitched_rows(cache_prefix(4, 32, 8, 5), src);
  ASSERT_TRUE(both.has_value());
  EXPECT_EQ(both->dst_pitch, 32u * 8 * 2);
}

TEST(PitchedRows, CopiesThatAreNotOneTwoDimensionalCopyFallBack) {
  const at::Tensor src = cache_prefix(4, 16, 8, 5);
  EXPECT_FALSE(pitched_rows(at::empty({4, 5, 8}, at::kFloat), src)) << "types differ";
  EXPECT_FALSE(pitched_rows(at::empty({4, 6, 8}, at::kHalf), src)) << "shapes differ";
  EXPECT_FALSE(pitched_rows(at::empty({4, 5, 8}, at::kHalf), at::zeros({4, 5, 8}, at::kHalf)))
      << "both contiguous: one plain copy";
  EXPECT_FALSE(pitched_rows(at::empty({0, 5, 8}, at::kHalf), cache_prefix(0, 16, 8, 5))) << "nothing to copy";
  EXPECT_FALSE(pitched_rows(at::empty({1, 5, 8}, at::kHalf), cache_prefix(1, 16, 8, 5))) << "one unit is contiguous";
  EXPECT_FALSE(pitched_rows(at::empty({4, 5, 8}, at::kHalf), at::zeros({4, 8, 16}, at::kHalf).narrow(2, 0, 8)))
      << "rows not contiguous";
  EXPECT_FALSE(pitched_rows(at::empty({4, 5, 8}, at::kHalf).view({4, 40}), src.reshape({4, 40}))) << "not 3-D";
}

TEST(PitchedRows, PitchesTheTwoDimensionalCopyCannotTakeFallBack) {
  const at::Tensor dst = at::empty({3, 2, 4}, at::kFloat);
  // Rows 4 elements apart but 8 wide: they overlap.
  const at::Tensor storage = at::zeros({64}, at::kFloat);
  const at::Tensor overlapping = storage.as_strided({3, 2, 4}, {4, 4, 1});
  EXPECT_FALSE(pitched_rows(dst, overlapping));
  const at::Tensor pitched = storage.as_strided({3, 2, 4}, {16, 4, 1});
  EXPECT_TRUE(pitched_rows(dst, pitched).has_value());
  EXPECT_FALSE(pitched_rows(overlapping, pitched)) << "either side";
  // Rows 2^31 bytes apart (no storage: meta tensors carry sizes and strides only).
  const auto meta = at::TensorOptions().dtype(at::kFloat).device(at::kMeta);
  const at::Tensor far_dst = at::empty({3, 2, 4}, meta);
  const at::Tensor at_limit = at::empty_strided({3, 2, 4}, {int64_t(kMaxCopyPitchBytes / 4), 4, 1}, meta);
  const at::Tensor past_limit = at::empty_strided({3, 2, 4}, {int64_t(1) << 29, 4, 1}, meta);
  EXPECT_TRUE(pitched_rows(far_dst, at_limit).has_value()) << "pitch 2^31 - 4 bytes";
  EXPECT_FALSE(pitched_rows(far_dst, past_limit)) << "pitch 2^31 bytes";
  EXPECT_FALSE(pitched_rows(past_limit, at::empty_strided({3, 2, 4}, {16, 4, 1}, meta)))
      << "on the destination side";
}

}  // namespace
}  // namespace tiergen::runtime
