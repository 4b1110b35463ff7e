// Compressed weights computed on the CPU are used in place: the weight store hands the
// layer its quantized parts (from every tier, disk included), never a dense copy of the
// layer, and the product through them (in place for few rows, through a per-product
// dense copy for many) matches the product with the dequantized weight up to fp32
// rounding.
#include <gtest/gtest.h>

#include <limits>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/quantized_matmul.h"
#include "kernels/cpu/small_matmul.h"
#include "tests/support/kernel_level_scope.h"
#include "tests/support/tiny_model.h"
#include "tiergen/common/kernel_elem_type.h"
#include "tiergen/model/forward.h"
#include "tiergen/model/linear.h"
#include "tiergen/runtime/weight_store.h"

namespace tiergen::test {
namespace {

using A = std::array<double, 6>;

// W [out, in] quantized in the store's layout, and its dequantized dense form.
struct Quantized {
  model::QuantizedWeight weight;
  at::Tensor dense;
};

Quantized quantize(const at::Tensor& w, int bits, int group_size) {
  const kernels::QuantFormat format{bits, group_size};
  const auto l = kernels::quantized_layout(w.size(0), w.size(1), format);
  Quantized q;
  q.weight.rows = w.size(0);
  q.weight.cols = w.size(1);
  q.weight.bits = bits;
  q.weight.group_size = group_size;
  q.weight.packed = at::empty({l.rows, l.packed_bytes_per_row}, at::kByte);
  q.weight.mins = at::empty({l.rows, l.groups_per_row}, at::kShort);
  q.weight.scales = at::empty({l.rows, l.groups_per_row}, at::kShort);
  const at::Tensor src = w.contiguous();
  kernels::quantize(src.data_ptr(), kernels::ElemType::F32, l.rows, l.cols, format, q.weight.packed.data_ptr<uint8_t>(),
                    reinterpret_cast<uint16_t*>(q.weight.mins.data_ptr<int16_t>()),
                    reinterpret_cast<uint16_t*>(q.weight.scales.data_ptr<int16_t>()));
  q.dense = at::empty_like(src);
  kernels::dequantize(q.weight.packed.data_ptr<uint8_t>(), reinterpret_cast<uint16_t*>(q.weight.mins.data_ptr<int16_t>()),
                      reinterpret_cast<uint16_t*>(q.weight.scales.data_ptr<int16_t>()), l.rows, l.cols, format,
                      q.dense.data_ptr(), kernels::ElemType::F32);
  return q;
}

using test::KernelLevelScope;

// A layer load's first prefill product of a compressed weight, through dequantized
// tiles (x made ready once for every tile's call), has the bits of the product over
// the weight's dense copy, on every kernel level this CPU has (bf16 and fp32 x, and fp16
// x widened to fp32 wherever fp16 weights take the small-row kernel at that row count;
// tiles whole, cut short, and a weight of fewer rows than one; with and without a bias)
// and makes no dense copy.
TEST(QuantizedWeights, DequantizedTilesGiveTheBitsOfTheDenseCopy) {
  struct Level {
    const char* name;
    bool avx2, avx512;
  };
  at::manual_seed(9);
  int tiled = 0, half_tiled = 0;
  for (const Level level : {Level{"portable", false, false}, Level{"avx2", true, false}, Level{"native", true, true}}) {
    const KernelLevelScope scope(level.avx2, level.avx512);
    for (at::ScalarType dtype : {at::kBFloat16, at::kFloat, at::kHalf}) {
      for (int bits : {4, 8}) {
        for (int64_t out : {40, 64, 200}) {
          for (bool with_bias : {false, true}) {
            const Quantized q = quantize(at::randn({out, 160}), bits, 32);
            const at::Tensor bias = with_bias ? at::randn({out}) : at::Tensor();
            const at::Tensor x = at::randn({2, 60, 160}).to(dtype);
            model::QuantizedWeight load = q.weight;  // a fresh layer load
            load.dense = std::make_shared<at::Tensor>();
            load.dense_products = std::make_shared<int64_t>(0);
            at::Tensor got;
            {
              const model::ProductPhaseScope prefill(model::ProductPhase::Prefill);
              got = model::quantized_linear_product(x, load, bias);
            }
            const at::Tensor expected = model::linear_product(x, q.dense.to(dtype), bias);
            ASSERT_EQ(got.sizes(), expected.sizes());
            ASSERT_EQ(got.scalar_type(), dtype);
            EXPECT_TRUE(at::equal(got, expected)) << level.name << " " << c10::toString(dtype) << " bits " << bits
                                                  << " out " << out << (with_bias ? " with bias" : "");
            // Every kernel level multiplies fp32 and bf16 activations tile by tile (x made ready
            // once); fp16 ones too wherever fp16 weights take the small-row kernel at 120 rows.
            const bool fp16_every_row =
                kernels::small_matmul_max_rows(kernels::ElemType::F16) == std::numeric_limits<int64_t>::max();
            const bool tiles = dtype != at::kHalf || fp16_every_row;
            EXPECT_EQ(model::multiplies_in_dequantized_tiles(dtype, 120), tiles) << level.name;
            EXPECT_EQ(load.dense->defined(), !tiles) << level.name << " " << c10::toString(dtype);
            tiled += tiles && dtype != at::kHalf;
            half_tiled += tiles && dtype == at::kHalf;
          }
        }
      }
    }
  }
  EXPECT_EQ(tiled, 3 * 2 * 2 * 3 * 2) << "every level, fp32 and bf16";
  // Batch-invariant products (the default) take the small-row kernel at every row count,
  // on every level: fp16 activations then go in tiles everywhere.
  if (kernels::small_matmul_for_every_row_count()) EXPECT_EQ(half_tiled, 3 * 2 * 3 * 2) << "fp16 in tiles";
}

TEST(QuantizedWeights, TheInPlaceProductIsTheProductWithTheDequantizedWeight) {
  at::manual_seed(3);
  for (int bits : {4, 8}) {
    for (int64_t rows : {1, 5, 40}) {
      const at::Tensor w = at::randn({48, 96});
      const at::Tensor bias = at::randn({48});
      const Quantized q = quantize(w, bits, 32);
      const at::Tensor x = at::randn({rows, 96});
      const at::Tensor expected = at::linear(x, q.dense, bias);
      const at::Tensor got = model::quantized_linear_product(x, q.weight, bias);
      ASSERT_EQ(got.sizes(), expected.sizes());
      EXPECT_LT((got - expected).abs().max().item<double>(), 1e-4 * expected.abs().max().item<double>())
          << bits << "-bit, " << rows << " rows";
      // and bf16 activations come back as bf16
      EXPECT_EQ(model::quantized_linear_product(x.to(at::kBFloat16), q.weight).scalar_type(), at::kBFloat16);
    }
  }
}

// Products with many rows share one dense copy per loaded weight (every gpu batch of
// a layer load), made at the latest by the second (the first may multiply dequantized
// tiles), and products with few rows never make one.
TEST(QuantizedWeights, ManyRowProductsShareOneDenseCopy) {
  at::manual_seed(5);
  const Quantized q = quantize(at::randn({24, 64}), 4, 32);
  model::quantized_linear_product(at::randn({2, 64}), q.weight);
  EXPECT_FALSE(q.weight.dense->defined()) << "a decode-sized product reads the weight in place";
  model::quantized_linear_product(at::randn({20, 64}), q.weight);
  model::quantized_linear_product(at::randn({20, 64}), q.weight);
  ASSERT_TRUE(q.weight.dense->defined()) << "the second many-row product makes the copy";
  const void* copy = q.weight.dense->data_ptr();
  const at::Tensor x = at::randn({30, 64});
  const at::Tensor second = model::quantized_linear_product(x, q.weight);
  EXPECT_EQ(q.weight.dense->data_ptr(), copy) << "the second product reuses the copy";
  EXPECT_LT((second - at::linear(x, q.dense)).abs().max().item<double>(), 1e-4 * second.abs().max().item<double>());
}

// While CPU products are batch-invariant (the default), the phase and never the rows
// choose the kernel: every decode product reads the weight in place, every prefill
// product goes through the dense copy, so a row's result is the same bits alone and
// among 40 rows. Without invariance (--cpu-gemm), or outside a step, the rows choose.
TEST(QuantizedWeights, ThePhaseNotTheRowsChoosesTheKernelWhileProductsAreBatchInvariant) {
  at::manual_seed(9);
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (int bits : {4, 8}) {
      const Quantized q = quantize(at::randn({40, 128}), bits, 64);
      const at::Tensor x = at::randn({40, 128}).to(dtype);
      for (const model::ProductPhase phase : {model::ProductPhase::Decode, model::ProductPhase::Prefill}) {
        const model::ProductPhaseScope scope(phase);
        EXPECT_EQ(model::product_phase(), phase);
        const at::Tensor all = model::quantized_linear_product(x, q.weight);
        for (int64_t r : {0, 17, 39}) {
          const at::Tensor alone = model::quantized_linear_product(x.narrow(0, r, 1), q.weight);
          EXPECT_TRUE(at::equal(alone[0], all[r])) << bits << "-bit " << dtype << " row " << r
                                                   << (phase == model::ProductPhase::Decode ? " decode" : " prefill");
        }
        EXPECT_EQ(model::quantized_product_in_place(phase, 1, dtype == at::kBFloat16, bits, 64),
                  phase == model::ProductPhase::Decode);
        EXPECT_EQ(model::quantized_product_in_place(phase, 4096, dtype == at::kBFloat16, bits, 64),
                  phase == model::ProductPhase::Decode);
      }
      EXPECT_EQ(model::product_phase(), model::ProductPhase::Unknown) << "the scope restores the phase";
      const bool bf16 = dtype == at::kBFloat16;
      const int64_t limit = kernels::quantized_in_place_max_rows(bf16, {bits, 64});
      EXPECT_TRUE(model::quantized_product_in_place(model::ProductPhase::Unknown, limit, bf16, bits, 64));
      EXPECT_FALSE(model::quantized_product_in_place(model::ProductPhase::Unknown, limit + 1, bf16, bits, 64));
      const kernels::SmallMatmulEveryRowCountScope gemm(false);
      EXPECT_TRUE(model::quantized_product_in_place(model::ProductPhase::Prefill, 1, bf16, bits, 64));
      EXPECT_FALSE(model::quantized_product_in_place(model::ProductPhase::Decode, limit + 1, bf16, bits, 64));
    }
  }
}

TEST(QuantizedWeights, LayerWeightsHoldTheQuantizedEntryAndGetRefusesIt) {
  at::manual_seed(4);
  const Quantized q = quantize(at::randn({16, 32}), 4, 16);
  model::LayerWeights w("model.layers.0.");
  w.set_quantized("model.layers.0.mlp.up_proj.weight", q.weight);
  ASSERT_NE(w.quantized("mlp.up_proj.weight"), nullptr);
  EXPECT_THROW(w.get("mlp.up_proj.weight"), Error);
  const at::Tensor x = at::randn({3, 32});
  const at::Tensor y = model::quantized_linear_product(x, *w.quantized("mlp.up_proj.weight"));
  EXPECT_LT((y - at::linear(x, q.dense)).abs().max().item<double>(), 1e-4 * y.abs().max().item<double>());
}

// Every compressed weight of every layer, whatever its tier (gpu stand-in, cpu, disk),
// reaches the CPU compute as its quantized parts.
TEST(QuantizedWeights, TheStoreHandsCpuComputeQuantizedPartsFromEveryTier) {
  const TinyModel m = make_tiny_model(tiny_llama(61));
  for (const A& percent : {A{100, 0, 100, 0, 100, 0}, A{0, 100, 100, 0, 100, 0}, A{0, 0, 100, 0, 100, 0}}) {
    runtime::Policy policy = make_policy(1, 1, percent, false);
    policy.compress_weight = {true, 4, 16};
    TempDir offload("offload");
    const runtime::EngineOptions options = cpu_engine_options(offload.path);
    runtime::Tiers tiers(options.budgets, options.offload_dir, percent[0] + percent[1] < 100, 1);
    runtime::WeightStore store(m.spec, policy, *m.weights, tiers, options.device, /*quantized_in_place=*/true);
    for (int64_t layer = 1; layer <= m.spec.num_layers; ++layer) {
      const auto loaded = store.load(layer, false);
      const model::QuantizedWeight* q = loaded->weights.quantized("self_attn.q_proj.weight");
      ASSERT_NE(q, nullptr) << "layer " << layer;
      EXPECT_EQ(q->rows, m.spec.num_heads * m.spec.head_dim);
      EXPECT_EQ(q->cols, m.spec.hidden_size);
      EXPECT_EQ(loaded->weights.quantized("input_layernorm.weight"), nullptr) << "1-D weights stay dense";
    }
    EXPECT_NE(store.load(m.spec.num_layers + 1, false)->weights.quantized("lm_head.weight"), nullptr);
    EXPECT_EQ(store.load(0, false)->weights.quantized("embed_tokens.weight"), nullptr) << "the embedding is never compressed";
  }
}

// The in-place path and the GPU's path (a dense copy per layer load, forced on the CPU)
// score the same prompts alike, over placements and both bit widths: the stored layout
// is one for both.
TEST(QuantizedWeights, InPlaceAndDequantizedLoadsScoreAlike) {
  const TinyModel m = make_tiny_model(tiny_opt(62));
  auto requests = greedy_requests(make_prompts({7, 12, 3}, m.spec.vocab_size, 5), {1});
  for (auto& r : requests) r.prompt_logprobs = 0;
  for (int bits : {4, 8}) {
    for (const A& percent : {A{100, 0, 100, 0, 100, 0}, A{0, 0, 0, 100, 100, 0}}) {
      runtime::Policy policy = make_policy(3, 1, percent, false);
      policy.compress_weight = {true, bits, 16};
      std::vector<std::vector<runtime::SequenceResult>> runs;
      for (bool dense : {false, true}) {
        TempDir offload("offload");
        runtime::EngineOptions options = cpu_engine_options(offload.path);
        options.dequantize_weights_on_cpu = dense;
        runtime::Engine engine(m.spec, *m.weights, policy, options, workload_of(requests));
        runs.push_back(engine.generate(requests));
      }
      for (size_t i = 0; i < requests.size(); ++i) {
        ASSERT_EQ(runs[0][i].prompt_logprobs.size(), runs[1][i].prompt_logprobs.size());
        for (size_t t = 0; t < runs[0][i].prompt_logprobs.size(); ++t) {
          EXPECT_NEAR(runs[0][i].prompt_logprobs[t].logprob, runs[1][i].prompt_logprobs[t].logprob, 1e-3)
              << bits << "-bit, prompt " << i << ", token " << t;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tiergen::test
