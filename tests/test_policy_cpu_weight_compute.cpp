// Computing host-resident weights' matmuls on the CPU in the cost model and the search:
// the weight transfer it saves and the CPU product, activation traffic and dense copies
// it costs; the search takes it where the link is the bottleneck and the CPU fast, not
// where the CPU is slow, and never without the profile's CPU matmul rates; the memory
// model follows the runtime's accounting; the profile's optional fields.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "policy/cost_model.h"
#include "policy/memory_model.h"
#include "policy/search.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/small_matmul.h"
#include "tiergen/model/linear.h"
#include "tiergen/common/bytes.h"
#include "tiergen/common/error.h"
#include "tests/support/kernel_level_scope.h"
#include "tests/support/memory_model_check.h"
#include "tests/support/tiny_model.h"
#include "tiergen/model/presets.h"

namespace tiergen::policy {
namespace {

HardwareProfile t4_with_cpu_rates(double matmul_flops, double gemv_bandwidth) {
  HardwareProfile p = *builtin_profile("t4-flexgen");
  p.cpu_matmul_flops = matmul_flops;
  p.cpu_gemv_bandwidth = gemv_bandwidth;
  return p;
}

// Weights split gpu/cpu, KV cache and activations on the cpu, CPU attention.
runtime::Policy weights_on_cpu(int64_t gbs, int64_t ngb, double w_gpu) {
  return test::make_policy(gbs, ngb, {w_gpu, 100 - w_gpu, 0, 100, 0, 100}, true);
}

double task(const PhaseTimes& t, Task which) { return t.tasks[static_cast<int>(which)]; }

TEST(CpuWeightComputeModel, DecodeAtHomeTradesTheWeightLoadForTheCpuProduct) {
  const auto spec = model::resolve_spec("opt-30b");
  const runtime::Workload w{512, 32};
  const auto hw = t4_with_cpu_rates(1e12, 50e9);
  const runtime::Policy loaded = weights_on_cpu(32, 2, 0);
  runtime::Policy at_home = loaded;
  at_home.cpu_weight_compute_decode = true;
  const Prediction a = predict(spec, loaded, w, hw), b = predict(spec, at_home, w, hw);

  EXPECT_GT(task(a.decode, Task::WeightLoad), 0);
  EXPECT_EQ(task(b.decode, Task::WeightLoad), 0) << "no decode weight crosses the link";
  EXPECT_DOUBLE_EQ(a.prefill_seconds, b.prefill_seconds) << "prefill still loads";

  // All matmuls move to the CPU: max(FLOPs at its GEMM rate, the weights read once per
  // gpu batch at its few-row rate), plus every matrix's input and output over the link.
  const ModelSizes sizes(spec, 2);
  const double bls = 64, gpu_matmul = std::max(bls * sizes.linear_flops_per_token() / hw.mm_flops_decode,
                                               2 * sizes.layer_weight_dense_bytes() / hw.gpu_memory_bandwidth);
  const double cpu_matmul = std::max(bls * sizes.linear_flops_per_token() / hw.cpu_matmul_flops,
                                     2 * sizes.layer_weight_bytes({}) / hw.cpu_gemv_bandwidth);
  const double crossing = bls * (sizes.linear_input_bytes_per_token() / hw.gpu_to_cpu_hidden +
                                 sizes.linear_output_bytes_per_token() / hw.cpu_to_gpu);
  EXPECT_NEAR(task(b.decode, Task::Compute) - task(a.decode, Task::Compute), cpu_matmul + crossing - gpu_matmul,
              1e-9);
}

// OPT-30B decode in gpu batches of 32 (2 of them), its weights compressed to 4 bits on
// the CPU, loaded to the gpu or multiplied at home: how much longer decode computes at
// home than loaded (`extra`), and the parts of it the pricing tests check against.
struct CompressedDecodeAtHome {
  ModelSizes sizes;
  runtime::CompressionConfig compression{true, 4, 64};
  double extra = 0;
  double gpu_matmul = 0;  // the loaded layer's product on the gpu, which at home saves
  double crossing = 0;    // every matrix's input to the host and output back
};

CompressedDecodeAtHome compressed_decode_at_home(const HardwareProfile& hw) {
  const auto spec = model::resolve_spec("opt-30b");
  CompressedDecodeAtHome c{ModelSizes(spec, 2)};
  runtime::Policy loaded = weights_on_cpu(32, 2, 0);
  loaded.compress_weight = c.compression;
  runtime::Policy at_home = loaded;
  at_home.cpu_weight_compute_decode = true;
  const Prediction a = predict(spec, loaded, {512, 32}, hw), b = predict(spec, at_home, {512, 32}, hw);
  c.extra = task(b.decode, Task::Compute) - task(a.decode, Task::Compute);
  const double bls = 64;
  c.gpu_matmul = std::max(bls * c.sizes.linear_flops_per_token() / hw.mm_flops_decode,
                          2 * c.sizes.layer_weight_dense_bytes() / hw.gpu_memory_bandwidth);
  c.crossing = bls * (c.sizes.linear_input_bytes_per_token() / hw.gpu_to_cpu_hidden +
                      c.sizes.linear_output_bytes_per_token() / hw.cpu_to_gpu);
  return c;
}

// Without batch-invariant products (--cpu-gemm), compressed weights multiplied at home
// by more rows than the in-place kernel takes: one dense copy per layer load at the
// CPU's dequantize rate, then dense products of the plan's gpu batch size, priced by the
// profile's rates by rows.
TEST(CpuWeightComputeModel, CompressedWeightsForManyRowsArePricedAsADenseCopyAndDenseProducts) {
  const kernels::SmallMatmulEveryRowCountScope gemm(false);
  HardwareProfile hw = t4_with_cpu_rates(1e12, 50e9);
  hw.cpu_product_rates = {{1, 50e9}, {16, 40e9}, {64, 20e9}};
  const CompressedDecodeAtHome c = compressed_decode_at_home(hw);
  const double flops_per_batch = 32 * c.sizes.linear_flops_per_token();
  const double cpu_matmul = c.sizes.layer_compressed_dense_bytes(c.compression) / hw.cpu_dequantize +
                            2 * hw.cpu_product_seconds(32, c.sizes.layer_weight_dense_bytes(), flops_per_batch);
  EXPECT_NEAR(c.extra, cpu_matmul + c.crossing - c.gpu_matmul, 1e-9);
  // 32 rows: a third of the way from 16 to 64 rows, in seconds per byte.
  EXPECT_NEAR(hw.cpu_product_seconds(32, 1e9, 1), 1e9 * (2.0 / 3 / 40e9 + 1.0 / 3 / 20e9), 1e-12);
}

// With batch-invariant products (the default) decode reads compressed weights in place
// at any rows, as the runtime does (model::quantized_product_in_place): 32 rows at the
// rate timed for 8, for four times as long; no dense copy.
TEST(CpuWeightComputeModel, CompressedDecodeIsPricedInPlaceAtAnyRowsWhileProductsAreBatchInvariant) {
  ASSERT_TRUE(kernels::small_matmul_for_every_row_count());
  HardwareProfile hw = t4_with_cpu_rates(1e12, 50e9);
  hw.cpu_product_rates = {{1, 50e9}, {16, 40e9}, {64, 20e9}};
  hw.cpu_quantized_product_rates = {{4, 64, {{1, 30e9}, {8, 10e9}}, {}}};
  const CompressedDecodeAtHome c = compressed_decode_at_home(hw);
  const double in_place = 2 * c.sizes.layer_weight_bytes(c.compression) / 10e9 * 32 / 8;
  EXPECT_NEAR(c.extra, in_place + c.crossing - c.gpu_matmul, 1e-9 * in_place);
}

TEST(CpuWeightComputeModel, CompressedWeightsAreReadCompressedAndNotDequantizedOnTheGpu) {
  const auto spec = model::resolve_spec("opt-30b");
  const auto hw = t4_with_cpu_rates(1e12, 50e9);
  runtime::Policy p = weights_on_cpu(4, 1, 0);
  p.compress_weight = {true, 4, 64};
  runtime::Policy at_home = p;
  at_home.cpu_weight_compute_decode = true;
  const auto a = predict(spec, p, {512, 32}, hw), b = predict(spec, at_home, {512, 32}, hw);
  EXPECT_GT(task(a.decode, Task::Dequantize), 0);
  EXPECT_EQ(task(b.decode, Task::Dequantize), 0);
  // 4 rows per product: read in place, about a quarter of the fp16 bytes.
  const ModelSizes sizes(spec, 2);
  EXPECT_LT(sizes.layer_weight_bytes(p.compress_weight), 0.3 * sizes.layer_weight_dense_bytes());
  // This product is bounded by reading the weights, so the CPU's part of decode
  // compute shrinks with them: compare with the same policy uncompressed.
  runtime::Policy dense_at_home = at_home;
  dense_at_home.compress_weight.enabled = false;
  const auto d = predict(spec, dense_at_home, {512, 32}, hw);
  EXPECT_LT(task(b.decode, Task::Compute), 0.4 * task(d.decode, Task::Compute));
}

TEST(CpuWeightComputeModel, TheMemoryModelFollowsTheRuntimeWhenBothPhasesComputeAtHome) {
  const auto spec = model::resolve_spec("llama-2-7b");
  const runtime::Workload w{512, 32};
  const ModelSizes sizes(spec, 2);
  runtime::Policy p = weights_on_cpu(8, 2, 0);
  p.cpu_weight_compute_prefill = p.cpu_weight_compute_decode = true;
  test::expect_memory_model_tracks_plan(spec, p, w);
  const auto model = build_memory_model(sizes, p, w);
  const Fractions f = effective_fractions(sizes, p);
  const auto loaded = build_memory_model(sizes, weights_on_cpu(8, 2, 0), w);
  EXPECT_LT(model.of(runtime::Tier::Gpu).at(f), loaded.of(runtime::Tier::Gpu).at(f));
}

// FlexGen's OPT-30B case on a T4 (PCIe 3, 13.8 GB/s): a host that multiplies at 200 GB/s
// of weights is worth using in decode; one at 2 GB/s is not; a profile without the
// rates never offers it.
TEST(CpuWeightComputeSearch, ChosenWhereTheLinkIsTheBottleneckAndTheCpuFast) {
  const auto spec = model::resolve_spec("opt-30b");
  const runtime::Workload w{512, 32};
  const runtime::Budgets b{parse_bytes("16GiB"), parse_bytes("208GiB"), parse_bytes("1536GiB")};
  SearchOptions o;
  o.guardrails = false;  // the LP's pricing (guardrails never multiply weights at home)
  const auto fast = search_policy(spec, w, b, t4_with_cpu_rates(5e12, 200e9), o);
  EXPECT_TRUE(fast.policy.cpu_weight_compute_decode) << fast.policy.describe();
  EXPECT_EQ(runtime::plan_memory(spec, fast.policy, w, 2).over_budget(b), "");
  const auto plain = search_policy(spec, w, b, *builtin_profile("t4-flexgen"), o);
  EXPECT_GT(fast.prediction.total_throughput, plain.prediction.total_throughput);

  const auto slow = search_policy(spec, w, b, t4_with_cpu_rates(5e10, 2e9), o);
  EXPECT_FALSE(slow.policy.cpu_weight_compute_decode || slow.policy.cpu_weight_compute_prefill)
      << slow.policy.describe();
  EXPECT_FALSE(plain.policy.cpu_weight_compute_decode || plain.policy.cpu_weight_compute_prefill);

  SearchOptions off = o;
  off.allow_cpu_weight_compute = false;
  const auto refused = search_policy(spec, w, b, t4_with_cpu_rates(5e12, 200e9), off);
  EXPECT_FALSE(refused.policy.cpu_weight_compute_decode || refused.policy.cpu_weight_compute_prefill);
}

// A profile that timed the CPU's products by rows (`tiergen profile`'s
// cpu.product_rates) prices the plan's own row count: products of 32 rows that run at a
// hundredth of the few-row rate (another code path, a dtype the CPU library widens
// first) rule computing at home out for gpu batches of 32, which the two rates alone
// price as fast.
TEST(CpuWeightComputeSearch, ProductRatesByRowsDecideAtThePlansBatchSize) {
  const auto spec = model::resolve_spec("opt-30b");
  const runtime::Workload w{512, 32};
  const runtime::Budgets b{parse_bytes("16GiB"), parse_bytes("208GiB"), parse_bytes("1536GiB")};
  SearchOptions o;
  o.gpu_batch_sizes = {32};
  o.guardrails = false;  // the LP's pricing (guardrails never multiply weights at home)
  HardwareProfile even = t4_with_cpu_rates(5e12, 200e9);
  even.cpu_product_rates = {{1, 200e9}, {16, 200e9}, {64, 200e9}};
  const auto fast = search_policy(spec, w, b, even, o);
  EXPECT_TRUE(fast.policy.cpu_weight_compute_decode) << fast.policy.describe();

  HardwareProfile slow_beyond_16 = even;
  slow_beyond_16.cpu_product_rates = {{1, 200e9}, {16, 200e9}, {24, 2e9}, {64, 2e9}};
  const auto slow = search_policy(spec, w, b, slow_beyond_16, o);
  EXPECT_EQ(slow.policy.gpu_batch_size, 32);
  EXPECT_FALSE(slow.policy.cpu_weight_compute_decode || slow.policy.cpu_weight_compute_prefill)
      << slow.policy.describe();
}

// Where the CPU multiplies about as fast as the link moves weights and has nothing else
// to do (small batches, the KV cache on the gpu), neither alone is best: half the
// layers compute at home while the others' weights load, nearly halving decode.
TEST(CpuWeightComputeSearch, ASharedLoadBalancesTheLinkAndTheCpu) {
  const auto spec = model::resolve_spec("opt-30b");
  const runtime::Workload w{64, 32};
  const runtime::Budgets b{parse_bytes("16GiB"), parse_bytes("208GiB"), parse_bytes("1536GiB")};
  const HardwareProfile t4 = *builtin_profile("t4-flexgen");
  SearchOptions o;
  o.gpu_batch_sizes = {4};
  o.num_gpu_batches = 1;
  const auto balanced = search_policy(spec, w, b, t4_with_cpu_rates(5e12, t4.cpu_to_gpu), o);
  const auto& p = balanced.policy;
  EXPECT_TRUE(p.cpu_weight_compute_decode) << p.describe();
  EXPECT_EQ(p.cpu_weight_compute_layer_percent, 50) << p.describe();
  const auto plain = search_policy(spec, w, b, t4, o);
  EXPECT_GT(balanced.prediction.decode_throughput, 1.7 * plain.prediction.decode_throughput);
}

// The host standing in for the GPU (--device cpu), as `tiergen profile` measured one
// 2-core machine: memcpy 15 GB/s, few-row products reading weights at 18.3 GB/s.
HardwareProfile stand_in() {
  HardwareProfile p = t4_with_cpu_rates(9.7e10, 18.3e9);
  p.gpu_is_host = true;
  p.cpu_to_gpu = p.cpu_to_gpu_cache = p.gpu_to_cpu_cache = p.gpu_to_cpu_hidden = 15e9;
  p.gpu_memory_bandwidth = p.cpu_memory_bandwidth = 15e9;
  p.mm_flops_prefill = 1.7e11;
  p.mm_flops_decode = 1.29e11;
  return p;
}

double lane(const PhaseTimes& t, Lane which) { return t.lanes[static_cast<int>(which)]; }
double weight_loader(const PhaseTimes& t) { return t.queues[static_cast<int>(runtime::schedule::Queue::WeightLoader)]; }

// On the stand-in, a weight or cache copy between the gpu and cpu tiers is a memcpy by
// the cores that compute: whichever queue runs it, the layer is at least the cores'
// compute plus those copies (a GPU host's copies only bound it by their link).
TEST(CpuStandIn, CopiesBetweenItsTiersRunOnTheComputeCores) {
  const auto spec = model::resolve_spec("opt-1.3b");
  const runtime::Policy p = test::make_policy(8, 2, {0, 60, 0, 100, 100, 0}, false);
  HardwareProfile host = stand_in();
  const Prediction standing_in = predict(spec, p, {128, 16}, host);
  host.gpu_is_host = false;
  const Prediction separate = predict(spec, p, {128, 16}, host);
  for (const auto* phase : {&standing_in.prefill, &standing_in.decode}) {
    EXPECT_GT(lane(*phase, Lane::CpuToGpu), 0);
    EXPECT_GE(phase->layer_seconds * (1 + 1e-12),
              lane(*phase, Lane::Compute) + lane(*phase, Lane::CpuToGpu) + lane(*phase, Lane::GpuToCpu));
  }
  EXPECT_NEAR(weight_loader(separate.decode), separate.decode.tasks[static_cast<int>(Task::WeightLoad)], 1e-12);
}

// The stand-in's own few-row products are the CPU's: the same kernels over the same
// memory as multiplying at home. A small job whose weights fit the stand-in keeps
// them there (before, the CPU's measured few-row rate, above the memcpy rate, made
// weights on the cpu tier multiplied at home look faster, and every prefill paid
// their copy).
TEST(CpuStandIn, WeightsThatFitStayOnTheStandInAndAreMultipliedThere) {
  const auto spec = model::resolve_spec("opt-125m");
  const runtime::Workload w{16, 32, 4};
  const runtime::Budgets b{parse_bytes("4GiB"), parse_bytes("14GiB"), parse_bytes("64GiB")};
  SearchOptions o;
  o.dtype_bytes = 4;
  const auto chosen = search_policy(spec, w, b, stand_in(), o);
  EXPECT_EQ(chosen.policy.w_gpu_percent, 100) << chosen.policy.describe();
  EXPECT_FALSE(chosen.policy.cpu_weight_compute_decode || chosen.policy.cpu_weight_compute_prefill)
      << chosen.policy.describe();
  // Priced alike: the decode product of resident weights and of weights at home, and
  // no activations crossing, as none cross on one device (model::linear).
  const runtime::Policy resident = test::make_policy(4, 1, {100, 0, 100, 0, 100, 0}, false);
  runtime::Policy at_home = test::make_policy(4, 1, {0, 100, 100, 0, 100, 0}, false);
  at_home.cpu_weight_compute_decode = true;
  const double resident_compute = task(predict(spec, resident, w, stand_in(), 4).decode, Task::Compute);
  EXPECT_GT(resident_compute, 0);
  EXPECT_NEAR(resident_compute, task(predict(spec, at_home, w, stand_in(), 4).decode, Task::Compute),
              1e-12 * resident_compute);
  // Alike too where the profile timed its products by rows.
  HardwareProfile timed = stand_in();
  timed.cpu_product_rates = {{1, 25e9}, {4, 12e9}, {16, 9e9}, {64, 3e9}};  // 4 rows: not the two-rate 18.3e9
  const Prediction resident_timed = predict(spec, resident, w, timed, 4);
  const Prediction at_home_timed = predict(spec, at_home, w, timed, 4);
  EXPECT_NEAR(task(resident_timed.decode, Task::Compute), task(at_home_timed.decode, Task::Compute),
              1e-12 * task(resident_timed.decode, Task::Compute));
  // The head's product and the embedding's rows alike too: its input, logits and rows
  // stay where they are (the head's bytes at home also hold its final norm's: a few KB,
  // against the input and logits of four sequences that would cross).
  const ModelSizes sizes(spec, 4);
  const double head_crossing = 4 * (sizes.hidden_bytes_per_token() + sizes.logits_bytes_per_token()) / 15e9;
  const double resident_edges = task(resident_timed.decode_edges, Task::Compute);
  EXPECT_GT(resident_edges, 0);
  EXPECT_LT(std::abs(task(at_home_timed.decode_edges, Task::Compute) - resident_edges), head_crossing / 20);
}

// CPU attention on the stand-in in fp32: only the new keys and values move (into the
// cache's rows); q and the output stay where the fp32 kernel reads and writes them
// (KvCache::cpu_kernel_attention's copies do nothing on one device). A GPU host pays q
// down and the output back over its link, and a 16-bit stand-in converts them to and
// from fp32, priced as that crossing.
TEST(CpuStandIn, CpuAttentionMovesOnlyTheNewKeysAndValues) {
  const auto spec = model::resolve_spec("llama-3-8b");  // grouped heads: q wider than k + v
  const runtime::Workload w{64, 8};
  const runtime::Policy p = test::make_policy(8, 2, {100, 0, 0, 100, 100, 0}, true);
  HardwareProfile host = stand_in();
  const PhaseTimes standing_in = predict(spec, p, w, host, 4).decode;
  host.gpu_is_host = false;
  const PhaseTimes separate = predict(spec, p, w, host, 4).decode;
  const ModelSizes sizes(spec, 4);
  const double bls = 16;
  EXPECT_EQ(task(standing_in, Task::ActivationLoad), 0) << "the output crosses nothing";
  EXPECT_NEAR(task(separate, Task::ActivationLoad), bls * sizes.hidden_bytes_per_token() / host.cpu_to_gpu,
              1e-9 * task(separate, Task::ActivationLoad));
  const double q_down = bls * (sizes.qkv_bytes_per_token() - sizes.kv_bytes_per_token()) / host.gpu_to_cpu_hidden;
  ASSERT_GT(q_down, 0);
  EXPECT_NEAR(task(separate, Task::CacheStore) - task(standing_in, Task::CacheStore), q_down, 1e-9 * q_down);
  EXPECT_GT(task(standing_in, Task::CacheStore), 0) << "k and v still move into the cache";
  host.gpu_is_host = true;
  const PhaseTimes bf16_standing_in = predict(spec, p, w, host, 2).decode;
  const ModelSizes bf16(spec, 2);
  EXPECT_NEAR(task(bf16_standing_in, Task::ActivationLoad), bls * bf16.hidden_bytes_per_token() / host.cpu_to_gpu,
              1e-9 * task(bf16_standing_in, Task::ActivationLoad))
      << "16-bit q and output are converted where they are";
}

// A compressed prefill on the stand-in: a layer load's first product of up to 256 rows
// multiplies tiles dequantized into cache (model::multiplies_in_dequantized_tiles), priced
// at the profile's tile rate; a second gpu batch makes the dense copy the later ones
// share, at the dense dequantize rate; more rows take the copy alone. (AVX-512 off, so
// the fp32 kernel reads x in place and the tiles apply on every CPU.) A profile that
// timed no tiles prices the copy alone.
TEST(CpuStandIn, ACompressedPrefillPaysItsTilesAndASecondGpuBatchTheCopy) {
  const test::KernelLevelScope avx2_at_most(true, false);
  const auto spec = model::resolve_spec("opt-125m");
  const runtime::Workload w{64, 4, 16};
  HardwareProfile host = stand_in();
  host.cpu_product_dtype = "float32";
  host.cpu_dequantize = 10e9;
  host.cpu_dequantize_tiles = 40e9;
  HardwareProfile slow_tiles = host, slow_copy = host;
  // The tiles priced per element in 16 bits (half an fp32 model's dense bytes), the copy
  // by its bytes: 1/80e9 more per dense byte in tiles, 1/10e9 in the copy.
  slow_tiles.cpu_dequantize_tiles = 20e9;
  slow_copy.cpu_dequantize = 5e9;
  const auto prefill_compute = [&](int gpu_batch_size, int gpu_batches, const HardwareProfile& hw,
                                   int dtype_bytes = 4) {
    runtime::Policy p = test::make_policy(gpu_batch_size, gpu_batches, {100, 0, 100, 0, 100, 0}, false);
    p.compress_weight = {true, 4, 64};
    return task(predict(spec, p, w, hw, dtype_bytes).prefill, Task::Compute);
  };
  const bool tiles_apply = model::multiplies_in_dequantized_tiles(at::kFloat, 2 * 64);
  const double one = prefill_compute(2, 1, host), two = prefill_compute(2, 2, host);
  const double tiles_in_one = prefill_compute(2, 1, slow_tiles) - one;
  const double copy_in_one = prefill_compute(2, 1, slow_copy) - one;
  const double tiles_in_two = prefill_compute(2, 2, slow_tiles) - two;
  const double copy_in_two = prefill_compute(2, 2, slow_copy) - two;
  const double tiles_in_many_rows = prefill_compute(8, 1, slow_tiles) - prefill_compute(8, 1, host);
  ASSERT_TRUE(tiles_apply) << "128 rows of fp32 x on the AVX2 or portable kernel";
  EXPECT_GT(tiles_in_one, 0);
  EXPECT_EQ(copy_in_one, 0) << "one gpu batch makes no dense copy";
  EXPECT_NEAR(tiles_in_two, tiles_in_one, 1e-9 * tiles_in_one) << "the first gpu batch's tiles, as with one";
  EXPECT_NEAR(copy_in_two, 8 * tiles_in_two, 1e-9 * copy_in_two) << "the second's dense copy";
  EXPECT_EQ(tiles_in_many_rows, 0) << "512 rows take the dense copy";
  HardwareProfile untimed = host, untimed_slow_copy = slow_copy;
  untimed.cpu_dequantize_tiles = untimed_slow_copy.cpu_dequantize_tiles = 0;
  EXPECT_NEAR(prefill_compute(2, 1, untimed_slow_copy) - prefill_compute(2, 1, untimed), copy_in_two,
              1e-9 * copy_in_two)
      << "without timed tiles, one gpu batch pays the copy";
  // fp16 activations multiply tiles too (x widened to fp32 once), where fp16 weights take
  // the small-row kernel at 128 rows (every row count while products are batch-invariant).
  HardwareProfile half = host, half_slow_tiles = slow_tiles, half_slow_copy = slow_copy;
  half.cpu_product_dtype = half_slow_tiles.cpu_product_dtype = half_slow_copy.cpu_product_dtype = "float16";
  ASSERT_TRUE(model::multiplies_in_dequantized_tiles(at::kHalf, 2 * 64));
  const double half_one = prefill_compute(2, 1, half, 2);
  EXPECT_GT(prefill_compute(2, 1, half_slow_tiles, 2) - half_one, 0) << "fp16: the tiles";
  EXPECT_EQ(prefill_compute(2, 1, half_slow_copy, 2) - half_one, 0) << "fp16: one gpu batch makes no dense copy";
}

// A stand-in too small for the weights: the search never pays a copy within host
// memory for weights it may multiply where they live (the guardrails' variants), which
// in the CPU sweep ran 1.27x faster than the FlexGen-shaped plan chosen before
// (opt-125m, 32 prompts of 32 tokens, 16 new, a 560 MiB gpu tier; its 477 MiB of fp32
// weights, the tied head kept as the token table, now fit there: 400 MiB here).
TEST(CpuStandIn, HostWeightsAreMultipliedWhereTheyLiveNotCopied) {
  const auto spec = model::resolve_spec("opt-125m");
  const runtime::Workload w{32, 16, 32};
  const runtime::Budgets b{parse_bytes("400MiB"), parse_bytes("14GiB"), parse_bytes("64GiB")};
  HardwareProfile timed = stand_in();
  timed.cpu_product_rates = {{1, 25e9}, {4, 12e9}, {16, 9e9}, {64, 3e9}};
  timed.cpu_matmul_flops = 5e10;
  SearchOptions o;
  o.dtype_bytes = 4;
  const auto chosen = search_policy(spec, w, b, timed, o);
  ASSERT_GT(chosen.policy.w_cpu_percent, 0) << chosen.policy.describe();
  EXPECT_TRUE(chosen.policy.cpu_weight_compute_decode && chosen.policy.cpu_weight_compute_prefill)
      << chosen.policy.describe() << " chosen by " << chosen.chosen_by;
  o.allow_cpu_weight_compute = false;  // --cpu-weight-compute off, or a re-plan that keeps it off
  const auto copied = search_policy(spec, w, b, timed, o);
  EXPECT_FALSE(copied.policy.cpu_weight_compute_decode || copied.policy.cpu_weight_compute_prefill);
  EXPECT_GT(chosen.prediction.total_throughput, copied.prediction.total_throughput);
}

// A prefill-sized product on the stand-in runs the runtime's own product over many
// rows (the batch-invariant kernels), at the many-row rate the profile timed through
// it, not at LibTorch's GEMM rate: the two were 3.9x apart on a 2-core Xeon, and
// pricing the GEMM's made every plan's prefill look 2.7x faster than it ran.
TEST(CpuStandIn, ItsManyRowProductsRunAtTheProfilesManyRowRateNotTheGemms) {
  const auto spec = model::resolve_spec("opt-125m");
  const runtime::Workload w{128, 4, 4};
  const runtime::Policy resident = test::make_policy(4, 1, {100, 0, 100, 0, 100, 0}, false);
  HardwareProfile timed = stand_in();
  timed.cpu_product_rates = {{1, 25e9}, {4, 12e9}, {16, 9e9}, {64, 3e9}};
  timed.cpu_matmul_flops = 5e10;
  HardwareProfile faster_gemm = timed;
  faster_gemm.mm_flops_prefill *= 2;
  EXPECT_DOUBLE_EQ(task(predict(spec, resident, w, timed, 4).prefill, Task::Compute),
                   task(predict(spec, resident, w, faster_gemm, 4).prefill, Task::Compute));
  HardwareProfile slower_kernel = timed;
  slower_kernel.cpu_matmul_flops /= 2;
  const ModelSizes sizes(spec, 4);
  const double flops = 4 * 128 * sizes.linear_flops_per_token();  // one gpu batch of 4 prompts
  EXPECT_NEAR(task(predict(spec, resident, w, slower_kernel, 4).prefill, Task::Compute) -
                  task(predict(spec, resident, w, timed, 4).prefill, Task::Compute),
              flops / 2.5e10 - flops / 5e10, 1e-9);
}

// The runtime looks the embedding up and multiplies the head where they live whenever
// a phase computes weights at home (runtime::weight_multiplied_at_home): the model
// prices no load of either over the link in that phase, and the head's product on the
// CPU with its input and logits crossing.
TEST(CpuWeightComputeModel, TheEmbeddingAndHeadAreMultipliedWhereTheyLive) {
  const auto spec = model::resolve_spec("opt-6.7b");
  const runtime::Workload w{256, 16};
  const auto hw = t4_with_cpu_rates(1e12, 50e9);
  const runtime::Policy loaded = weights_on_cpu(16, 2, 0);
  runtime::Policy at_home = loaded;
  at_home.cpu_weight_compute_decode = true;
  const Prediction a = predict(spec, loaded, w, hw), b = predict(spec, at_home, w, hw);
  EXPECT_GT(task(a.decode_edges, Task::WeightLoad), 0);
  EXPECT_EQ(task(b.decode_edges, Task::WeightLoad), 0) << "the head does not cross in decode";
  EXPECT_DOUBLE_EQ(task(a.prefill_edges, Task::WeightLoad), task(b.prefill_edges, Task::WeightLoad))
      << "prefill still loads it";
  const ModelSizes sizes(spec, 2);
  const double rows = 16, flops = rows * sizes.head_flops_per_token();
  const double on_cpu = 2 * std::max(flops / hw.cpu_matmul_flops, sizes.head_weight_bytes({}) / hw.cpu_gemv_bandwidth);
  const double crossing = 32 * (sizes.embedding_output_bytes_per_token() / hw.cpu_to_gpu +
                                sizes.hidden_bytes_per_token() / hw.gpu_to_cpu_hidden +
                                sizes.logits_bytes_per_token() / hw.cpu_to_gpu);
  EXPECT_EQ(sizes.embedding_output_bytes_per_token(), 2 * 4096 * 2) << "OPT: a token's row and a position's";
  EXPECT_NEAR(task(b.decode_edges, Task::Compute), on_cpu + crossing, 1e-9);
  // A share of the layers at home takes the head home too (the outer layers go with any share).
  runtime::Policy some_layers = at_home;
  some_layers.cpu_weight_compute_layer_percent = 25;
  EXPECT_EQ(task(predict(spec, some_layers, w, hw).decode_edges, Task::WeightLoad), 0);
}

TEST(CpuWeightComputeModel, HalfTheLayersAtHomeHalveTheLoadAndShareTheProduct) {
  const auto spec = model::resolve_spec("opt-30b");
  const auto hw = t4_with_cpu_rates(1e12, 50e9);
  runtime::Policy all = weights_on_cpu(16, 1, 0);
  all.cpu_weight_compute_decode = true;
  runtime::Policy half = all;
  half.cpu_weight_compute_layer_percent = 50;
  const auto loaded = predict(spec, weights_on_cpu(16, 1, 0), {512, 32}, hw);
  const auto a = predict(spec, all, {512, 32}, hw), h = predict(spec, half, {512, 32}, hw);
  EXPECT_NEAR(task(h.decode, Task::WeightLoad), task(loaded.decode, Task::WeightLoad) / 2, 1e-12);
  EXPECT_NEAR(task(h.decode, Task::Compute), (task(a.decode, Task::Compute) + task(loaded.decode, Task::Compute)) / 2,
              1e-12);
}

TEST(CpuWeightComputeProfile, TheRatesAreOptionalPositiveFieldsThatRoundTrip) {
  const HardwareProfile builtin = *builtin_profile("t4-flexgen");
  EXPECT_FALSE(builtin.prices_cpu_matmuls());
  EXPECT_EQ(builtin.cpu_gemv_rate(), builtin.cpu_attention_bandwidth) << "the estimate without a measurement";
  nlohmann::json j = profile_to_json(t4_with_cpu_rates(2e12, 80e9));
  const HardwareProfile back = profile_from_json(j, "p.json");
  EXPECT_TRUE(back.prices_cpu_matmuls());
  EXPECT_EQ(back.cpu_matmul_flops, 2e12);
  EXPECT_EQ(back.cpu_gemv_bandwidth, 80e9);
  EXPECT_FALSE(profile_to_json(builtin).at("cpu").contains("gemv_bandwidth")) << "unmeasured rates are not written";
  j["cpu"]["gemv_bandwidth"] = -1;
  EXPECT_THROW(profile_from_json(j, "p.json"), Error);
}

// Seconds per weight byte interpolated linearly in rows between measured counts; below
// the first count its rate; beyond the last, never faster than there nor than the
// many-row FLOP rate; without the table, the two rates as before.
TEST(CpuWeightComputeProfile, ProductRatesPriceAProductByItsRowCount) {
  HardwareProfile p = t4_with_cpu_rates(1e12, 40e9);
  const double bytes = 1e9;
  EXPECT_DOUBLE_EQ(p.cpu_product_seconds(32, bytes, 32e9), std::max(32e9 / 1e12, bytes / 40e9));
  p.cpu_product_rates = {{1, 40e9}, {16, 40e9}, {32, 10e9}, {64, 8e9}};
  EXPECT_DOUBLE_EQ(p.cpu_product_seconds(1, bytes, 1e9), bytes / 40e9);
  EXPECT_DOUBLE_EQ(p.cpu_product_seconds(0.5, bytes, 0.5e9), bytes / 40e9);
  EXPECT_DOUBLE_EQ(p.cpu_product_seconds(8, bytes, 8e9), bytes / 40e9);
  EXPECT_DOUBLE_EQ(p.cpu_product_seconds(24, bytes, 24e9), bytes * (0.5 / 40e9 + 0.5 / 10e9));
  EXPECT_DOUBLE_EQ(p.cpu_product_seconds(32, bytes, 32e9), bytes / 10e9);
  EXPECT_DOUBLE_EQ(p.cpu_product_seconds(128, bytes, 100e9), bytes / 8e9) << "bounded by the last measured rate";
  EXPECT_DOUBLE_EQ(p.cpu_product_seconds(512, bytes, 512e9), 512e9 / 1e12) << "bounded by the many-row rate";
  EXPECT_TRUE(p.prices_cpu_matmuls());
  p.cpu_matmul_flops = p.cpu_gemv_bandwidth = 0;
  EXPECT_TRUE(p.prices_cpu_matmuls()) << "the table alone prices products";
}

TEST(CpuWeightComputeProfile, ProductRatesRoundTripAndMalformedOnesAreRefused) {
  HardwareProfile p = t4_with_cpu_rates(2e12, 80e9);
  p.cpu_product_rates = {{1, 80e9}, {32, 12.5e9}};
  nlohmann::json j = profile_to_json(p);
  EXPECT_EQ(profile_from_json(j, "p.json").cpu_product_rates, p.cpu_product_rates);
  EXPECT_FALSE(profile_to_json(t4_with_cpu_rates(2e12, 80e9)).at("cpu").contains("product_rates"))
      << "an unmeasured table is not written";
  for (const char* bad : {R"([[32, 1e10], [1, 4e10]])", R"([[0, 1e10]])", R"([[1, -1]])", R"([[1, 0]])",
                          R"([1, 2])", R"([[1.5, 1e10]])", R"("fast")"}) {
    j["cpu"]["product_rates"] = nlohmann::json::parse(bad);
    try {
      (void)profile_from_json(j, "p.json");
      ADD_FAILURE() << "accepted cpu.product_rates " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("p.json: hardware profile field 'cpu.product_rates'"), std::string::npos)
          << e.what();
    }
  }
}

// The small-row limit a profile measured, with the dtype it was measured in: written
// when measured, read back, and refused (naming the file and the field) when it is not
// a row count, names no dtype or a dtype the kernels do not take.
TEST(CpuWeightComputeProfile, TheMeasuredSmallRowLimitRoundTripsAndMalformedOnesAreRefused) {
  HardwareProfile p = t4_with_cpu_rates(2e12, 80e9);
  EXPECT_FALSE(profile_to_json(p).at("cpu").contains("small_matmul_max_rows")) << "unmeasured: not written";
  p.cpu_product_dtype = "float16";
  p.cpu_small_matmul_max_rows = 32;
  const HardwareProfile back = profile_from_json(profile_to_json(p), "p.json");
  EXPECT_EQ(back.cpu_product_dtype, "float16");
  EXPECT_EQ(back.cpu_small_matmul_max_rows, 32);
  const nlohmann::json good = profile_to_json(p);
  const std::pair<const char*, const char*> bad[] = {{"small_matmul_max_rows", "-1"},
                                                     {"small_matmul_max_rows", "18446744073709551615"},
                                                     {"small_matmul_max_rows", "32.5"},
                                                     {"small_matmul_max_rows", "\"many\""},
                                                     {"product_dtype", "\"float64\""},
                                                     {"product_dtype", "16"}};
  for (const auto& [field, value] : bad) {
    nlohmann::json j = good;
    j["cpu"][field] = nlohmann::json::parse(value);
    try {
      (void)profile_from_json(j, "p.json");
      ADD_FAILURE() << "accepted cpu." << field << " " << value;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("p.json: hardware profile field 'cpu.") + field),
                std::string::npos)
          << e.what();
    }
  }
  nlohmann::json no_dtype = good;
  no_dtype["cpu"].erase("product_dtype");
  EXPECT_THROW((void)profile_from_json(no_dtype, "p.json"), Error) << "a limit without the dtype it was measured in";
}

}  // namespace
}  // namespace tiergen::policy
