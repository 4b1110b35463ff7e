// A host standing in for the GPU attends the share of the cache it loads from its cpu or
// disk tier with LibTorch's operators (model::attend), and the profile times that
// attention per dtype (CpuProductTable::loaded_cache_attention): it round-trips with its
// table, malformed ones are refused, a job is priced at its own dtype's, the cost model
// prices that share as its call, units (a sequence's kv head), positions (a unit's key),
// scores (a query head at a position) and bytes, and only on the stand-in; calibration scales it with the
// stand-in's other products.
#include <gtest/gtest.h>

#include <array>
#include <string>

#include <nlohmann/json.hpp>

#include "policy/calibration.h"
#include "policy/cost_model.h"
#include "policy/hardware_profile.h"
#include "policy/loaded_cache_attention_fit.h"
#include "tiergen/common/error.h"
#include "tiergen/model/presets.h"
#include "tests/support/tiny_model.h"

namespace tiergen::policy {
namespace {

// The host standing in for the GPU, with float32 and bfloat16 tables whose loaded-cache
// attention differs (bf16 on AMX ran 1.3-3.3x as fast as fp32 on one host).
HardwareProfile stand_in() {
  HardwareProfile p = *builtin_profile("t4-flexgen");
  p.gpu_is_host = true;
  p.cpu_to_gpu = p.cpu_to_gpu_cache = p.gpu_to_cpu_cache = p.gpu_to_cpu_hidden = 15e9;
  p.gpu_memory_bandwidth = p.cpu_memory_bandwidth = 15e9;
  CpuProductTable fp32{"float32", "small_matmul (avx2) at every row count", {{1, 20e9}, {64, 3e9}}, 8e10, 18e9, 0};
  fp32.loaded_cache_attention = {4e9, 30e-6, 2e-6, 40e-9, 5e-9};
  CpuProductTable bf16 = fp32;
  bf16.dtype = "bfloat16";
  bf16.loaded_cache_attention = {8e9, 20e-6, 1e-6, 20e-9, 1e-9};
  p.add_cpu_product_table(fp32);
  p.add_cpu_product_table(bf16);
  return p.with_cpu_products_of("float32");
}

// Weights and activations resident, the cache wholly on the cpu tier, attention on the
// "gpu": every decode step loads the cache and attends it with LibTorch's operators.
runtime::Policy cache_loaded_from_cpu(int64_t gbs, int64_t ngb) {
  return test::make_policy(gbs, ngb, {100, 0, 0, 100, 100, 0}, false);
}

double decode_compute(const model::Spec& spec, const runtime::Policy& policy, const HardwareProfile& hw) {
  return predict(spec, policy, {128, 32}, hw).decode.tasks[static_cast<int>(Task::Compute)];
}

TEST(LoadedCacheAttention, RoundTripsWithItsTableAndAJobIsPricedAtItsOwnDtypes) {
  const HardwareProfile p = stand_in();
  EXPECT_EQ(p.cpu_loaded_cache_attention, (LoadedCacheAttention{4e9, 30e-6, 2e-6, 40e-9, 5e-9}));
  EXPECT_EQ(p.with_cpu_products_of("bfloat16").cpu_loaded_cache_attention,
            (LoadedCacheAttention{8e9, 20e-6, 1e-6, 20e-9, 1e-9}));
  EXPECT_FALSE(p.with_cpu_products_of("float16").cpu_loaded_cache_attention.timed()) << "no float16 table";
  const HardwareProfile back = profile_from_json(profile_to_json(p), "p.json");
  EXPECT_EQ(back.cpu_product_tables, p.cpu_product_tables);
  EXPECT_EQ(back.cpu_loaded_cache_attention, p.cpu_loaded_cache_attention) << "the priced dtype's, read back";
  // A table without it (a CUDA host's, or one timed before it) writes none and reads none.
  HardwareProfile untimed = p;
  for (auto& t : untimed.cpu_product_tables) t.loaded_cache_attention = {};
  const nlohmann::json j = profile_to_json(untimed.with_cpu_products_of("float32"));
  EXPECT_FALSE(j["cpu"]["product_tables"][0].contains("loaded_cache_attention"));
  EXPECT_FALSE(profile_from_json(j, "p.json").cpu_loaded_cache_attention.timed());

  const auto refused = [&](const char* key, double value, const std::string& message) {
    nlohmann::json bad = profile_to_json(p);
    bad["cpu"]["product_tables"][0]["loaded_cache_attention"][key] = value;
    try {
      profile_from_json(bad, "bad.json");
      ADD_FAILURE() << "accepted " << key << " = " << value;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  refused("kv_bandwidth", 0,
          "bad.json: hardware profile field 'cpu.product_tables[0].loaded_cache_attention.kv_bandwidth' must be a "
          "positive number");
  refused("unit_seconds", -1e-6, "'cpu.product_tables[0].loaded_cache_attention.unit_seconds' must be a non-negative");
  refused("call_seconds", 2, "has a cost of a second or more per call, unit, position or score");
  refused("position_seconds", -1, "'cpu.product_tables[0].loaded_cache_attention.position_seconds' must be a");
  nlohmann::json unknown = profile_to_json(p);
  unknown["cpu"]["product_tables"][0]["loaded_cache_attention"]["per_byte"] = 1;
  EXPECT_THROW(profile_from_json(unknown, "bad.json"), Error);
}

// Times made by known costs give those costs back; a cost whose shapes came out in the
// wrong order (a noisy host) is zero, not negative; wider heads that took no longer
// leave no rate for the bytes, and nothing is fitted.
TEST(LoadedCacheAttention, TheFitRecoversTheCostsThatMadeTheTimes) {
  const LoadedCacheAttention truth{6e9, 300e-6, 1.5e-6, 30e-9, 12e-9};
  const auto times_of = [](const LoadedCacheAttention& costs, int64_t elem_bytes) {
    std::array<double, 5> t{};
    for (size_t i = 0; i < t.size(); ++i) {
      const AttentionProbeShape& s = kLoadedCacheAttentionShapes[i];
      t[i] = costs.seconds(1, double(s.units), s.positions(), s.scores(), s.kv_bytes(elem_bytes));
    }
    return t;
  };
  for (const int64_t elem_bytes : {4, 2}) {
    const auto fitted = fit_loaded_cache_attention(times_of(truth, elem_bytes), elem_bytes);
    ASSERT_TRUE(fitted.has_value());
    EXPECT_NEAR(fitted->kv_bandwidth, truth.kv_bandwidth, truth.kv_bandwidth * 1e-9) << elem_bytes;
    EXPECT_NEAR(fitted->call_seconds, truth.call_seconds, truth.call_seconds * 1e-9) << elem_bytes;
    EXPECT_NEAR(fitted->unit_seconds, truth.unit_seconds, truth.unit_seconds * 1e-9) << elem_bytes;
    EXPECT_NEAR(fitted->position_seconds, truth.position_seconds, truth.position_seconds * 1e-9) << elem_bytes;
    EXPECT_NEAR(fitted->score_seconds, truth.score_seconds, truth.score_seconds * 1e-9) << elem_bytes;
  }
  std::array<double, 5> noisy = times_of(truth, 4);
  noisy[4] = noisy[1] * 0.9;  // more query heads came out faster
  const auto clamped = fit_loaded_cache_attention(noisy, 4);
  ASSERT_TRUE(clamped.has_value());
  EXPECT_EQ(clamped->score_seconds, 0);
  EXPECT_GT(clamped->position_seconds, truth.position_seconds) << "the positions keep their own scores' cost";
  noisy = times_of(truth, 4);
  noisy[3] = noisy[2];
  EXPECT_FALSE(fit_loaded_cache_attention(noisy, 4).has_value());
}

// The share the stand-in loads is priced as the profile timed it: a call per gpu batch,
// a unit per sequence's kv head, a position per unit's key, a score per query head and
// position, the dense bytes of K and V at the timed rate; the bmm rate no longer prices
// it.
TEST(LoadedCacheAttention, TheStandInsLoadedShareIsPricedByItsCallUnitsPositionsScoresAndBytes) {
  const HardwareProfile host = stand_in();
  const auto opt = model::resolve_spec("opt-125m");  // 12 heads of 64, each its own kv head
  const runtime::Policy policy = cache_loaded_from_cpu(16, 2);
  HardwareProfile twice_as_fast = host;
  twice_as_fast.cpu_loaded_cache_attention.speed_up(2);
  // 32 sequences over 128 + 16 positions on average, fp16 K and V of 768 each.
  const double context = 128 + 16, bls = 32;
  const double attention = host.cpu_loaded_cache_attention.seconds(2, bls * 12, bls * 12 * context,
                                                                    bls * 12 * context, bls * context * 2 * 768 * 2);
  EXPECT_NEAR(decode_compute(opt, policy, host) - decode_compute(opt, policy, twice_as_fast), attention / 2, 1e-12);
  HardwareProfile slow_bmm = host;
  slow_bmm.bmm_flops_decode /= 10;
  EXPECT_DOUBLE_EQ(decode_compute(opt, policy, slow_bmm), decode_compute(opt, policy, host));

  // Grouped heads: a unit is a kv head with its query heads, a position a unit's key, a
  // score a query head's.
  const auto llama = model::resolve_spec("llama-2-70b");  // 64 query heads over 8 kv heads
  HardwareProfile no_units = host, no_positions = host, no_scores = host;
  no_units.cpu_loaded_cache_attention.unit_seconds = 0;
  no_positions.cpu_loaded_cache_attention.position_seconds = 0;
  no_scores.cpu_loaded_cache_attention.score_seconds = 0;
  EXPECT_NEAR(decode_compute(llama, policy, host) - decode_compute(llama, policy, no_units), bls * 8 * 2e-6, 1e-12);
  EXPECT_NEAR(decode_compute(llama, policy, host) - decode_compute(llama, policy, no_positions),
              bls * 8 * context * 40e-9, 1e-12);
  EXPECT_NEAR(decode_compute(llama, policy, host) - decode_compute(llama, policy, no_scores),
              bls * 64 * context * 5e-9, 1e-12);

  // Not timed (an older profile): the FLOPs at the bmm rate, as before.
  HardwareProfile untimed = host;
  untimed.cpu_loaded_cache_attention = {};
  HardwareProfile untimed_slow_bmm = untimed;
  untimed_slow_bmm.bmm_flops_decode /= 10;
  EXPECT_GT(decode_compute(opt, policy, untimed_slow_bmm), decode_compute(opt, policy, untimed));
  // A GPU's attention is its batched products whatever a table says.
  HardwareProfile gpu = host;
  gpu.gpu_is_host = false;
  HardwareProfile gpu_slow_bmm = gpu;
  gpu_slow_bmm.bmm_flops_decode /= 10;
  EXPECT_GT(decode_compute(opt, policy, gpu_slow_bmm), decode_compute(opt, policy, gpu));
  // The cache on the stand-in's gpu tier is the CPU kernel's (in place), never this.
  runtime::Policy resident = policy;
  resident.cache_gpu_percent = 100;
  resident.cache_cpu_percent = 0;
  EXPECT_DOUBLE_EQ(decode_compute(opt, resident, twice_as_fast), decode_compute(opt, resident, host));
}

// Calibration's "cpu products" term (the stand-in's "gpu" compute) scales it with the
// product rates, in the priced dtype and in every table.
TEST(LoadedCacheAttention, CalibrationScalesItWithTheStandInsProducts) {
  const HardwareProfile host = stand_in();
  CalibrationRun run;
  run.source = "run.json";
  run.spec = model::resolve_spec("opt-125m");
  run.policy = cache_loaded_from_cpu(16, 2);
  run.workload = {128, 32};
  run.dtype = "float32";
  run.decode_steps = 31;
  const Prediction p = predict(run.spec, run.policy, run.workload, host);
  // The run's compute took half as long again as predicted.
  run.compute_seconds = 1.5 * task_seconds(p, Task::Compute, false, run.spec.num_layers, run.decode_steps);
  const Calibration fit = calibrate(host, {run});
  double factor = 0;
  for (const auto& t : fit.terms) {
    if (t.name == "cpu products") factor = t.factor;
  }
  ASSERT_LT(factor, 0.95) << "slower than priced";
  LoadedCacheAttention expected = host.cpu_loaded_cache_attention;
  expected.speed_up(factor);
  const LoadedCacheAttention& fitted = fit.profile.cpu_loaded_cache_attention;
  EXPECT_NEAR(fitted.kv_bandwidth, expected.kv_bandwidth, expected.kv_bandwidth * 1e-12);
  EXPECT_NEAR(fitted.call_seconds, expected.call_seconds, expected.call_seconds * 1e-12);
  EXPECT_NEAR(fitted.unit_seconds, expected.unit_seconds, expected.unit_seconds * 1e-12);
  EXPECT_NEAR(fitted.position_seconds, expected.position_seconds, expected.position_seconds * 1e-12);
  EXPECT_NEAR(fitted.score_seconds, expected.score_seconds, expected.score_seconds * 1e-12);
  const CpuProductTable* bf16 = fit.profile.cpu_product_table("bfloat16");
  ASSERT_NE(bf16, nullptr);
  EXPECT_NEAR(bf16->loaded_cache_attention.kv_bandwidth, 8e9 * factor, 8e9 * factor * 1e-12);
  EXPECT_NEAR(bf16->loaded_cache_attention.unit_seconds, 1e-6 / factor, 1e-6 / factor * 1e-12);
}

}  // namespace
}  // namespace tiergen::policy
