// Decode attention over the KV cache's homes (runtime/kv_cache.h). On the CPU stand-in
// the gpu home is host memory, which the CPU attention kernel reads in place: the same
// fused fp32 pass a cpu home gets with CPU attention, not LibTorch's bf16 operators.
#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"
#include "tests/support/tiny_model.h"
#include "tiergen/runtime/kv_cache.h"

namespace tiergen::test {
namespace {

using A = std::array<double, 6>;

struct CacheRun {
  std::vector<at::Tensor> outputs;  // one [b, 1, heads * d] per decode step
  double cpu_attention_seconds = 0;  // the Stats' CpuAttention host time
};

// `steps` decode steps of one layer over a cache homed by `percent`, with the same
// seeded queries and new entries whatever the home; rows have left padding {0, 2, 1}.
CacheRun run_decode_attention(const model::Spec& spec, const A& percent, bool cpu_attention,
                              const std::string& dtype, bool compressed, int steps) {
  const int64_t b = 3, d = spec.head_dim;
  runtime::Policy policy = make_policy(b, 1, percent, cpu_attention);
  if (compressed) policy.compress_cache = {true, 4, 16};
  TempDir offload("kv_cache");
  const runtime::EngineOptions options = cpu_engine_options(offload.path, 1ull << 30, dtype);
  runtime::Tiers tiers(options.budgets, options.offload_dir, percent[2] + percent[3] < 100, 1);
  runtime::KvCache cache(spec, policy, tiers, options.device, steps, runtime::StageLayers::whole(spec));
  runtime::Stats stats;
  const at::Tensor pad = at::tensor({0, 2, 1}, at::kLong);
  at::manual_seed(17);
  CacheRun run;
  for (int64_t pos = 0; pos < steps; ++pos) {
    const auto opts = options.device.compute_options();
    model::QkvProjection qkv{at::randn({b, spec.num_heads, 1, d}, opts), at::randn({b, spec.num_kv_heads, 1, d}, opts),
                             at::randn({b, spec.num_kv_heads, 1, d}, opts)};
    model::StepInputs step{at::Tensor(), pad, pos};
    const auto loaded = cache.load(0, 0, pos);
    std::vector<std::function<void()>> stores;
    run.outputs.push_back(cache.decode_attention(0, 0, qkv, step, pad, loaded.get(), stats,
                                                 runtime::StepId{pos, 1, 0, 0}, stores));
    for (auto& store : stores) store();
  }
  run.cpu_attention_seconds = stats.host_seconds(runtime::Task::CpuAttention, false);
  return run;
}

model::Spec grouped_query_spec() { return make_tiny_model(tiny_llama(71)).spec; }

TEST(KvCacheOnTheCpuDevice, AGpuHomeIsAttendedByTheCpuKernelInPlace) {
  const model::Spec spec = grouped_query_spec();
  ASSERT_GT(spec.num_heads, spec.num_kv_heads) << "grouped-query attention is part of the check";
  for (const std::string dtype : {"bfloat16", "float32"}) {
    for (bool compressed : {false, true}) {
      SCOPED_TRACE(dtype + (compressed ? " compressed" : ""));
      const CacheRun gpu_home = run_decode_attention(spec, A{100, 0, 100, 0, 100, 0}, false, dtype, compressed, 6);
      const CacheRun cpu_home = run_decode_attention(spec, A{100, 0, 0, 100, 100, 0}, true, dtype, compressed, 6);
      ASSERT_EQ(gpu_home.outputs.size(), cpu_home.outputs.size());
      for (size_t s = 0; s < gpu_home.outputs.size(); ++s) {
        // Bit for bit: one kernel over the same stored rows.
        EXPECT_TRUE(at::equal(gpu_home.outputs[s], cpu_home.outputs[s])) << "step " << s;
      }
      // The stand-in's gpu home is no CPU attention of the policy's: its time is compute.
      EXPECT_EQ(gpu_home.cpu_attention_seconds, 0.0);
      EXPECT_GT(cpu_home.cpu_attention_seconds, 0.0);
    }
  }
}

// The kernel's result is attention itself: within fp32 rounding of the LibTorch
// operators' result in float32 (a cpu home without CPU attention is copied to the
// stand-in "device" and attended by model::attend).
TEST(KvCacheOnTheCpuDevice, TheKernelOnAGpuHomeMatchesTheOperatorsOnACopiedHome) {
  const model::Spec spec = grouped_query_spec();
  const CacheRun gpu_home = run_decode_attention(spec, A{100, 0, 100, 0, 100, 0}, false, "float32", false, 6);
  const CacheRun copied = run_decode_attention(spec, A{100, 0, 0, 100, 100, 0}, false, "float32", false, 6);
  // From step 2 on: before it, row 1's padding covers every position so far, which no
  // real decode step has (the kernel gives such a row zeros, attend lets it see itself).
  for (size_t s = 2; s < gpu_home.outputs.size(); ++s) {
    EXPECT_LT((gpu_home.outputs[s] - copied.outputs[s]).abs().max().item<double>(), 1e-5) << "step " << s;
  }
}

// A decode token's masks (DecodeUnitMasks) are built by its first layer and read by the
// others: the same outputs as masks built in every layer, and it is the shared mask the
// attention reads (one with a key hidden changes the result). A cpu home without CPU
// attention is attended by LibTorch operators; no padding, so one group of sequences.
TEST(KvCacheOnTheCpuDevice, ADecodeTokensMasksAreBuiltOnceForEveryLayer) {
  const model::Spec spec = grouped_query_spec();
  ASSERT_GE(spec.num_layers, 2);
  const int64_t b = 2, d = spec.head_dim, pos = 3;
  const A percent{100, 0, 0, 100, 100, 0};
  const runtime::Policy policy = make_policy(b, 1, percent, false);
  TempDir offload("kv_cache");
  const runtime::EngineOptions options = cpu_engine_options(offload.path);
  runtime::Tiers tiers(options.budgets, options.offload_dir, false, 1);
  runtime::KvCache cache(spec, policy, tiers, options.device, pos + 1, runtime::StageLayers::whole(spec));
  runtime::Stats stats;
  const at::Tensor pad = at::zeros({b}, at::kLong);
  const model::StepInputs step{at::Tensor(), pad, pos};
  at::manual_seed(5);
  const model::QkvProjection qkv{at::randn({b, spec.num_heads, 1, d}), at::randn({b, spec.num_kv_heads, 1, d}),
                                 at::randn({b, spec.num_kv_heads, 1, d})};
  auto attend = [&](int64_t layer, runtime::DecodeUnitMasks* shared) {
    const auto loaded = cache.load(layer, 0, pos);
    std::vector<std::function<void()>> stores;
    return cache.decode_attention(layer, 0, qkv, step, pad, loaded.get(), stats, runtime::StepId{pos, layer + 1, 0, 0},
                                  stores, nullptr, shared);
  };
  const at::Tensor own0 = attend(0, nullptr), own1 = attend(1, nullptr);

  runtime::DecodeUnitMasks shared;
  EXPECT_TRUE(at::equal(attend(0, &shared), own0));
  ASSERT_TRUE(shared.visibility.defined());
  EXPECT_EQ(shared.past_len, pos);
  EXPECT_EQ(shared.visibility.sizes(), at::IntArrayRef({b * spec.num_kv_heads, 1, 1, pos + 1}));
  const at::Tensor built = shared.visibility;
  EXPECT_TRUE(at::equal(attend(1, &shared), own1));
  EXPECT_TRUE(shared.visibility.is_same(built)) << "the second layer built its own";

  runtime::DecodeUnitMasks changed = shared;
  changed.visibility = built.clone();
  changed.visibility.select(3, 0).fill_(false);  // the first key hidden
  EXPECT_FALSE(at::equal(attend(1, &changed), own1));

  runtime::DecodeUnitMasks stale = shared;  // built for another position
  stale.past_len = pos - 1;
  stale.visibility = at::zeros_like(built);
  EXPECT_TRUE(at::equal(attend(1, &stale), own1));
  EXPECT_EQ(stale.past_len, pos);

  // With left padding, each unit hides its sequence's padding keys, and sees itself.
  const at::Tensor padded = at::tensor({0, 2}, at::kLong);
  const model::StepInputs padded_step{at::Tensor(), padded, pos};
  runtime::DecodeUnitMasks of_padded;
  const auto loaded = cache.load(0, 0, pos);
  std::vector<std::function<void()>> stores;
  cache.decode_attention(0, 0, qkv, padded_step, padded, loaded.get(), stats, runtime::StepId{pos, 1, 0, 0}, stores,
                         nullptr, &of_padded);
  ASSERT_TRUE(of_padded.visibility.defined());
  for (int64_t unit = 0; unit < b * spec.num_kv_heads; ++unit) {
    const int64_t first_key = padded[unit / spec.num_kv_heads].item<int64_t>();
    for (int64_t key = 0; key <= pos; ++key) {
      EXPECT_EQ(of_padded.visibility[unit][0][0][key].item<bool>(), key >= first_key) << unit << " " << key;
    }
  }
}

}  // namespace
}  // namespace tiergen::test
