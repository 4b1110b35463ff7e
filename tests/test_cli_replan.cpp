// `tiergen generate` re-plans a job of several blocks after its first block
// (src/cli/first_block_replan.h, policy/replan.h): on a profile whose link is 1000x
// faster than this host's, the searched plan streams weights; the first block measures
// the link, the plan changes, and every result line is the same as without a re-plan,
// under emulated asynchronous streams too. `tiergen bench --policy auto` settles its
// plan the same way in a settling run after its warm-up and measures the settled plan.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/support/cli_fixture.h"

namespace {

using nlohmann::json;

class CliReplan : public CliReliability {
 protected:
  // The built-in T4 profile with its weight link 1000x too fast: the plan searched on it
  // streams weights the first block then measures at this host's speed.
  fs::path wrong_profile() const {
    json hw = json::parse(read_file(TIERGEN_SOURCE_DIR "/configs/hw/t4-flexgen.json"));
    hw["bandwidth"]["cpu_to_gpu"] = hw["bandwidth"]["cpu_to_gpu"].get<double>() * 1000;
    hw["name"] = "t4 with a link 1000x too fast";
    const fs::path path = dir_ / "wrong-link.json";
    write_file(path, hw.dump(1));
    return path;
  }

  // 12 prompts whose lengths (in words) are out of order: in blocks of 2 sorted by length
  // within windows of 4 blocks, the first window's shortest two form the first block;
  // the rest sorted again in windows of their own would pair 4 words with 5, not with 7.
  fs::path prompts() const {
    const int words[] = {10, 1, 19, 4, 2, 16, 7, 13, 8, 5, 9, 6};
    const char* vocabulary[] = {"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "again"};
    std::string lines;
    for (int i = 0; i < 12; ++i) {
      for (int w = 0; w < words[i]; ++w) lines += std::string(w ? " " : "") + vocabulary[(i + w) % 10];
      lines += "\n";
    }
    const fs::path path = dir_ / "prompts.txt";
    write_file(path, lines);
    return path;
  }

  // Runs the job (-n 8, logprobs) with `extra` flags; returns its stats JSON.
  json run_job(const fs::path& out, const std::vector<std::string>& extra, const SpawnOptions& spawn = {},
               const std::string& gpu_mem = "1MiB") {
    const fs::path stats = dir_ / (out.stem().string() + ".stats.json");
    std::vector<std::string> flags = {"-n", "8", "--logprobs", "2", "--gpu-mem", gpu_mem, "--overwrite", "-q",
                                      "--stats-json", stats.string()};
    flags.insert(flags.end(), extra.begin(), extra.end());
    const Exit e = run(generate_args(prompts(), out, flags), spawn);
    EXPECT_TRUE(e.exited && e.code == 0) << e.describe();
    last_log_ = e.err;
    return json::parse(read_file(stats));
  }

  std::string last_log_;
};

TEST_F(CliReplan, AWrongLinkIsMeasuredInTheFirstBlockAndTheRestRunsOnANewPlanWithTheSameResults) {
  const std::string hw = wrong_profile().string();
  const fs::path kept_out = dir_ / "kept.jsonl", replanned_out = dir_ / "replanned.jsonl";
  const json kept = run_job(kept_out, {"--hw", hw, "--no-replan"});
  EXPECT_FALSE(kept.contains("replan"));
  const json replanned = run_job(replanned_out, {"--hw", hw});
  ASSERT_TRUE(replanned.contains("replan")) << replanned.dump(1);
  const json& r = replanned["replan"];
  EXPECT_TRUE(r["replanned"].get<bool>()) << r.dump(1);
  EXPECT_NE(r["first_block_policy"], replanned["policy"]);
  EXPECT_NE(last_log_.find("re-planned the remaining blocks"), std::string::npos) << last_log_;
  EXPECT_NE(last_log_.find("policy for the remaining"), std::string::npos) << last_log_;
  // The link was measured far slower than the profile said.
  bool link_fitted = false;
  for (const json& term : r["fitted_terms"]) {
    if (term["term"] == "weight link") link_fitted = term["factor"].get<double>() < 0.5;
  }
  EXPECT_TRUE(link_fitted) << r.dump(1);
  EXPECT_GT(r["searched_predicted_total"].get<double>(),
            r["current_predicted_total"].get<double>() * (1 + r["band"].get<double>()));
  // The whole job's counts, both plans' blocks together.
  EXPECT_EQ(replanned["sequences"], kept["sequences"]);
  EXPECT_EQ(replanned["generated_tokens"], kept["generated_tokens"]);
  EXPECT_EQ(read_file(replanned_out), read_file(kept_out));
  // Under emulated asynchronous streams (delayed copies on their own threads).
  const fs::path async_out = dir_ / "async.jsonl";
  const json async = run_job(async_out, {"--hw", hw}, SpawnOptions{{}, {"TIERGEN_ASYNC_EMULATION=1"}});
  EXPECT_TRUE(async["replan"]["replanned"].get<bool>());
  EXPECT_EQ(read_file(async_out), read_file(kept_out));
}

// Where products follow their batch (--cpu-gemm here; CUDA and compressed tensors
// alike), a re-planned job keeps the whole job's gpu batches: six blocks of 2 sequences,
// sorted by length within windows of 4 blocks, run as one job would run them.
TEST_F(CliReplan, WhereProductsFollowTheirBatchTheRestKeepsTheWholeJobsBatches) {
  const std::string hw = wrong_profile().string();
  const std::vector<std::string> shape = {"--hw", hw, "--cpu-gemm", "-b", "2", "--num-gpu-batches", "1"};
  std::vector<std::string> kept_flags = shape;
  kept_flags.push_back("--no-replan");
  const fs::path kept_out = dir_ / "gemm-kept.jsonl", replan_out = dir_ / "gemm-replan.jsonl";
  const json kept = run_job(kept_out, kept_flags, {}, "2MiB");
  const json replan = run_job(replan_out, shape, {}, "2MiB");
  ASSERT_TRUE(replan.contains("replan")) << replan.dump(1);
  EXPECT_EQ(replan["replan"]["first_block_policy"]["gpu_batch_size"], replan["policy"]["gpu_batch_size"]);
  EXPECT_EQ(replan["replan"]["first_block_policy"]["num_gpu_batches"], replan["policy"]["num_gpu_batches"]);
  EXPECT_EQ(replan["padded_prompt_tokens"], kept["padded_prompt_tokens"]);
  EXPECT_EQ(replan["computed_rows"], kept["computed_rows"]);
  EXPECT_EQ(read_file(replan_out), read_file(kept_out));
}

TEST_F(CliReplan, AGivenPolicyAndAOneBlockJobAreNeverReplanned) {
  const std::string hw = wrong_profile().string();
  const json fixed =
      run_job(dir_ / "fixed.jsonl", {"--hw", hw, "--percent", "40", "60", "100", "0", "100", "0", "-b", "1"}, {}, "64MiB");
  EXPECT_FALSE(fixed.contains("replan"));
  const json one_block = run_job(dir_ / "one.jsonl", {"--hw", hw, "-b", "12", "--num-gpu-batches", "1"}, {}, "64MiB");
  EXPECT_FALSE(one_block.contains("replan")) << one_block.dump(1);
}

// bench --policy auto over several blocks: a settling run after the warm-up runs, whose
// first block calibrates the searched plan, and the measured runs are of the plan it
// settles on; --no-replan measures the searched plan as searched.
TEST_F(CliReplan, BenchMeasuresThePlanItsFirstRunSettlesOn) {
  const std::string hw = wrong_profile().string();
  // Eight measured runs: a re-plan must save more than placing the weights again, and on
  // the fitted model the tiny model's runs save about 0.02 s each, where placing took up
  // to 0.06 s on a loaded 2-core machine (two measured runs were a near tie there).
  constexpr int kRuns = 8;
  const auto bench = [&](const std::string& name, const std::vector<std::string>& extra) {
    const fs::path record = dir_ / (name + ".json");
    std::vector<std::string> a = {kTiergen, "bench", "--model", model().string(), "--device", "cpu", "--policy",
                                  "auto", "--hw", hw, "--gpu-mem", "1MiB", "-s", "16", "-n", "32", "--num-prompts",
                                  "24", "-r", std::to_string(kRuns), "-q", "--json", record.string()};
    a.insert(a.end(), extra.begin(), extra.end());
    const Exit e = run(a);
    EXPECT_TRUE(e.exited && e.code == 0) << e.describe();
    last_log_ = e.err + e.out;
    return json::parse(read_file(record));
  };
  const json kept = bench("kept", {"--warmup", "0", "--no-replan"});
  EXPECT_FALSE(kept.contains("replan"));
  EXPECT_EQ(last_log_.find("settling run"), std::string::npos) << last_log_;

  // --warmup 0: the settling run comes first.
  const json settled = bench("settled", {"--warmup", "0"});
  ASSERT_TRUE(settled.contains("replan")) << settled.dump(1);
  const json& r = settled["replan"];
  EXPECT_TRUE(r["replanned"].get<bool>()) << r.dump(1);
  EXPECT_EQ(r["first_block_policy"], kept["policy"]);
  EXPECT_NE(settled["policy"], kept["policy"]);
  EXPECT_NE(last_log_.find("settling run (after 0 warm-up runs)"), std::string::npos) << last_log_;
  // The fit read the first block alone: its decode passes, n - 1.
  EXPECT_EQ(r["first_block_decode_passes"], 31);
  EXPECT_NE(last_log_.find("plan settled on the settling run's first block, which ran on"), std::string::npos)
      << last_log_;
  ASSERT_EQ(settled["runs"].size(), static_cast<size_t>(kRuns));
  for (const json& run : settled["runs"]) {
    EXPECT_EQ(run["sequences"], 24);
    EXPECT_EQ(run["generated_tokens"], 24 * 32);
  }
  EXPECT_EQ(settled["warmup_runs"], 0);

  // After a warm-up run, on the searched plan.
  const json warm = bench("warm", {"--warmup", "1"});
  ASSERT_TRUE(warm.contains("replan")) << warm.dump(1);
  EXPECT_TRUE(warm["replan"]["replanned"].get<bool>()) << warm.dump(1);
  EXPECT_EQ(warm["replan"]["first_block_policy"], kept["policy"]);
  const size_t warm_up = last_log_.find("warm-up run 1/1");
  const size_t settling = last_log_.find("settling run (after 1 warm-up run)");
  ASSERT_NE(warm_up, std::string::npos) << last_log_;
  ASSERT_NE(settling, std::string::npos) << last_log_;
  EXPECT_LT(warm_up, settling);
  // Not the warm-up run's passes as well.
  EXPECT_EQ(warm["replan"]["first_block_decode_passes"], 31);
  // The new plan's engine is warmed up before it is measured.
  EXPECT_NE(last_log_.find("warm-up run 1/1 on the settled plan"), std::string::npos) << last_log_;
}

}  // namespace
