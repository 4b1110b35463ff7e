// CPU decode attention against a naive double-precision reference (ATen), for every
// cache format, grouped-query attention, left padding and partial views of a cache.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/quantize.h"
#include "tiergen/common/error.h"

namespace tiergen::kernels {
namespace {

enum class Kind { F32, F16, BF16, Q4, Q8 };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::F32: return "f32";
    case Kind::F16: return "f16";
    case Kind::BF16: return "bf16";
    case Kind::Q4: return "q4";
    case Kind::Q8: return "q8";
  }
  return "?";
}

struct Shape {
  int64_t batch, heads, kv_heads, head_dim, max_len, seq_len;
  std::vector<int64_t> start;
};

// One of K/V stored in a format; `values` are the floats the stored cache represents
// (after fp16/bf16 rounding or quantization), `original` the floats it was made from.
struct Cache {
  std::vector<float> original, values;
  std::vector<uint8_t> bytes;
  std::vector<uint16_t> mins, scales;
  KvView view;
};

Cache make_cache(Kind kind, const Shape& s, int group_size, uint32_t seed) {
  const int64_t rows = s.batch * s.kv_heads * s.max_len, d = s.head_dim;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  Cache c;
  c.original.resize(rows * d);
  for (float& x : c.original) x = normal(rng);
  c.values = c.original;
  if (kind == Kind::Q4 || kind == Kind::Q8) {
    const QuantFormat f{kind == Kind::Q4 ? 4 : 8, group_size};
    const QuantizedLayout l = quantized_layout(rows, d, f);
    c.bytes.resize(l.packed_bytes());
    c.mins.resize(l.meta_elems());
    c.scales.resize(l.meta_elems());
    quantize(c.original.data(), ElemType::F32, rows, d, f, c.bytes.data(), c.mins.data(), c.scales.data());
    dequantize(c.bytes.data(), c.mins.data(), c.scales.data(), rows, d, f, c.values.data(), ElemType::F32);
    c.view = KvView::compressed(c.bytes.data(), c.mins.data(), c.scales.data(), f);
  } else {
    const ElemType type = kind == Kind::F32 ? ElemType::F32 : kind == Kind::F16 ? ElemType::F16 : ElemType::BF16;
    c.bytes.resize(rows * d * elem_size(type));
    for (int64_t i = 0; i < rows * d; ++i) {
      if (type == ElemType::F32) {
        std::memcpy(&c.bytes[i * 4], &c.values[i], 4);
      } else {
        const uint16_t h = type == ElemType::F16 ? float_to_half(c.values[i]) : float_to_bf16(c.values[i]);
        std::memcpy(&c.bytes[i * 2], &h, 2);
        c.values[i] = type == ElemType::F16 ? half_to_float(h) : bf16_to_float(h);
      }
    }
    c.view = KvView::dense(c.bytes.data(), type);
  }
  // Poison every row outside [start[b], seq_len): reading one would give NaN.
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t kh = 0; kh < s.kv_heads; ++kh) {
      for (int64_t t = 0; t < s.max_len; ++t) {
        if (t >= s.start[b] && t < s.seq_len) continue;
        const int64_t r = (b * s.kv_heads + kh) * s.max_len + t;
        if (c.view.quantized) {
          const QuantizedLayout l = quantized_layout(1, d, c.view.format);
          for (int64_t k = 0; k < l.groups_per_row; ++k) c.mins[r * l.groups_per_row + k] = 0x7E00;
        } else if (c.view.type == ElemType::F32) {
          const float nan = NAN;
          for (int64_t i = 0; i < d; ++i) std::memcpy(&c.bytes[(r * d + i) * 4], &nan, 4);
        } else {
          for (int64_t i = 0; i < d; ++i) c.bytes[(r * d + i) * 2 + 1] = 0x7F, c.bytes[(r * d + i) * 2] = 0xC1;
        }
      }
    }
  }
  return c;
}

// out[b, h] = softmax(scale * q K^T) V in double, from the given K/V floats.
std::vector<float> reference(const Shape& s, const std::vector<float>& q, const std::vector<float>& k,
                             const std::vector<float>& v, float scale) {
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  const int64_t d = s.head_dim, n_rep = s.heads / s.kv_heads;
  at::Tensor tq = at::from_blob(const_cast<float*>(q.data()), {s.batch, s.heads, d}, opts).to(at::kDouble);
  at::Tensor tk = at::from_blob(const_cast<float*>(k.data()), {s.batch, s.kv_heads, s.max_len, d}, opts).to(at::kDouble);
  at::Tensor tv = at::from_blob(const_cast<float*>(v.data()), {s.batch, s.kv_heads, s.max_len, d}, opts).to(at::kDouble);
  at::Tensor out = at::zeros({s.batch, s.heads, d}, at::kDouble);
  for (int64_t b = 0; b < s.batch; ++b) {
    if (s.start[b] >= s.seq_len) continue;
    for (int64_t h = 0; h < s.heads; ++h) {
      const at::Tensor keys = tk[b][h / n_rep].slice(0, s.start[b], s.seq_len);
      const at::Tensor vals = tv[b][h / n_rep].slice(0, s.start[b], s.seq_len);
      const at::Tensor p = at::softmax(at::matmul(keys, tq[b][h]) * double(scale), 0);
      out[b][h] = at::matmul(p, vals);
    }
  }
  at::Tensor f = out.to(at::kFloat).contiguous();
  return std::vector<float>(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
}

double max_rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double max_diff = 0, max_ref = 1e-30;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    max_diff = std::max(max_diff, std::fabs(double(got[i]) - want[i]));
    max_ref = std::max(max_ref, std::fabs(double(want[i])));
  }
  return max_diff / max_ref;
}

// Error against the exact result of the original fp32 cache, per format: the price of
// storing it rounded or quantized.
double storage_tolerance(Kind kind) {
  switch (kind) {
    case Kind::F32: return 1e-5;
    case Kind::F16: return 2e-3;
    case Kind::BF16: return 1.5e-2;
    case Kind::Q8: return 2e-2;
    case Kind::Q4: return 0.25;
  }
  return 0;
}

struct AttentionRun {
  std::vector<float> out, exact_ref, original_ref;
};

AttentionRun run_case(Kind kind, const Shape& s, int group_size = 64, uint32_t seed = 1) {
  const Cache k = make_cache(kind, s, group_size, seed * 2), v = make_cache(kind, s, group_size, seed * 2 + 1);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> q(s.batch * s.heads * s.head_dim);
  for (float& x : q) x = 2.0f * normal(rng);  // peaked enough that softmax is not uniform
  DecodeAttentionArgs a;
  a.q = q.data();
  AttentionRun run;
  run.out.assign(q.size(), NAN);
  a.out = run.out.data();
  a.batch = s.batch;
  a.num_heads = s.heads;
  a.num_kv_heads = s.kv_heads;
  a.head_dim = s.head_dim;
  a.max_len = s.max_len;
  a.seq_len = s.seq_len;
  a.start = s.start.data();
  a.scale = 1.0f / std::sqrt(float(s.head_dim));
  a.k = k.view;
  a.v = v.view;
  decode_attention(a);
  run.exact_ref = reference(s, q, k.values, v.values, a.scale);
  run.original_ref = reference(s, q, k.original, v.original, a.scale);
  return run;
}

void check_case(Kind kind, const Shape& s, int group_size = 64) {
  SCOPED_TRACE(testing::Message() << kind_name(kind) << " batch " << s.batch << " heads " << s.heads << "/"
                                  << s.kv_heads << " d " << s.head_dim << " seq " << s.seq_len << " g " << group_size);
  const AttentionRun r = run_case(kind, s, group_size);
  EXPECT_LT(max_rel_error(r.out, r.exact_ref), 2e-5);
  EXPECT_LT(max_rel_error(r.out, r.original_ref), storage_tolerance(kind));
}

constexpr Kind kAllKinds[] = {Kind::F32, Kind::F16, Kind::BF16, Kind::Q4, Kind::Q8};

TEST(KernelsAttention, GroupedQueryWithLeftPadding) {
  for (Kind kind : kAllKinds) {
    for (int64_t d : {64, 128}) {
      check_case(kind, {4, 8, 2, d, 48, 37, {0, 3, 10, 36}});
    }
  }
}

TEST(KernelsAttention, MultiHeadAndOddGroupRatios) {
  for (Kind kind : kAllKinds) {
    check_case(kind, {3, 4, 4, 64, 20, 20, {0, 1, 2}});   // one query head per kv head
    check_case(kind, {2, 6, 1, 128, 40, 33, {5, 0}});     // 6 heads share one kv head
    check_case(kind, {2, 6, 2, 64, 16, 9, {0, 4}});       // 3 heads per kv head
  }
}

TEST(KernelsAttention, SingleFilledPosition) {
  for (Kind kind : kAllKinds) {
    check_case(kind, {2, 8, 2, 128, 8, 1, {0, 0}});
    // With one position, the output is exactly that position's V row (softmax of one).
    const AttentionRun r = run_case(kind, {1, 2, 1, 64, 4, 1, {0}});
    EXPECT_LT(max_rel_error(r.out, r.exact_ref), 1e-6);
  }
}

TEST(KernelsAttention, PortableKernelShapes) {
  // head_dim and group sizes that are not multiples of 8 take the portable kernel.
  for (Kind kind : kAllKinds) check_case(kind, {2, 4, 2, 36, 12, 11, {0, 5}}, 4);
  check_case(Kind::Q4, {2, 4, 2, 64, 12, 11, {2, 0}}, 4);
  check_case(Kind::Q8, {2, 4, 2, 64, 12, 11, {2, 0}}, 12);
}

TEST(KernelsAttention, PortableAndAvx2KernelsAgree) {
  if (!use_avx2_kernels()) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C; only the portable kernel runs";
  for (Kind kind : kAllKinds) {
    const Shape s{3, 8, 2, 128, 70, 67, {0, 9, 30}};
    const AttentionRun simd = run_case(kind, s, 32, 7);
    set_avx2_kernels_enabled(false);
    const AttentionRun plain = run_case(kind, s, 32, 7);
    set_avx2_kernels_enabled(true);
    EXPECT_LT(max_rel_error(simd.out, plain.out), 2e-5) << kind_name(kind);
  }
}

TEST(KernelsAttention, SequenceWithNothingToAttendGetsZeros) {
  const AttentionRun r = run_case(Kind::F16, {2, 4, 2, 64, 8, 5, {5, 0}});
  for (int64_t i = 0; i < 4 * 64; ++i) ASSERT_EQ(r.out[i], 0.0f);
  EXPECT_LT(max_rel_error(r.out, r.exact_ref), 2e-5);
}

// A tier holding sequences [1, 3) of a batch passes views that start at sequence 1 and
// a q/out that is part of the full batch's tensors.
TEST(KernelsAttention, SubBatchViewWithStrides) {
  const Shape s{4, 8, 2, 64, 24, 20, {0, 2, 4, 6}};
  for (Kind kind : {Kind::F16, Kind::Q4}) {
    const Cache k = make_cache(kind, s, 64, 3), v = make_cache(kind, s, 64, 4);
    std::vector<float> q(s.batch * s.heads * s.head_dim, 0.5f);
    for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(float(i));
    std::vector<float> full(q.size()), part(q.size(), -7.0f);
    DecodeAttentionArgs a;
    a.q = q.data();
    a.out = full.data();
    a.batch = s.batch;
    a.num_heads = s.heads;
    a.num_kv_heads = s.kv_heads;
    a.head_dim = s.head_dim;
    a.max_len = s.max_len;
    a.seq_len = s.seq_len;
    a.start = s.start.data();
    a.scale = 0.125f;
    a.k = k.view;
    a.v = v.view;
    decode_attention(a);

    DecodeAttentionArgs p = a;
    const int64_t row0 = 1 * s.kv_heads * s.max_len, per_seq = s.heads * s.head_dim;
    auto shift = [&](KvView view) {
      if (view.quantized) {
        const QuantizedLayout l = quantized_layout(1, s.head_dim, view.format);
        view.data = static_cast<const uint8_t*>(view.data) + row0 * l.packed_bytes_per_row;
        view.mins += row0 * l.groups_per_row;
        view.scales += row0 * l.groups_per_row;
      } else {
        view.data = static_cast<const uint8_t*>(view.data) + row0 * s.head_dim * elem_size(view.type);
      }
      view.seq_stride = s.kv_heads * s.max_len;
      view.head_stride = s.max_len;
      return view;
    };
    p.k = shift(k.view);
    p.v = shift(v.view);
    p.batch = 2;
    p.start = s.start.data() + 1;
    p.q = q.data() + per_seq;
    p.out = part.data() + per_seq;
    p.num_threads = 1;
    decode_attention(p);
    for (int64_t i = 0; i < int64_t(q.size()); ++i) {
      const bool inside = i >= per_seq && i < 3 * per_seq;
      ASSERT_EQ(part[i], inside ? full[i] : -7.0f) << kind_name(kind) << " at " << i;
    }
  }
}

TEST(KernelsAttention, BadArgumentsAreErrors) {
  std::vector<float> q(8 * 64), out(8 * 64);
  std::vector<uint16_t> cache(2 * 16 * 64);
  DecodeAttentionArgs a;
  a.q = q.data();
  a.out = out.data();
  a.batch = 1;
  a.num_heads = 8;
  a.num_kv_heads = 3;
  a.head_dim = 64;
  a.max_len = 16;
  a.seq_len = 4;
  a.k = a.v = KvView::dense(cache.data(), ElemType::F16);
  EXPECT_THROW(decode_attention(a), Error);  // 8 heads over 3 kv heads
  a.num_kv_heads = 2;
  a.seq_len = 17;
  EXPECT_THROW(decode_attention(a), Error);  // beyond the cache capacity
  a.seq_len = 4;
  a.k.data = nullptr;
  EXPECT_THROW(decode_attention(a), Error);
  a.k = KvView::compressed(reinterpret_cast<const uint8_t*>(cache.data()), nullptr, nullptr, {4, 64});
  EXPECT_THROW(decode_attention(a), Error);  // quantized without metadata
  a.k = KvView::dense(cache.data(), ElemType::F16);
  const int64_t bad_start = -1;
  a.start = &bad_start;
  EXPECT_THROW(decode_attention(a), Error);
  a.start = nullptr;
  EXPECT_NO_THROW(decode_attention(a));
}

}  // namespace
}  // namespace tiergen::kernels
