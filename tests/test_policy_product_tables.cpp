// The CPU's products timed per dtype (HardwareProfile::cpu_product_tables): the tables
// round-trip, a profile from before them keeps its one dtype, malformed ones are
// refused; a job is priced at its own dtype's rates, and never at another dtype's: a
// profile that did not time the job's dtype prices no CPU products in it.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernels_revision.h"
#include "policy/cost_model.h"
#include "policy/search.h"
#include "tiergen/common/bytes.h"
#include "tiergen/common/error.h"
#include "tiergen/model/presets.h"
#include "tests/support/tiny_model.h"

namespace tiergen::policy {
namespace {

CpuProductTable table(const std::string& dtype, double scale) {
  return {dtype,
          "small_matmul (avx2) at every row count",
          {{1, 20e9 * scale}, {16, 9e9 * scale}, {64, 3e9 * scale}},
          8e10 * scale,
          18e9 * scale,
          0,
          {{4, 64, {{1, 12e9 * scale}, {8, 2e9 * scale}}}, {8, 64, {{1, 16e9 * scale}, {8, 3.5e9 * scale}}}}};
}

// The host standing in for the GPU, as a 2-core machine measured it, with tables for
// float32 and bfloat16 whose many-row rates are 9x apart (AMX against fp32 FMA on a
// Xeon: 769 against 86 GFLOP/s).
HardwareProfile stand_in_with_tables() {
  HardwareProfile p = *builtin_profile("t4-flexgen");
  p.gpu_is_host = true;
  p.cpu_to_gpu = p.cpu_to_gpu_cache = p.gpu_to_cpu_cache = p.gpu_to_cpu_hidden = 15e9;
  p.gpu_memory_bandwidth = p.cpu_memory_bandwidth = 15e9;
  p.add_cpu_product_table(table("bfloat16", 1));
  CpuProductTable fp32 = table("float32", 1);
  fp32.matmul_flops /= 9;
  p.add_cpu_product_table(fp32);
  return p.with_cpu_products_of("float32");
}

// `profile` written out with `edit` made to its first product table is refused when read
// back, with an error that says `message`.
void expect_first_table_refused(const HardwareProfile& profile, const std::function<void(nlohmann::json&)>& edit,
                                const std::string& message) {
  nlohmann::json j = profile_to_json(profile);
  edit(j["cpu"]["product_tables"][0]);
  try {
    profile_from_json(j, "bad.json");
    ADD_FAILURE() << "accepted " << j["cpu"]["product_tables"][0].dump();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(CpuProductTables, EachDtypeRoundTripsAndAProfileFromBeforeKeepsItsOne) {
  const HardwareProfile p = stand_in_with_tables();
  ASSERT_EQ(p.cpu_product_tables.size(), 2u);
  EXPECT_EQ(p.cpu_product_tables[0].dtype, "float32") << "kept in the order float32, float16, bfloat16";
  const HardwareProfile back = profile_from_json(profile_to_json(p), "p.json");
  EXPECT_EQ(back.cpu_product_tables, p.cpu_product_tables);
  EXPECT_EQ(back.cpu_product_dtype, "float32");
  EXPECT_EQ(back.cpu_product_rates, p.cpu_product_rates);
  EXPECT_EQ(back.cpu_quantized_product_rates, p.cpu_product_tables[0].quantized) << "the priced dtype's";

  // A measured profile written before the tables: its one dtype becomes its table.
  nlohmann::json old = profile_to_json(p);
  old["cpu"].erase("product_tables");
  const HardwareProfile legacy = profile_from_json(old, "old.json");
  ASSERT_EQ(legacy.cpu_product_tables.size(), 1u);
  EXPECT_EQ(legacy.cpu_product_tables[0].dtype, "float32");
  EXPECT_EQ(legacy.cpu_product_tables[0].rates, p.cpu_product_rates);
  EXPECT_EQ(legacy.cpu_product_tables[0].matmul_flops, p.cpu_matmul_flops);
  // A hand-written one (no dtype named) has no tables: its rates price every dtype.
  old["cpu"].erase("product_dtype");
  EXPECT_FALSE(profile_from_json(old, "hand.json").times_cpu_products_per_dtype());

  const auto refused = [&](nlohmann::json tables, const std::string& message) {
    nlohmann::json j = profile_to_json(p);
    j["cpu"]["product_tables"] = tables;
    try {
      profile_from_json(j, "bad.json");
      ADD_FAILURE() << "accepted " << tables.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  const nlohmann::json one = profile_to_json(p)["cpu"]["product_tables"][0];
  refused(nlohmann::json::array({one, one}), "bad.json: hardware profile field 'cpu.product_tables' has two float32");
  nlohmann::json int8 = one;
  int8["dtype"] = "int8";
  refused(nlohmann::json::array({int8}), "has a table of dtype 'int8'");
  nlohmann::json descending = one;
  descending["rates"] = {{16, 1e9}, {4, 1e9}};
  refused(nlohmann::json::array({descending}), "needs ascending row counts");
  nlohmann::json three_bits = one;
  three_bits["quantized"][0]["bits"] = 3;
  refused(nlohmann::json::array({three_bits}), "(float32) has 3-bit rates: 4 or 8");
  nlohmann::json unknown = one;
  unknown["rate"] = 1;
  refused(nlohmann::json::array({unknown}), "unknown hardware profile field 'cpu.product_tables[0].rate'");
  refused(nlohmann::json::object(), "'cpu.product_tables' must be a list");
}

// A table records the kernel level and the kernels' revision it was timed at; timed at
// another level (TIERGEN_CPU_ISA, another CPU) or by other kernels, it is stale for this
// process. A table timed before revisions were recorded is revision 1; a hand-written
// one (no kernel path) is not judged.
TEST(CpuProductTables, ATableTimedByOtherKernelsIsStale) {
  CpuProductTable t = table("float32", 1);
  CpuProductTable hand_written = t;
  hand_written.kernel_path.clear();
  EXPECT_EQ(stale_cpu_products(hand_written), "") << "a table that records neither a path nor a level";
  EXPECT_EQ(stale_cpu_products(t), fmt::format("with kernels of revision 1, and this build's are revision {}",
                                               kernels::kCpuProductKernelsRevision))
      << "a table timed before revisions were recorded";
  const std::string level = kernels::cpu_isa_name(kernels::cpu_isa_in_use());
  t.kernel_level = level;
  t.kernels_revision = kernels::kCpuProductKernelsRevision;
  EXPECT_EQ(stale_cpu_products(t), "without the cost of a product call beside its bytes")
      << "timed before calls were priced: its layers would be priced by bytes alone";
  t.call_seconds = {{1, 10e-6}};
  EXPECT_EQ(stale_cpu_products(t), "without timing them over short rows")
      << "timed before short rows were: every row length would be priced at the long rows' rates";
  t.row_length = 4096;
  t.short_row_length = 768;
  t.short_row_rates = {{1, 15e9}, {16, 6e9}, {64, 2e9}};
  EXPECT_EQ(stale_cpu_products(t), "");
  HardwareProfile p = stand_in_with_tables();
  p.add_cpu_product_table(t);
  const HardwareProfile back = profile_from_json(profile_to_json(p), "p.json");
  ASSERT_NE(back.cpu_product_table("float32"), nullptr);
  EXPECT_EQ(back.cpu_product_table("float32")->kernel_level, level);
  EXPECT_EQ(back.cpu_product_table("float32")->kernels_revision, kernels::kCpuProductKernelsRevision);

  CpuProductTable older = t;
  older.kernels_revision = kernels::kCpuProductKernelsRevision - 1;
  EXPECT_EQ(stale_cpu_products(older), fmt::format("with kernels of revision {}, and this build's are revision {}",
                                                   older.kernels_revision, kernels::kCpuProductKernelsRevision));
  CpuProductTable elsewhere = t;
  elsewhere.kernel_level = level == "portable" ? "avx2" : "portable";
  EXPECT_EQ(stale_cpu_products(elsewhere),
            fmt::format("at kernel level {}, and this process runs {}", elsewhere.kernel_level, level));

  nlohmann::json j = profile_to_json(p);
  j["cpu"]["product_tables"][0]["kernels_revision"] = 0;
  EXPECT_THROW(profile_from_json(j, "bad.json"), Error);
  j["cpu"]["product_tables"][0]["kernels_revision"] = "2";
  EXPECT_THROW(profile_from_json(j, "bad.json"), Error);
}

// A bf16 job on the stand-in is priced at the bf16 table: its prefill products at the
// bf16 many-row rate, 9x the fp32 table's here, which priced every bf16 job before.
TEST(CpuProductTables, AJobIsPricedAtItsOwnDtypesRates) {
  const auto spec = model::resolve_spec("opt-125m");
  const runtime::Workload w{128, 4, 4};
  const runtime::Policy resident = test::make_policy(4, 1, {100, 0, 100, 0, 100, 0}, false);
  const HardwareProfile p = stand_in_with_tables();
  const HardwareProfile bf16 = p.with_cpu_products_of("bfloat16");
  EXPECT_EQ(bf16.cpu_product_dtype, "bfloat16");
  EXPECT_EQ(bf16.cpu_matmul_flops, 8e10);
  EXPECT_EQ(bf16.cpu_product_tables, p.cpu_product_tables) << "the tables themselves unchanged";
  const ModelSizes sizes(spec, 2);
  const double flops = 4 * 128 * sizes.linear_flops_per_token();  // one gpu batch of 4 prompts
  const auto prefill_compute = [&](const HardwareProfile& hw) {
    return predict(spec, resident, w, hw, 2).prefill.tasks[static_cast<int>(Task::Compute)];
  };
  EXPECT_NEAR(prefill_compute(p) - prefill_compute(bf16), flops / (8e10 / 9) - flops / 8e10, 1e-9);
}

// The guard against pricing one dtype's path at another's: on a host whose profile
// timed float32 only, a bfloat16 job's search does not compute weights on the CPU at
// float32's rates (where float32's would have it do so), and a profile without tables
// is left as it is.
TEST(CpuProductTables, AnUntimedDtypeIsNotPricedAtAnotherDtypesRates) {
  const auto spec = model::resolve_spec("opt-30b");
  const runtime::Workload w{512, 32};
  const runtime::Budgets b{parse_bytes("16GiB"), parse_bytes("208GiB"), parse_bytes("1536GiB")};
  HardwareProfile gpu_host = *builtin_profile("t4-flexgen");
  gpu_host.add_cpu_product_table({"float16", "small_matmul (avx2) at every row count", {{1, 200e9}, {64, 200e9}},
                                  5e12, 200e9, 0});
  SearchOptions o;
  o.guardrails = false;  // the LP's pricing (guardrails never multiply weights at home)
  const auto timed = search_policy(spec, w, b, gpu_host.with_cpu_products_of("float16"), o);
  EXPECT_TRUE(timed.policy.cpu_weight_compute_decode) << timed.policy.describe();

  const HardwareProfile untimed = gpu_host.with_cpu_products_of("bfloat16");
  EXPECT_FALSE(untimed.prices_cpu_matmuls());
  EXPECT_EQ(untimed.cpu_product_dtype, "");
  const auto chosen = search_policy(spec, w, b, untimed, o);
  EXPECT_FALSE(chosen.policy.cpu_weight_compute_decode || chosen.policy.cpu_weight_compute_prefill)
      << chosen.policy.describe();

  HardwareProfile hand_written = *builtin_profile("t4-flexgen");
  hand_written.cpu_matmul_flops = 5e12;
  hand_written.cpu_gemv_bandwidth = 200e9;
  const HardwareProfile same = hand_written.with_cpu_products_of("bfloat16");
  EXPECT_EQ(same.cpu_matmul_flops, 5e12);
  EXPECT_TRUE(same.prices_cpu_matmuls());
}

// A layer's products are priced by their calls too (CpuProductTable::call_seconds): the
// rates are of one product over a weight larger than the caches, and a model's layer
// makes several calls over matrices of a few MB, each costing the timed seconds at its
// row count beside its bytes.
TEST(CpuProductTables, EachProductCallCostsItsTimedSecondsBesideItsBytes) {
  HardwareProfile p = stand_in_with_tables();
  CpuProductTable fp32 = *p.cpu_product_table("float32");
  fp32.call_seconds = {{1, 8e-6}, {16, 20e-6}, {64, 50e-6}};
  p.add_cpu_product_table(fp32);
  const HardwareProfile priced = p.with_cpu_products_of("float32");
  const double rows = 16, bytes = 4096.0 * 4096 * 4, flops = 2 * rows * 4096 * 4096;
  const double by_bytes = bytes / 9e9;  // the 16-row rate
  EXPECT_DOUBLE_EQ(priced.cpu_product_seconds(rows, bytes, flops), by_bytes) << "no calls given: bytes alone";
  EXPECT_DOUBLE_EQ(priced.cpu_product_seconds(rows, bytes, flops, 7), by_bytes + 7 * 20e-6);
  EXPECT_DOUBLE_EQ(priced.cpu_call_seconds_at(8), 8e-6 + 7.0 / 15 * (20e-6 - 8e-6)) << "interpolated in rows";
  EXPECT_DOUBLE_EQ(priced.cpu_call_seconds_at(1024), 50e-6) << "beyond the last count, its value";
  EXPECT_DOUBLE_EQ(p.with_cpu_products_of("bfloat16").cpu_product_seconds(rows, bytes, flops, 7), bytes / 9e9)
      << "a dtype whose table has no call costs: bytes alone";

  // On the stand-in, a decoder layer of OPT-125m makes six calls per gpu batch (q, k, v,
  // out, fc1, fc2), LLaMA's seven.
  EXPECT_EQ(ModelSizes(model::resolve_spec("opt-125m"), 4).linear_products(), 6);
  EXPECT_EQ(ModelSizes(model::resolve_spec("llama-2-7b"), 4).linear_products(), 7);
  // The head: the vocabulary projection, after OPT-350m's project_out.
  EXPECT_EQ(ModelSizes(model::resolve_spec("opt-125m"), 4).head_products(), 1);
  EXPECT_EQ(ModelSizes(model::resolve_spec("opt-350m"), 4).head_products(), 2);
  const auto spec = model::resolve_spec("opt-125m");
  const runtime::Policy policy = test::make_policy(16, 2, {100, 0, 100, 0, 100, 0}, false);
  const runtime::Workload w{16, 8, 32};
  const auto decode_compute = [&](const HardwareProfile& hw) {
    return predict(spec, policy, w, hw, 4).decode.tasks[static_cast<int>(Task::Compute)];
  };
  EXPECT_NEAR(decode_compute(priced) - decode_compute(stand_in_with_tables()), 2 * 6 * 20e-6, 1e-12)
      << "six calls of 16 rows for each of the two gpu batches";
  // Compressed weights multiplied in place pay the same calls (the dense products' cost,
  // until the in-place products' own calls are timed).
  runtime::Policy compressed = policy;
  compressed.compress_weight = {true, 4, 64};
  const auto compressed_compute = [&](const HardwareProfile& hw) {
    return predict(spec, compressed, w, hw, 4).decode.tasks[static_cast<int>(Task::Compute)];
  };
  EXPECT_NEAR(compressed_compute(priced) - compressed_compute(stand_in_with_tables()), 2 * 6 * 20e-6, 1e-12);

  // The costs round-trip with their table; descending or negative ones are refused.
  const HardwareProfile back = profile_from_json(profile_to_json(priced), "p.json");
  EXPECT_EQ(back.cpu_call_seconds, priced.cpu_call_seconds);
  EXPECT_EQ(*back.cpu_product_table("float32"), fp32);
  const auto refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& message) {
    expect_first_table_refused(priced, edit, message);
  };
  refused([](nlohmann::json& t) { t["call_seconds"][1][1] = -1e-6; }, "needs call_seconds of ascending row counts");
  refused([](nlohmann::json& t) { t["call_seconds"][1][0] = 1; }, "needs call_seconds of ascending row counts");
  refused([](nlohmann::json& t) { t["call_seconds"] = 3; }, "'cpu.product_tables[0].call_seconds' must be a list");
}

// A product is priced at the length of its W rows: the profile times the same bytes in
// rows of 4096 and of 768 elements, and a row length between is priced linearly in its
// logarithm (on a 2-core Zen 5, fp32 at 16 rows of x: 21 GB/s over rows of 768, 24.6 over
// 1024, 27 over 2048 and 4096).
TEST(CpuProductTables, EachProductIsPricedAtTheLengthOfItsRows) {
  HardwareProfile p = stand_in_with_tables();
  CpuProductTable fp32 = *p.cpu_product_table("float32");
  fp32.row_length = 4096;
  fp32.short_row_length = 768;
  fp32.short_row_rates = {{1, 16e9}, {16, 6e9}, {64, 2e9}};  // the long rows: 20e9, 9e9 and 3e9
  p.add_cpu_product_table(fp32);
  const HardwareProfile priced = p.with_cpu_products_of("float32");
  const double bytes = 1e9, flops = 2 * 16 * 1e9 / 4;
  const auto at = [&](double rows, const ProductRowLengths& lengths) {
    return priced.cpu_product_seconds(rows, bytes, flops, 0, lengths);
  };
  EXPECT_DOUBLE_EQ(at(16, {}), bytes / 9e9) << "no lengths given: the long rows' rate";
  EXPECT_DOUBLE_EQ(at(16, {{4096, 1.0}}), bytes / 9e9);
  EXPECT_DOUBLE_EQ(at(16, {{11008, 1.0}}), bytes / 9e9) << "longer rows: the long rows' rate";
  EXPECT_DOUBLE_EQ(at(16, {{768, 1.0}}), bytes / 6e9);
  EXPECT_DOUBLE_EQ(at(16, {{512, 1.0}}), bytes / 6e9) << "shorter rows: the short rows' rate";
  const double t = std::log(2048.0 / 768) / std::log(4096.0 / 768);
  EXPECT_DOUBLE_EQ(at(16, {{2048, 1.0}}), bytes * ((1 - t) / 6e9 + t / 9e9)) << "linear in log(row length)";
  EXPECT_DOUBLE_EQ(at(16, {{768, 0.75}, {4096, 0.25}}), bytes * (0.75 / 6e9 + 0.25 / 9e9)) << "each share at its own";
  EXPECT_DOUBLE_EQ(at(8, {{768, 1.0}}), bytes * (8.0 / 15 / 16e9 + 7.0 / 15 / 6e9)) << "interpolated in rows";
  EXPECT_DOUBLE_EQ(at(64, {{768, 1.0}}), bytes / 2e9);
  EXPECT_DOUBLE_EQ(at(128, {{768, 1.0}}), std::max(bytes / 3e9, flops / priced.cpu_matmul_rate()))
      << "beyond the row counts timed: as before, whatever the length";
  EXPECT_DOUBLE_EQ(p.with_cpu_products_of("bfloat16").cpu_product_seconds(16, bytes, flops, 0, {{768, 1.0}}),
                   bytes / 9e9)
      << "a table without short rows prices every length at its rates";

  // A model's products by the length of their rows, by bytes: OPT-125m's q, k, v, out and
  // fc1 read rows of its hidden size (768), fc2 rows of 3072; LLaMA-2-7B's down_proj reads
  // rows of 11008.
  const auto lengths = [](const std::string& name) { return ModelSizes(model::resolve_spec(name), 4).layer_row_lengths(); };
  const ProductRowLengths opt = lengths("opt-125m");
  ASSERT_EQ(opt.size(), 2u);
  EXPECT_EQ(opt[0].row_length, 768);
  EXPECT_DOUBLE_EQ(opt[0].bytes_fraction, 2.0 / 3);
  EXPECT_EQ(opt[1].row_length, 3072);
  EXPECT_DOUBLE_EQ(opt[1].bytes_fraction, 1.0 / 3);
  const ProductRowLengths llama = lengths("llama-2-7b");
  ASSERT_EQ(llama.size(), 2u);
  EXPECT_EQ(llama[1].row_length, 11008);
  EXPECT_NEAR(llama[1].bytes_fraction, 11008.0 / (4 * 4096 + 3 * 11008), 1e-12);
  const ProductRowLengths head = ModelSizes(model::resolve_spec("opt-125m"), 4).head_row_lengths();
  ASSERT_EQ(head.size(), 1u);
  EXPECT_EQ(head[0].row_length, 768);

  // The stand-in's decode step of OPT-125m (16 rows, two gpu batches, everything on its
  // "gpu") is priced at those lengths: each batch's products at the short rows' rate
  // for two thirds of the bytes, fc2's third between the two rates.
  const auto spec = model::resolve_spec("opt-125m");
  const ModelSizes sizes(spec, 4);
  const runtime::Policy policy = test::make_policy(16, 2, {100, 0, 100, 0, 100, 0}, false);
  const runtime::Workload w{16, 8, 32};
  const auto decode_compute = [&](const HardwareProfile& hw) {
    return predict(spec, policy, w, hw, 4).decode.tasks[static_cast<int>(Task::Compute)];
  };
  const double layer = sizes.layer_weight_dense_bytes();
  const double fc2 = std::log(3072.0 / 768) / std::log(4096.0 / 768);  // of the way to the long rows' rate
  EXPECT_NEAR(decode_compute(priced) - decode_compute(stand_in_with_tables()),
              2 * layer * (2.0 / 3 + (1 - fc2) / 3) * (1 / 6e9 - 1 / 9e9), 1e-12);
  // Compressed weights multiplied in place were timed over long rows only: at short rows
  // they cost what the dense products do there (the factor over the long rows' rate).
  const double factor = priced.cpu_row_length_factor(16, sizes.layer_row_lengths());
  EXPECT_DOUBLE_EQ(factor, 1 + (2.0 / 3 + (1 - fc2) / 3) * (9e9 / 6e9 - 1));
  EXPECT_DOUBLE_EQ(priced.cpu_row_length_factor(128, sizes.layer_row_lengths()),
                   priced.cpu_row_length_factor(64, sizes.layer_row_lengths()))
      << "beyond the row counts timed: the factor at the last (in-place products run past it)";
  EXPECT_GT(priced.cpu_row_length_factor(64, sizes.layer_row_lengths()), 1);
  runtime::Policy compressed = policy;
  compressed.compress_weight = {true, 4, 64};
  const auto compressed_compute = [&](const HardwareProfile& hw) {
    return predict(spec, compressed, w, hw, 4).decode.tasks[static_cast<int>(Task::Compute)];
  };
  const double in_place = *priced.cpu_quantized_product_seconds(4, 16, sizes.layer_weight_bytes(compressed.compress_weight));
  EXPECT_NEAR(compressed_compute(priced) - compressed_compute(stand_in_with_tables()), 2 * in_place * (factor - 1),
              1e-12);

  // The lengths and short rates round-trip with their table; short rates without both
  // lengths, or with a short length not below the long one, are refused.
  const HardwareProfile back = profile_from_json(profile_to_json(priced), "p.json");
  EXPECT_EQ(*back.cpu_product_table("float32"), fp32);
  EXPECT_EQ(back.cpu_short_row_rates, fp32.short_row_rates) << "the priced dtype's";
  EXPECT_EQ(back.cpu_short_row_length, 768);
  const auto refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& message) {
    expect_first_table_refused(priced, edit, message);
  };
  refused([](nlohmann::json& t) { t.erase("row_length"); }, "it needs a row_length and a shorter short_row_length");
  refused([](nlohmann::json& t) { t["short_row_length"] = 4096; }, "a shorter short_row_length");
  refused([](nlohmann::json& t) { t["short_row_length"] = -3; }, "must be a positive element count");
  refused([](nlohmann::json& t) { t["short_row_rates"][1][0] = 1; }, "needs ascending row counts");
  refused([](nlohmann::json& t) { t["short_row_rates"].erase(2); }, "at other row counts than its rates");
}

// A host standing in for the GPU keeps compressed weights compressed wherever they live
// and multiplies them in place for few rows (as at home), at the rates the profile timed
// for that format: no dequantization per layer load as a GPU does, and not the dense
// product's rate over the stored bytes (4-bit decode of a TinyLlama shape on a 2-core
// Xeon: predicted 25.8 tok/s with both, measured 77; 92 with the timed rates).
TEST(CpuStandIn, CompressedWeightsAreMultipliedInPlaceAtTheirTimedRates) {
  const auto spec = model::resolve_spec("opt-125m");
  const runtime::Workload w{16, 8, 1};
  runtime::Policy p = test::make_policy(1, 1, {100, 0, 100, 0, 100, 0}, false);
  p.compress_weight = {true, 4, 64};
  const HardwareProfile bf16 = stand_in_with_tables().with_cpu_products_of("bfloat16");
  const Prediction timed = predict(spec, p, w, bf16, 2);
  EXPECT_EQ(timed.decode.tasks[static_cast<int>(Task::Dequantize)], 0) << "nothing dequantized per layer load";
  HardwareProfile slower = bf16;
  for (auto& q : slower.cpu_quantized_product_rates) {
    for (auto& rate : q.rates) rate.second /= 2;
  }
  const ModelSizes sizes(spec, 2);
  const double stored = sizes.layer_weight_bytes(p.compress_weight);  // one row: the 1-row rate, 12e9
  const auto decode_compute = [&](const HardwareProfile& hw) {
    return predict(spec, p, w, hw, 2).decode.tasks[static_cast<int>(Task::Compute)];
  };
  EXPECT_NEAR(decode_compute(slower) - decode_compute(bf16), stored / 6e9 - stored / 12e9, 1e-9);
  // Without timed rates, the dense rates' estimate over the stored bytes, as before.
  HardwareProfile untimed = bf16;
  untimed.cpu_quantized_product_rates.clear();
  EXPECT_NEAR(decode_compute(bf16) - decode_compute(untimed), stored / 12e9 - stored / 18e9, 1e-9);
}

// An in-place compressed product pays its own timed cost per call (its kernel sets up
// per call), in place of the dense calls' cost, which stands in only where the profile
// did not time it; the timed costs round-trip through the profile file, and seconds at
// descending row counts are refused.
TEST(CpuStandIn, CompressedProductCallsCostTheirOwnTimedSeconds) {
  const auto spec = model::resolve_spec("opt-125m");
  const runtime::Workload w{16, 8, 1};
  runtime::Policy p = test::make_policy(1, 1, {100, 0, 100, 0, 100, 0}, false);
  p.compress_weight = {true, 4, 64};
  HardwareProfile dense_calls = stand_in_with_tables().with_cpu_products_of("bfloat16");
  dense_calls.cpu_call_seconds = {{1, 10e-6}, {16, 20e-6}};
  HardwareProfile own_calls = dense_calls;
  for (auto& table : own_calls.cpu_product_tables) {
    for (auto& q : table.quantized) q.call_seconds = {{1, 110e-6}, {8, 150e-6}};
  }
  own_calls = own_calls.with_cpu_products_of("bfloat16");
  ASSERT_EQ(own_calls.cpu_quantized_call_seconds_at(4, 1), 110e-6);
  EXPECT_EQ(own_calls.cpu_quantized_call_seconds_at(4, 64), 150e-6) << "beyond the last count: its cost";
  EXPECT_FALSE(dense_calls.cpu_quantized_call_seconds_at(4, 1)) << "not timed";
  const ModelSizes sizes(spec, 2);
  const auto decode_compute = [&](const HardwareProfile& hw) {
    return predict(spec, p, w, hw, 2).decode.tasks[static_cast<int>(Task::Compute)];
  };
  EXPECT_NEAR(decode_compute(own_calls) - decode_compute(dense_calls),
              double(sizes.linear_products()) * (110e-6 - 10e-6), 1e-12);

  const HardwareProfile back = profile_from_json(profile_to_json(own_calls), "p.json");
  EXPECT_EQ(back.cpu_product_tables, own_calls.cpu_product_tables);
  EXPECT_EQ(back.cpu_quantized_call_seconds_at(8, 1), 110e-6);
  expect_first_table_refused(
      own_calls, [](nlohmann::json& t) { t["quantized"][0]["call_seconds"] = {{8, 1e-4}, {1, 1e-4}}; },
      "(float32, 4 bits) needs call_seconds of ascending row counts");
}

}  // namespace
}  // namespace tiergen::policy
