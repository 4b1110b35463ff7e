// Calibration of a profile against measured runs (policy/calibration.h): it recovers
// the rates that produced the runs, fits a term only on runs that price it alone, makes
// the GPU window's per-task seconds right while keeping its totals within their bands,
// refuses records it cannot read with the file named, and `tiergen profile
// --calibrate-from` writes the calibrated profile.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "policy/calibration.h"
#include "policy/cost_model.h"
#include "policy/plan_class.h"
#include "tests/support/cli_fixture.h"
#include "tiergen/common/error.h"
#include "tiergen/model/presets.h"

namespace tiergen::policy {
namespace {

const std::filesystem::path kWindow =
    TIERGEN_SOURCE_DIR "/bench/gpu-evidence/2026-11-27-nvidia-h100-80gb-hbm3-vm-opt-13b-24g";

runtime::Policy offloaded(int64_t gpu_batch, double weights_on_gpu) {
  runtime::Policy p;
  p.gpu_batch_size = gpu_batch;
  p.num_gpu_batches = 2;
  p.w_gpu_percent = weights_on_gpu;
  p.w_cpu_percent = 100 - weights_on_gpu;
  p.cache_gpu_percent = p.act_gpu_percent = 0;
  p.cache_cpu_percent = p.act_cpu_percent = 100;
  p.cpu_cache_compute = true;
  return p;
}

runtime::Policy all_on_gpu(int64_t gpu_batch) {
  runtime::Policy p;
  p.gpu_batch_size = gpu_batch;
  p.num_gpu_batches = 1;
  return p;
}

// A run as `truth` would have measured it: each task's predicted decode seconds, the
// embedding's and head's steps among them and the layer's compute span holding CPU
// attention, as the runtime times them.
CalibrationRun measured_under(const HardwareProfile& truth, const std::string& model, const runtime::Policy& policy) {
  CalibrationRun r;
  r.source = model;
  r.spec = model::resolve_spec(model);
  r.policy = policy;
  r.workload = {512, 32};
  r.decode_steps = 31;
  const Prediction p = predict(r.spec, policy, r.workload, truth);
  const auto seconds = [&](Task t) { return task_seconds(p, t, false, r.spec.num_layers, r.decode_steps); };
  r.weight_load_seconds = seconds(Task::WeightLoad);
  r.cpu_attention_seconds = seconds(Task::CpuAttention);
  r.compute_seconds = seconds(Task::Compute) + r.cpu_attention_seconds;
  return r;
}

const CalibrationTerm& term(const Calibration& c, const std::string& name) {
  for (const auto& t : c.terms)
    if (t.name == name) return t;
  throw std::runtime_error("no term " + name);
}

TEST(Calibration, RecoversTheRatesThatProducedTheRuns) {
  HardwareProfile base = *builtin_profile("h100-spr");
  base.cpu_attention_call_seconds = 20e-6;
  base.cpu_attention_task_seconds = 0.3e-6;
  HardwareProfile truth = base;
  truth.cpu_to_gpu *= 0.8;
  // CPU attention 0.7x as fast, its costs beside the bytes too: one factor fits all three.
  truth.cpu_attention_bandwidth *= 0.7;
  truth.cpu_attention_call_seconds /= 0.7;
  truth.cpu_attention_task_seconds /= 0.7;
  truth.mm_flops_decode *= 2.0;
  truth.bmm_flops_decode *= 2.0;
  const std::vector<CalibrationRun> runs = {measured_under(truth, "opt-13b", offloaded(24, 70)),
                                            measured_under(truth, "opt-13b", offloaded(96, 70)),
                                            measured_under(truth, "opt-6.7b", all_on_gpu(24))};
  const Calibration fit = calibrate(base, runs);
  EXPECT_NEAR(term(fit, "weight link").factor, 0.8, 0.008);
  EXPECT_NEAR(term(fit, "cpu attention").factor, 0.7, 0.007);
  EXPECT_NEAR(term(fit, "decode products").factor, 2.0, 0.02);
  EXPECT_EQ(term(fit, "weight link").runs, 2);  // the all-GPU run streams no weights
  EXPECT_EQ(term(fit, "cpu attention").runs, 2);
  EXPECT_EQ(term(fit, "decode products").runs, 3);
  for (const auto& t : fit.terms) {
    if (t.runs == 0) continue;  // cpu products: a GPU host's decode products are not the CPU's
    EXPECT_NEAR(t.predicted_after / t.measured_seconds, 1.0, 1e-3) << t.name;
    EXPECT_GT(std::abs(t.predicted_before / t.measured_seconds - 1.0), 0.1) << t.name;
  }
  EXPECT_NEAR(fit.profile.cpu_to_gpu / truth.cpu_to_gpu, 1.0, 0.01);
  EXPECT_NEAR(fit.profile.cpu_attention_call_seconds / truth.cpu_attention_call_seconds, 1.0, 0.01);
  EXPECT_NEAR(fit.profile.cpu_attention_task_seconds / truth.cpu_attention_task_seconds, 1.0, 0.01);
  EXPECT_NE(fit.profile.name.find("calibrated on 3 runs"), std::string::npos) << fit.profile.name;
  EXPECT_NE(calibration_table(fit).find("cpu attention"), std::string::npos);
}

// The runtime times the embedding's and head's steps under the same tasks as the
// decoder layers'. On a model whose head is a large part of its weights (opt-125m: the
// 50272 x 768 head against twelve 7M-parameter layers) a fit that priced the layers
// alone read the head's seconds as slow layers: a stand-in run fitted its products at
// 0.53x. A run measured at the very rates it is fitted on fits every factor at 1.
TEST(Calibration, AHeadAsLargeAsTheLayersIsPricedAsTheRuntimeTimesIt) {
  HardwareProfile stand_in = *builtin_profile("h100-spr");
  stand_in.gpu_is_host = true;
  stand_in.cpu_product_rates = {{1, 20e9}, {16, 10e9}, {64, 3e9}};
  const CalibrationRun run = measured_under(stand_in, "opt-125m", offloaded(16, 70));
  const Prediction p = predict(run.spec, run.policy, run.workload, stand_in);
  const double head_share = p.decode_edges.tasks[static_cast<int>(Task::Compute)] /
                            task_seconds(p, Task::Compute, false, run.spec.num_layers, 1);
  ASSERT_GT(head_share, 0.2) << "the head is a fair part of the decode's products";
  const Calibration fit = calibrate(stand_in, {run});
  ASSERT_EQ(term(fit, "cpu products").runs, 1);
  ASSERT_EQ(term(fit, "weight link").runs, 1);
  for (const auto& t : fit.terms) {
    if (t.runs == 0) continue;
    EXPECT_NEAR(t.factor, 1.0, 1e-3) << t.name;
    EXPECT_NEAR(t.predicted_before / t.measured_seconds, 1.0, 1e-6) << t.name;
  }
}

TEST(Calibration, FitsATermOnlyOnRunsThatPriceItAlone) {
  const HardwareProfile base = *builtin_profile("h100-spr");
  runtime::Policy on_disk = offloaded(24, 50);
  on_disk.w_cpu_percent = 30;  // 20% of the weights on disk: their loads are disk reads too
  runtime::Policy compressed_cache = offloaded(24, 70);
  compressed_cache.compress_cache.enabled = true;
  const Calibration fit = calibrate(base, {measured_under(base, "opt-13b", on_disk),
                                           measured_under(base, "opt-13b", compressed_cache)});
  EXPECT_EQ(term(fit, "weight link").runs, 1);    // the compressed-cache run's weights only
  EXPECT_EQ(term(fit, "cpu attention").runs, 1);  // the plain cache's only
  // Runs priced by the very profile: nothing moves.
  for (const auto& t : fit.terms) EXPECT_NEAR(t.factor, 1.0, 1e-6) << t.name;

  // On the CPU stand-in the "gpu" products run at the CPU's measured rates: the GPU
  // term is not fitted, the CPU's product rates are.
  HardwareProfile stand_in = base;
  stand_in.gpu_is_host = true;
  stand_in.cpu_product_rates = {{1, 20e9}, {16, 10e9}, {64, 3e9}};
  stand_in.cpu_call_seconds = {{1, 30e-6}, {64, 100e-6}};
  stand_in.cpu_product_row_length = 4096;
  stand_in.cpu_short_row_length = 768;
  stand_in.cpu_short_row_rates = {{1, 15e9}, {16, 7e9}, {64, 2e9}};
  HardwareProfile slower_products = stand_in;
  for (auto& rate : slower_products.cpu_product_rates) rate.second *= 0.5;
  for (auto& rate : slower_products.cpu_short_row_rates) rate.second *= 0.5;
  for (auto& call : slower_products.cpu_call_seconds) call.second *= 2;  // the calls slow down with them
  slower_products.mm_flops_decode *= 0.5;
  slower_products.bmm_flops_decode *= 0.5;
  const Calibration host = calibrate(stand_in, {measured_under(slower_products, "opt-13b", offloaded(24, 70))});
  EXPECT_EQ(term(host, "decode products").runs, 0);
  EXPECT_EQ(term(host, "cpu products").runs, 1);
  EXPECT_NEAR(term(host, "cpu products").factor, 0.5, 0.005);
  EXPECT_NEAR(host.profile.cpu_product_rates[1].second, 5e9, 5e7);
  EXPECT_NEAR(host.profile.cpu_call_seconds[1].second, 200e-6, 2e-6) << "seconds scale inversely with the rates";
  EXPECT_NEAR(host.profile.cpu_short_row_rates[1].second, 3.5e9, 3.5e7) << "the short rows' rates with the others";
  EXPECT_FALSE(term(host, "decode products").applies);
  EXPECT_NE(calibration_table(host).find("not this profile's term (its decode products are the CPU's)"),
            std::string::npos) << calibration_table(host);
  // On a GPU host the CPU's products are not the decode's: not fitted.
  EXPECT_EQ(term(fit, "cpu products").runs, 0);
  EXPECT_FALSE(term(fit, "cpu products").applies);
  EXPECT_NE(calibration_table(fit).find("not this profile's term (its decode products are the GPU's)"),
            std::string::npos) << calibration_table(fit);

  // Decode products held at the weight-read floor (FLOP rates far above it): no FLOP
  // rate moves their prediction, so the term is left unfitted rather than compounded.
  HardwareProfile read_bound = base;
  read_bound.mm_flops_decode = read_bound.bmm_flops_decode = 1e18;
  CalibrationRun faster = measured_under(read_bound, "opt-6.7b", all_on_gpu(8));
  faster.compute_seconds *= 0.5;
  const Calibration floor = calibrate(read_bound, {faster});
  EXPECT_FALSE(term(floor, "decode products").identifiable);
  EXPECT_DOUBLE_EQ(term(floor, "decode products").factor, 1.0);
  EXPECT_EQ(floor.profile.mm_flops_decode, 1e18);
  EXPECT_NE(calibration_table(floor).find("does not move the prediction"), std::string::npos);
}

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// The H100 window's two runs (FlexGen's 24x2 and auto's 96x2 on OPT-13B): its profile's
// CPU attention was too fast and its decode products too slow, by amounts that cancelled
// in the totals. After calibration each term matches and the totals stay within band.
TEST(Calibration, TheGpuWindowsRunsMatchTermByTermAndStayWithinTheirBands) {
  const HardwareProfile measured = profile_from_json(read_json(kWindow / "hw-profile.json"), "window profile");
  std::vector<CalibrationRun> runs;
  std::vector<nlohmann::json> records;
  for (const char* name : {"tiergen-same.json", "tiergen-auto.json"}) {
    records.push_back(read_json(kWindow / name));
    runs.push_back(calibration_run_from_record(records.back(), name));
  }
  const Calibration fit = calibrate(measured, runs);
  EXPECT_EQ(term(fit, "cpu products").runs, 0);  // a GPU host's decode products are the GPU's
  for (const auto& t : fit.terms) {
    if (t.name == "cpu products") continue;
    ASSERT_EQ(t.runs, 2) << t.name;
    EXPECT_NEAR(t.predicted_after / t.measured_seconds, 1.0, 0.01) << t.name;
  }
  EXPECT_GT(term(fit, "weight link").factor, 1.1);    // the runner's small-tensor probe read the link slow
  EXPECT_LT(term(fit, "cpu attention").factor, 0.9);  // attention beside the weight stream ran slower
  EXPECT_GT(term(fit, "decode products").factor, 1.5);
  for (size_t i = 0; i < runs.size(); ++i) {
    const Prediction p = predict(runs[i].spec, runs[i].policy, runs[i].workload, fit.profile);
    const double ratio = records[i].at("total_throughput").get<double>() / p.total_throughput;
    EXPECT_NEAR(ratio, 1.0, plan_class_band(plan_class(runs[i].policy))) << runs[i].source;
  }
}

TEST(Calibration, RecordsItCannotReadAreRefusedWithTheFileNamed) {
  nlohmann::json record = read_json(kWindow / "tiergen-auto.json");
  const auto refused = [](const nlohmann::json& r, const std::string& expected) {
    try {
      calibration_run_from_record(r, "runs/x.json");
      ADD_FAILURE() << "accepted; expected: " << expected;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("runs/x.json"), std::string::npos) << what;
      EXPECT_NE(what.find(expected), std::string::npos) << what;
    }
  };
  nlohmann::json no_tasks = record;
  no_tasks["predicted_vs_measured"] = {{"throughput", {{"predicted", nullptr}}}};
  refused(no_tasks, "no per-task seconds");
  nlohmann::json projected = record;
  projected["projected"] = true;
  refused(projected, "projected");
  nlohmann::json no_policy = record;
  no_policy.erase("policy");
  refused(no_policy, "no 'policy'");
  nlohmann::json wrong_type = record;
  wrong_type["num_prompts"] = "many";
  refused(wrong_type, "wrong type");
  nlohmann::json one_token = record;
  one_token["gen_len"] = 1;
  refused(one_token, "no decode");
}

TEST(Calibration, ProfileCalibrateFromWritesTheCalibratedProfile) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "tiergen_calibrate_cli";
  std::filesystem::create_directories(dir);
  const std::string out = (dir / "calibrated.json").string();
  const std::string hw = (kWindow / "hw-profile.json").string();
  Child child({kTiergen, "profile", "--calibrate-from", (kWindow / "tiergen-same.json").string(),
               (kWindow / "tiergen-auto.json").string(), "--hw", hw, "--out", out},
              dir, {});
  const Exit e = child.wait();
  ASSERT_TRUE(e.exited && e.code == 0) << e.describe();
  EXPECT_NE(e.err.find("cpu attention"), std::string::npos) << e.err;
  const HardwareProfile written = load_profile(out);
  const HardwareProfile base = load_profile(hw);
  EXPECT_LT(written.cpu_attention_bandwidth, 0.9 * base.cpu_attention_bandwidth);
  EXPECT_NE(written.name.find("calibrated on 2 runs"), std::string::npos);

  // A file that is no bench record: refused by name, nothing written.
  const std::string bad = (dir / "notes.json").string();
  std::ofstream(bad) << "{\"hello\": 1}";
  std::filesystem::remove(out);
  Child refused({kTiergen, "profile", "--calibrate-from", bad, "--hw", hw, "--out", out}, dir, {});
  const Exit r = refused.wait();
  EXPECT_TRUE(r.clean_failure()) << r.describe();
  EXPECT_NE(r.err.find("notes.json"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
  // --quick and --link measure; calibration does not: either with it is refused, and
  // --hw alone names what it is for.
  const std::string record = (kWindow / "tiergen-auto.json").string();
  for (const char* flag : {"--quick", "--link"}) {
    Child both({kTiergen, "profile", "--calibrate-from", record, flag}, dir, {});
    const Exit b = both.wait();
    EXPECT_TRUE(b.clean_failure()) << flag << ": " << b.describe();
    EXPECT_NE(b.err.find("measures nothing"), std::string::npos) << b.err;
  }
  Child hw_alone({kTiergen, "profile", "--hw", hw}, dir, {});
  const Exit h = hw_alone.wait();
  EXPECT_TRUE(h.clean_failure()) << h.describe();
  EXPECT_NE(h.err.find("--hw names the profile that --calibrate-from rescales"), std::string::npos) << h.err;
}

}  // namespace
}  // namespace tiergen::policy
