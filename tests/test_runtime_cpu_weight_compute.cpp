// Weights multiplied where they live (Policy::cpu_weight_compute_*): the weight store
// hands the layer the host-resident matrices and embedding tables themselves (no copy to the compute device,
// no device staging), only in the phases asked for, and the embedding's tables in
// every decode step; the memory plan stops counting their
// device staging; the results are those of loading them (compressed ones included); the
// policy file carries the choice (and a searched plan's small-row limit, which the engine
// applies); and on a GPU a host weight times a device activation equals the product on
// the device, and a host table's rows arrive on the device.
#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>

#include "kernels/cpu/small_matmul.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_model.h"
#include "tiergen/common/error.h"
#include "src/model/model_internal.h"
#include "tiergen/model/forward.h"
#include "tiergen/model/presets.h"
#include "tiergen/runtime/device.h"
#include "tiergen/runtime/placement.h"
#include "tiergen/runtime/weight_store.h"

namespace tiergen::test {
namespace {

using A = std::array<double, 6>;

struct StoreFixture {
  TempDir offload{"offload"};
  runtime::EngineOptions options = cpu_engine_options(offload.path);
  std::unique_ptr<runtime::Tiers> tiers;
  std::unique_ptr<runtime::WeightStore> store;

  StoreFixture(const TinyModel& m, const runtime::Policy& policy) {
    tiers = std::make_unique<runtime::Tiers>(options.budgets, options.offload_dir,
                                             policy.w_disk_percent() > 0, 1);
    store = std::make_unique<runtime::WeightStore>(m.spec, policy, *m.weights, *tiers, options.device,
                                                   /*quantized_in_place=*/false);
  }
};

TEST(CpuWeightCompute, TheStoreHandsTheCpuHomeItselfOnlyInTheChosenPhase) {
  const TinyModel m = make_tiny_model(tiny_llama(71));
  StoreFixture f(m, with_cpu_weight_compute(make_policy(1, 1, A{0, 100, 100, 0, 100, 0}, false), false, true));
  const uint64_t gpu_before = f.tiers->gpu.used();
  const auto decode = f.store->load(1, /*prefill=*/false);
  const auto again = f.store->load(1, /*prefill=*/false);
  // The cpu home itself, both times: no copy was made.
  EXPECT_EQ(decode->weights.get("mlp.up_proj.weight").data_ptr(), again->weights.get("mlp.up_proj.weight").data_ptr());
  // Norms are not matmul weights: they still travel to the compute device.
  EXPECT_NE(decode->weights.get("input_layernorm.weight").data_ptr(),
            again->weights.get("input_layernorm.weight").data_ptr());
  const uint64_t norms = 2 * static_cast<uint64_t>(m.spec.hidden_size) * 4;
  EXPECT_EQ(f.tiers->gpu.used() - gpu_before, 2 * norms) << "only the norms are staged on the gpu tier";

  const auto prefill = f.store->load(1, /*prefill=*/true);
  EXPECT_NE(prefill->weights.get("mlp.up_proj.weight").data_ptr(), decode->weights.get("mlp.up_proj.weight").data_ptr())
      << "prefill was not asked to compute at home: its weights are loaded";
  // The head's matrix and the embedding table stay home too (the final norm travels).
  const auto same_home = [&](int64_t layer, const char* name, bool prefill) {
    return f.store->load(layer, prefill)->weights.get(name).data_ptr() ==
           f.store->load(layer, prefill)->weights.get(name).data_ptr();
  };
  EXPECT_TRUE(same_home(m.spec.num_layers + 1, "lm_head.weight", false));
  EXPECT_TRUE(same_home(0, "embed_tokens.weight", false));
  EXPECT_FALSE(same_home(m.spec.num_layers + 1, "norm.weight", false));
  EXPECT_FALSE(same_home(0, "embed_tokens.weight", true));
}

// A decode step looks up one row of the embedding's tables per sequence: under any
// policy they stay where they live and only those rows cross; prefill still loads them
// unless the policy computes at home. OPT's two tables (tokens, positions) both.
TEST(CpuWeightCompute, DecodeLooksTheEmbeddingUpWhereItLivesUnderAnyPolicy) {
  const TinyModel m = make_tiny_model(tiny_opt(76));
  const runtime::Policy policy = make_policy(1, 1, A{0, 100, 100, 0, 100, 0}, false);
  ASSERT_FALSE(policy.cpu_weight_compute(false));
  StoreFixture f(m, policy);
  const uint64_t gpu_before = f.tiers->gpu.used();
  const auto decode = f.store->load(0, /*prefill=*/false);
  const auto again = f.store->load(0, /*prefill=*/false);
  for (const char* table : {"embed_tokens.weight", "embed_positions.weight"}) {
    EXPECT_EQ(decode->weights.get(table).data_ptr(), again->weights.get(table).data_ptr()) << table;
  }
  EXPECT_EQ(f.tiers->gpu.used(), gpu_before) << "nothing of the embedding is staged on the gpu tier in decode";
  EXPECT_TRUE(f.store->moves_nothing(0, false));
  EXPECT_FALSE(f.store->moves_nothing(0, true));
  EXPECT_FALSE(f.store->loads_alike(0)) << "a layer 0 prefetched for one phase does not serve the other";
  EXPECT_TRUE(f.store->loads_alike(1));
  const auto prefill = f.store->load(0, /*prefill=*/true);
  EXPECT_NE(prefill->weights.get("embed_tokens.weight").data_ptr(),
            decode->weights.get("embed_tokens.weight").data_ptr())
      << "prefill loads the tables under this policy";
  // The head is a product: it still travels in decode.
  EXPECT_NE(f.store->load(m.spec.num_layers + 1, false)->weights.get("lm_head.weight").data_ptr(),
            f.store->load(m.spec.num_layers + 1, false)->weights.get("lm_head.weight").data_ptr());

  // From disk: the loaded layer reads the rows it looks up, and holds no copy of the table.
  StoreFixture on_disk(m, make_policy(1, 1, A{0, 0, 100, 0, 100, 0}, false));
  const uint64_t disk_gpu_before = on_disk.tiers->gpu.used(), disk_cpu_before = on_disk.tiers->cpu.used();
  const auto from_disk = on_disk.store->load(0, false);
  ASSERT_NE(from_disk->weights.table_rows("embed_tokens.weight"), nullptr);
  EXPECT_EQ(on_disk.tiers->gpu.used(), disk_gpu_before);
  EXPECT_EQ(on_disk.tiers->cpu.used(), disk_cpu_before) << "no host copy of the table";
  EXPECT_TRUE(on_disk.store->moves_nothing(0, false));
  EXPECT_FALSE(on_disk.store->moves_nothing(0, true)) << "prefill reads the table whole";
  const auto longs = at::TensorOptions().dtype(at::kLong);
  const at::Tensor ids = at::tensor(std::vector<int64_t>{3, 0, 3, m.spec.vocab_size - 1}, longs).view({2, 2});
  const at::Tensor table = decode->weights.get("embed_tokens.weight");  // the same weights' cpu home
  EXPECT_TRUE(at::equal(model::lookup_rows(from_disk->weights, "embed_tokens.weight", ids), at::embedding(table, ids)));
  EXPECT_THROW(model::lookup_rows(from_disk->weights, "embed_tokens.weight",
                                  at::tensor(std::vector<int64_t>{m.spec.vocab_size}, longs)),
               Error);
  // Under CPU weight compute in both phases prefill holds the table whole and decode reads
  // its rows: a layer loaded for one phase does not serve the other.
  StoreFixture both(m, with_cpu_weight_compute(make_policy(1, 1, A{0, 0, 100, 0, 100, 0}, false), true, true));
  EXPECT_FALSE(both.store->loads_alike(0));
}

// A tied head's matrix is the token table's home itself: one host copy, reserved once,
// which the decode lookups and the head's product at home both read.
TEST(CpuWeightCompute, ATiedHeadReadsTheTokenTablesHome) {
  const TinyModel m = make_tiny_model(tiny_opt(77));
  ASSERT_TRUE(m.spec.tie_word_embeddings);
  StoreFixture f(m, with_cpu_weight_compute(make_policy(1, 1, A{0, 100, 100, 0, 100, 0}, false), false, true));
  const int64_t head = m.spec.num_layers + 1;
  EXPECT_EQ(f.store->load(0, false)->weights.get("embed_tokens.weight").data_ptr(),
            f.store->load(head, false)->weights.get("lm_head.weight").data_ptr());
  uint64_t all_bytes = 0;
  for (const auto& layer : m.spec.weight_layers()) all_bytes += static_cast<uint64_t>(layer.numel()) * 4;
  const uint64_t table_bytes = static_cast<uint64_t>(m.spec.vocab_size * m.spec.hidden_size) * 4;
  EXPECT_EQ(f.tiers->cpu.used(), all_bytes - table_bytes) << "the table is reserved once";
}

TEST(CpuWeightCompute, TheChosenShareOfLayersIsSpreadEvenly) {
  const auto chosen = [](double percent, int64_t layers) {
    runtime::Policy p;
    p.cpu_weight_compute_layer_percent = percent;
    std::vector<int64_t> out;
    for (int64_t d = 0; d < layers; ++d) {
      if (runtime::decoder_layer_multiplies_at_home(p, d, layers)) out.push_back(d);
    }
    return out;
  };
  EXPECT_EQ(chosen(50, 4), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(chosen(25, 8), (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(chosen(75, 4), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(chosen(100, 3), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_TRUE(chosen(0, 5).empty());
  EXPECT_EQ(chosen(30, 10).size(), 3u);

  // In the store: with half the layers, layer 1 (decoder 0) is loaded, layer 2 at home.
  const TinyModel m = make_tiny_model(tiny_opt(75));
  runtime::Policy policy = with_cpu_weight_compute(make_policy(1, 1, A{0, 100, 100, 0, 100, 0}, false), true, true);
  policy.cpu_weight_compute_layer_percent = 50;
  StoreFixture f(m, policy);
  const auto same_home = [&](int64_t layer) {
    return f.store->load(layer, false)->weights.get("fc1.weight").data_ptr() ==
           f.store->load(layer, false)->weights.get("fc1.weight").data_ptr();
  };
  EXPECT_FALSE(same_home(1));
  EXPECT_TRUE(same_home(2));
  EXPECT_THROW(
      [] {
        runtime::Policy bad;
        bad.cpu_weight_compute_layer_percent = 120;
        bad.validate();
      }(),
      Error);
}

TEST(CpuWeightCompute, DiskWeightsAreReadToTheHostAndCompressedOnesStayQuantized) {
  const TinyModel m = make_tiny_model(tiny_opt(72));
  runtime::Policy policy = with_cpu_weight_compute(make_policy(1, 1, A{0, 0, 100, 0, 100, 0}, false), true, true);
  {
    StoreFixture f(m, policy);
    const uint64_t cpu_before = f.tiers->cpu.used();
    const auto loaded = f.store->load(2, true);
    const at::Tensor& w = loaded->weights.get("fc1.weight");
    EXPECT_TRUE(w.is_cpu());
    EXPECT_EQ(w.sizes(), (std::vector<int64_t>{m.spec.intermediate_size, m.spec.hidden_size}));
    EXPECT_GT(f.tiers->cpu.used(), cpu_before) << "the host copy of a disk weight is counted while its layer is loaded";
  }
  policy.compress_weight = {true, 4, 16};
  StoreFixture f(m, policy);  // a dense copy per load for the rest, as on a GPU
  const auto loaded = f.store->load(1, false);
  EXPECT_NE(loaded->weights.quantized("self_attn.q_proj.weight"), nullptr)
      << "a compressed weight multiplied at home is used in place, never dequantized for the device";
  EXPECT_NE(f.store->load(m.spec.num_layers + 1, false)->weights.quantized("lm_head.weight"), nullptr)
      << "so is the head's";
}

// Device staging of weights multiplied at home is not planned; the plan keeps the
// larger phase, and a compressed weight's dense host copy moves to the cpu tier.
TEST(CpuWeightCompute, TheMemoryPlanDropsTheirDeviceStaging) {
  const model::Spec spec = model::resolve_spec("llama-2-7b");
  const runtime::Workload w{256, 32};
  const runtime::Policy base = make_policy(4, 2, A{0, 100, 100, 0, 100, 0}, false);
  const auto gpu_working = [&](const runtime::Policy& p) { return runtime::plan_memory(spec, p, w, 2).working[runtime::Tier::Gpu]; };
  const uint64_t loaded = gpu_working(base);
  EXPECT_EQ(gpu_working(with_cpu_weight_compute(base, false, true)), loaded) << "prefill still loads every layer";
  EXPECT_EQ(gpu_working(with_cpu_weight_compute(base, true, false)), loaded) << "decode still loads every layer";
  // Double-buffered staging of the largest layer in flight: a decoder layer when
  // loaded; with every matrix at home, a decoder layer's two norms.
  const auto layers = spec.weight_layers();
  const uint64_t decoder = static_cast<uint64_t>(layers[1].numel()) * 2;
  ASSERT_GT(decoder, static_cast<uint64_t>(layers.back().numel()) * 2);
  const uint64_t decoder_norms = 2 * static_cast<uint64_t>(spec.hidden_size) * 2;
  EXPECT_EQ(loaded - gpu_working(with_cpu_weight_compute(base, true, true)), 2 * (decoder - decoder_norms));

  runtime::Policy compressed = base;
  compressed.compress_weight = {true, 4, 64};
  const auto cpu_working = [&](const runtime::Policy& p) { return runtime::plan_memory(spec, p, w, 2).working[runtime::Tier::Cpu]; };
  EXPECT_GT(cpu_working(with_cpu_weight_compute(compressed, true, true)), cpu_working(compressed))
      << "the dense host copy many-row products make is counted";
}

// The same greedy tokens with compressed weights multiplied at home or loaded, on cpu
// and disk homes (compression is lossy; moving the product must not change it further).
TEST(CpuWeightCompute, CompressedWeightsGiveTheSameTokensAtHomeAsLoaded) {
  for (const auto& options : {tiny_opt(73), tiny_llama(74)}) {
    const TinyModel m = make_tiny_model(options);
    const auto prompts = make_prompts({6, 2, 9, 4, 7}, m.spec.vocab_size, 7);
    const auto requests = greedy_requests(prompts, {5, 7});
    runtime::Policy policy = make_policy(2, 2, A{0, 50, 100, 0, 100, 0}, false);
    policy.compress_weight = {true, 4, 16};
    TempDir offload("offload");
    const auto opts = cpu_engine_options(offload.path);
    const auto loaded = engine_tokens(m.spec, *m.weights, policy, opts, requests);
    EXPECT_EQ(engine_tokens(m.spec, *m.weights, with_cpu_weight_compute(policy, true, true), opts, requests), loaded);
    EXPECT_EQ(engine_tokens(m.spec, *m.weights, with_cpu_weight_compute(policy, false, true), opts, requests), loaded);
  }
}

TEST(CpuWeightCompute, PolicyJsonCarriesBothPhasesAndDescribeSaysSo) {
  runtime::Policy p;
  p.cpu_weight_compute_decode = true;
  const runtime::Policy back = runtime::policy_from_json(runtime::policy_to_json(p), "round trip");
  EXPECT_TRUE(back.cpu_weight_compute_decode);
  EXPECT_FALSE(back.cpu_weight_compute_prefill);
  EXPECT_NE(p.describe().find("cpu weight compute decode"), std::string::npos) << p.describe();
  EXPECT_NE(runtime::Policy{}.describe().find("cpu weight compute off"), std::string::npos);
  EXPECT_TRUE(p.exact()) << "computing on the CPU is not lossy";
  EXPECT_THROW(runtime::policy_from_json(nlohmann::json{{"cpu_weight_compute_decode", "yes"}}, "p.json"), Error);
}

// A searched plan's small-row limit (runtime::Policy::small_matmul) round-trips through
// the policy file, is left out when not measured, and malformed ones are refused.
TEST(CpuWeightCompute, PolicyJsonCarriesTheSmallRowLimit) {
  runtime::Policy p;
  EXPECT_FALSE(runtime::policy_to_json(p).contains("small_matmul")) << "the defaults are not written";
  p.small_matmul = {"bfloat16", 24};
  const runtime::Policy back = runtime::policy_from_json(runtime::policy_to_json(p), "round trip");
  EXPECT_EQ(back.small_matmul.dtype, "bfloat16");
  EXPECT_EQ(back.small_matmul.max_rows, 24);
  for (const char* bad : {R"({"dtype": "float64", "max_rows": 24})", R"({"dtype": "float32", "max_rows": -1})",
                          R"({"dtype": "float32", "max_rows": 2.5})", R"({"dtype": "float32"})", R"(24)"}) {
    try {
      (void)runtime::policy_from_json(nlohmann::json{{"small_matmul", nlohmann::json::parse(bad)}}, "p.json");
      ADD_FAILURE() << "accepted small_matmul " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("p.json"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("small_matmul"), std::string::npos) << e.what();
    }
  }
}

// The engine runs its CPU products with the plan's small-row limit, and an engine whose
// plan has none returns them to the defaults; a limit where the default has none (fp16
// on an AVX2 CPU without native fp16 products) is not taken.
TEST(CpuWeightCompute, TheEngineUsesThePlansSmallRowLimit) {
  const kernels::SmallMatmulEveryRowCountScope gemm_beyond_the_limit(false);  // as --cpu-gemm runs
  const TinyModel m = make_tiny_model(tiny_opt(75));
  TempDir offload("offload");
  const auto opts = cpu_engine_options(offload.path);
  const auto requests = greedy_requests(make_prompts({4, 3}, m.spec.vocab_size, 8), {2, 2});
  runtime::Policy policy = make_policy(2, 1, A{100, 0, 100, 0, 100, 0}, false);
  policy.small_matmul = {"float32", 40};
  (void)engine_tokens(m.spec, *m.weights, policy, opts, requests);
  EXPECT_EQ(kernels::small_matmul_max_rows(kernels::ElemType::F32), 40);
  EXPECT_EQ(kernels::small_matmul_max_rows(kernels::ElemType::BF16),
            kernels::default_small_matmul_max_rows(kernels::ElemType::BF16));
  policy.small_matmul = {"float16", 24};
  (void)engine_tokens(m.spec, *m.weights, policy, opts, requests);
  EXPECT_EQ(kernels::small_matmul_max_rows(kernels::ElemType::F32), 16) << "the previous plan's limit is gone";
  const int64_t fp16_default = kernels::default_small_matmul_max_rows(kernels::ElemType::F16);
  EXPECT_EQ(kernels::small_matmul_max_rows(kernels::ElemType::F16),
            fp16_default == std::numeric_limits<int64_t>::max() ? fp16_default : 24);
  (void)engine_tokens(m.spec, *m.weights, make_policy(2, 1, A{100, 0, 100, 0, 100, 0}, false), opts, requests);
  EXPECT_EQ(kernels::small_matmul_max_rows(kernels::ElemType::F16), fp16_default);
  // Batch-invariant products (the default) take every row count on the small-row
  // kernel, whatever limit the plan carries.
  kernels::set_small_matmul_for_every_row_count(true);
  policy.small_matmul = {"float32", 40};
  (void)engine_tokens(m.spec, *m.weights, policy, opts, requests);
  EXPECT_EQ(kernels::small_matmul_max_rows(kernels::ElemType::F32), std::numeric_limits<int64_t>::max());
}

// A GPU build on a GPU host: the cross-device product (host weight, device activation)
// equals the device's own product, dense and quantized, and comes back on the device.
TEST(CpuWeightCompute, HostWeightTimesDeviceActivationEqualsTheDeviceProduct) {
  if (!runtime::cuda_available()) GTEST_SKIP() << "no CUDA device";
  at::manual_seed(9);
  const at::Device cuda(at::kCUDA, 0);
  const at::Tensor weight = at::randn({48, 64}), bias = at::randn({48});
  const at::Tensor x = at::randn({3, 5, 64}).to(cuda);
  model::LayerWeights host("layer."), device("layer.");
  host.set("layer.proj.weight", weight);
  host.set("layer.proj.bias", bias.to(cuda));
  device.set("layer.proj.weight", weight.to(cuda));
  device.set("layer.proj.bias", bias.to(cuda));
  const at::Tensor mixed = model::linear(x, host, "proj");
  const at::Tensor on_device = model::linear(x, device, "proj");
  EXPECT_EQ(mixed.device(), x.device());
  EXPECT_LT((mixed - on_device).abs().max().item<double>(), 1e-4 * on_device.abs().max().item<double>());
  // An embedding table at home: rows looked up on the host, delivered on the device.
  const at::Tensor ids = at::randint(0, 48, {2, 7}, at::TensorOptions().dtype(at::kLong)).to(cuda);
  const at::Tensor rows = model::lookup_rows(weight, ids);
  model::LayerWeights read_by_rows("layer.");
  read_by_rows.set_table_rows("layer.table", [&](const at::Tensor& host_ids) {
    EXPECT_TRUE(host_ids.is_cpu());
    return at::embedding(weight, host_ids);
  });
  const at::Tensor read_rows = model::lookup_rows(read_by_rows, "table", ids);
  EXPECT_EQ(read_rows.device(), ids.device());
  EXPECT_TRUE(at::equal(read_rows.cpu(), rows.cpu()));
  EXPECT_EQ(rows.device(), ids.device());
  EXPECT_TRUE(at::equal(rows.cpu(), at::embedding(weight, ids.cpu())));
}

}  // namespace
}  // namespace tiergen::test
