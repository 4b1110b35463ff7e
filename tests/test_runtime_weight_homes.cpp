// Where the weight store keeps dense homes that the host reads at every token: on huge
// pages (common/huge_pages.h), from the stand-in's gpu tier and from cpu homes the CPU
// multiplies in place; compressed homes stay on small pages.
#include <gtest/gtest.h>

#include "tests/support/tiny_model.h"
#include "tiergen/common/huge_pages.h"
#include "tiergen/runtime/weight_store.h"

namespace tiergen::test {
namespace {

using A = std::array<double, 6>;

// A tiny LLaMA whose embedding and head (20000 x 32 fp32: 2.4 MiB each) reach a huge
// page; every decoder matrix stays far below one.
TinyModelOptions llama_with_a_large_vocabulary() {
  TinyModelOptions o = tiny_llama(71);
  o.vocab = 20000;
  return o;
}

bool huge_pages_offered() { return on_huge_pages(empty_on_huge_pages({int64_t(kHugePageBytes)}, at::kByte)); }

TEST(WeightHomes, DenseHomesReadAtEveryTokenAreOnHugePages) {
  if (!huge_pages_offered()) GTEST_SKIP() << "this kernel refuses MADV_HUGEPAGE (no transparent huge pages)";
  const TinyModel m = make_tiny_model(llama_with_a_large_vocabulary());
  const int64_t head = m.spec.num_layers + 1;
  TempDir offload("offload");
  const runtime::EngineOptions options = cpu_engine_options(offload.path);
  for (const A& percent : {A{100, 0, 100, 0, 100, 0}, A{0, 100, 100, 0, 100, 0}}) {
    // cpu homes are multiplied where they live in decode, so load() hands the home itself.
    const runtime::Policy policy = with_cpu_weight_compute(make_policy(1, 1, percent, false), false, true);
    runtime::Tiers tiers(options.budgets, options.offload_dir, false, 1);
    runtime::WeightStore store(m.spec, policy, *m.weights, tiers, options.device, /*quantized_in_place=*/false);
    const at::Tensor lm_head = store.load(head, /*prefill=*/false)->weights.get("lm_head.weight");
    EXPECT_TRUE(on_huge_pages(lm_head)) << "weights " << percent[0] << "% gpu";
    EXPECT_TRUE(at::equal(lm_head, m.tensors.at("lm_head.weight"))) << "the home holds the checkpoint's values";
    EXPECT_FALSE(on_huge_pages(store.load(1, false)->weights.get("self_attn.q_proj.weight")))
        << "a matrix below a huge page is a plain tensor";
  }
}

TEST(WeightHomes, CompressedHomesStayOnSmallPages) {
  if (!huge_pages_offered()) GTEST_SKIP() << "this kernel refuses MADV_HUGEPAGE: every home is on small pages";
  const TinyModel m = make_tiny_model(llama_with_a_large_vocabulary());
  runtime::Policy policy = make_policy(1, 1, A{100, 0, 100, 0, 100, 0}, false);
  policy.compress_weight = {true, 4, 64};
  TempDir offload("offload");
  const runtime::EngineOptions options = cpu_engine_options(offload.path);
  runtime::Tiers tiers(options.budgets, options.offload_dir, false, 1);
  runtime::WeightStore store(m.spec, policy, *m.weights, tiers, options.device, /*quantized_in_place=*/true);
  const auto head = store.load(m.spec.num_layers + 1, false);  // the load owns the parts
  const model::QuantizedWeight* q = head->weights.quantized("lm_head.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_FALSE(on_huge_pages(q->packed));
}

}  // namespace
}  // namespace tiergen::test
