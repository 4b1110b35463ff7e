// `tiergen generate` (and `bench`) as a pipeline of processes, launched as a user would: a shell
// loop with --rank/--world-size and a file store, or torchrun's environment (RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT). The last rank writes the results, which are
// those of one process; a rank that dies ends the job with an error naming it, and
// --resume finishes the job.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/cli_fixture.h"
#include "tiergen/dist/launch.h"

namespace {

class CliPipeline : public CliReliability {
 protected:
  void SetUp() override {
    if (!tiergen::dist::have_c10d()) GTEST_SKIP() << "built without c10d/Gloo";
    CliReliability::SetUp();
  }

  // OPT with 4 decoder layers (so up to 4 stages), the byte-level tokenizer.
  static fs::path four_layer_model() {
    return shared_tiny_model("tiny-opt-4-layers", {"--arch", "opt", "--seed", "9", "--layers", "4", "--tokenizer", kTokenizer});
  }

  // One rank of `world` through flags and a file store in this test's directory.
  std::vector<std::string> rank_args(std::vector<std::string> args, int rank, int world) const {
    args.insert(args.end(), {"--rank", std::to_string(rank), "--world-size", std::to_string(world), "--dist-init",
                             "file:" + (dir_ / "store").string(), "--dist-timeout", "60"});
    return args;
  }

  // One process's results, then `world` ranks' (shell-loop flags, same command line);
  // the two results files must be byte-identical. Returns the ranks' exits.
  std::vector<Exit> expect_ranks_write_one_process_results(const fs::path& prompts,
                                                           const std::vector<std::string>& flags, int world) {
    const Exit single = run(generate_args(prompts, dir_ / "single.jsonl", flags));
    EXPECT_TRUE(single.exited && single.code == 0) << single.describe();
    const fs::path out = dir_ / "pipeline.jsonl";
    std::vector<std::vector<std::string>> args;
    for (int r = 0; r < world; ++r) args.push_back(rank_args(generate_args(prompts, out, flags), r, world));
    const auto exits = run_ranks(args);
    for (const Exit& e : exits) EXPECT_TRUE(e.exited && e.code == 0) << e.describe();
    EXPECT_EQ(read_file(out), read_file(dir_ / "single.jsonl"));
    return exits;
  }

  // Starts every rank (one core each, as 4 ranks share 2 cores), waits for all.
  std::vector<Exit> run_ranks(const std::vector<std::vector<std::string>>& per_rank,
                              const std::vector<std::vector<std::string>>& env = {}) {
    std::vector<std::unique_ptr<Child>> children;
    for (size_t r = 0; r < per_rank.size(); ++r) {
      SpawnOptions o;
      o.env = {"OMP_NUM_THREADS=1"};
      if (r < env.size()) o.env.insert(o.env.end(), env[r].begin(), env[r].end());
      children.push_back(std::make_unique<Child>(per_rank[r], dir_, o));
    }
    std::vector<Exit> exits;
    for (auto& c : children) exits.push_back(c->wait(std::chrono::seconds(240)));
    return exits;
  }

  // A two-rank job to interrupt: 40 prompts, one process's results written first as
  // the reference (single.jsonl); the ranks started, and running once the last rank
  // has written a result (or after 120 s: the caller checks).
  struct RunningJob {
    fs::path prompts, out;
    std::vector<std::string> flags;
    std::unique_ptr<Child> first, last;
  };
  RunningJob start_two_ranks_until_a_result() {
    RunningJob job{prompt_file("prompts.txt", 40), dir_ / "pipeline.jsonl",
                   {"-b", "1", "--max-new-tokens", "40", "--ignore-eos"}, nullptr, nullptr};
    const Exit single = run(generate_args(job.prompts, dir_ / "single.jsonl", job.flags));
    EXPECT_TRUE(single.exited && single.code == 0) << single.describe();
    SpawnOptions o;
    o.env = {"OMP_NUM_THREADS=1"};
    job.first = std::make_unique<Child>(rank_args(generate_args(job.prompts, job.out, job.flags), 0, 2), dir_, o);
    job.last = std::make_unique<Child>(rank_args(generate_args(job.prompts, job.out, job.flags), 1, 2), dir_, o);
    const auto start = std::chrono::steady_clock::now();
    while (count_lines(job.out) < 1 && std::chrono::steady_clock::now() - start < std::chrono::seconds(120)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return job;
  }
};

TEST_F(CliPipeline, TwoRanksFromAShellLoopWriteTheSingleProcessResults) {
  // Every rank is given the same command line, -o included: only the last writes.
  const auto exits = expect_ranks_write_one_process_results(
      prompt_file("prompts.txt", 13), {"-b", "2", "--num-gpu-batches", "2", "--max-new-tokens", "9"}, 2);
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_NE(exits[0].err.find("[rank 0/2]"), std::string::npos) << exits[0].describe();
  EXPECT_NE(exits[0].err.find("pipeline stage 0 of 2: embedding, decoder layer 0"), std::string::npos) << exits[0].describe();
  EXPECT_NE(exits[0].err.find("the last rank wrote the results"), std::string::npos) << exits[0].describe();
  EXPECT_NE(exits[1].err.find("13 requests: 13 completed"), std::string::npos) << exits[1].describe();
  EXPECT_FALSE(fs::exists(dir_ / "store")) << "the file store outlived a finished job";
}

TEST_F(CliPipeline, FourRanksFromATorchrunEnvironmentWithWeightsAndCacheOffloaded) {
  const fs::path model = four_layer_model();
  const fs::path prompts = prompt_file("prompts.txt", 9);
  const std::vector<std::string> flags = {"-b", "2", "--num-gpu-batches", "1", "--max-new-tokens", "7",
                                          "--percent", "20", "40", "30", "40", "100", "0", "--cpu-attention"};
  const Exit single = run(generate_args(prompts, dir_ / "single.jsonl", flags, model));
  ASSERT_TRUE(single.exited && single.code == 0) << single.describe();
  const fs::path out = dir_ / "pipeline.jsonl";
  const std::string port = std::to_string(20000 + (::getpid() % 20000));
  std::vector<std::vector<std::string>> args, env;
  for (int r = 0; r < 4; ++r) {
    args.push_back(generate_args(prompts, out, flags, model));
    env.push_back({"RANK=" + std::to_string(r), "WORLD_SIZE=4", "LOCAL_RANK=" + std::to_string(r),
                   "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port});
  }
  const auto exits = run_ranks(args, env);
  for (const Exit& e : exits) ASSERT_TRUE(e.exited && e.code == 0) << e.describe();
  EXPECT_EQ(read_file(out), read_file(dir_ / "single.jsonl"));
  EXPECT_NE(exits[3].err.find("pipeline stage 3 of 4: decoder layer 3, head"), std::string::npos) << exits[3].describe();
  EXPECT_NE(exits[2].err.find("torchrun environment"), std::string::npos) << exits[2].describe();
}

// Plan with `policy --stages 2 --json`, run each rank with its stage's file.
TEST_F(CliPipeline, EachRankRunsItsStagesPolicyFromPolicyStages) {
  const fs::path prompts = prompt_file("prompts.txt", 10);
  const fs::path plan = dir_ / "plan.json";
  const Exit planned = run({kTiergen, "policy", "--model", model().string(), "--device", "cpu", "--prompts",
                            prompts.string(), "--gen-len", "6", "--stages", "2", "--json", plan.string(), "--hw",
                            "t4-flexgen", "--gpu-mem", "64MiB", "--cpu-mem", "1GiB"});
  ASSERT_TRUE(planned.exited && planned.code == 0) << planned.describe();
  EXPECT_NE(planned.out.find("pipeline of 2 stages"), std::string::npos) << planned.out;
  EXPECT_NE(planned.out.find("predicted throughput"), std::string::npos) << planned.out;
  ASSERT_TRUE(fs::exists(dir_ / "plan.stage0.json") && fs::exists(dir_ / "plan.stage1.json")) << planned.describe();

  const std::vector<std::string> flags = {"--max-new-tokens", "6"};
  const Exit single = run(generate_args(prompts, dir_ / "single.jsonl", flags));
  ASSERT_TRUE(single.exited && single.code == 0) << single.describe();
  const fs::path out = dir_ / "pipeline.jsonl";
  std::vector<std::vector<std::string>> args;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> with_policy = flags;
    with_policy.insert(with_policy.end(), {"--policy", (dir_ / ("plan.stage" + std::to_string(r) + ".json")).string()});
    args.push_back(rank_args(generate_args(prompts, out, with_policy), r, 2));
  }
  const auto exits = run_ranks(args);
  for (const Exit& e : exits) ASSERT_TRUE(e.exited && e.code == 0) << e.describe();
  EXPECT_EQ(read_file(out), read_file(dir_ / "single.jsonl"));
}

// `profile --link` in a 2-rank job writes the measured stage link into an existing
// profile, and `policy --stages` then predicts the hops with it, saying so.
TEST_F(CliPipeline, ProfileLinkMeasuresTheStageLinkThatPolicyStagesUses) {
  const fs::path hw = dir_ / "hw.json";
  const Exit dumped = run({kTiergen, "profile", "--link", "--link-bytes", "1000000", "--link-rounds", "2"});
  EXPECT_FALSE(dumped.exited && dumped.code == 0) << "a single process was allowed to measure links";
  EXPECT_NE(dumped.err.find("start 2 or more ranks"), std::string::npos) << dumped.describe();

  std::vector<std::vector<std::string>> args;
  for (int r = 0; r < 2; ++r) {
    args.push_back(rank_args({kTiergen, "profile", "--link", "--link-bytes", "1000000", "--link-rounds", "2", "--out",
                              hw.string()}, r, 2));
  }
  auto exits = run_ranks(args);
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_FALSE(exits[0].exited && exits[0].code == 0) << "a missing profile file was not refused";
  EXPECT_NE(exits[0].err.find("updates an existing hardware profile"), std::string::npos) << exits[0].describe();
  if (exits[1].exited && exits[1].code != 0) {
    EXPECT_NE(exits[1].err.find("rank"), std::string::npos) << exits[1].describe();
  }
  fs::remove(dir_ / "store");

  // Any valid profile will do (a measured one would time the cores while other tests
  // run beside this one, and may be refused as implausible).
  fs::copy_file(fs::path(TIERGEN_SOURCE_DIR) / "configs/hw/t4-flexgen.json", hw);
  exits = run_ranks(args);
  for (const Exit& e : exits) ASSERT_TRUE(e.exited && e.code == 0) << e.describe();
  EXPECT_NE(exits[0].err.find("rank 0 -> 1"), std::string::npos) << exits[0].describe();
  EXPECT_NE(exits[0].err.find("stage link ("), std::string::npos) << exits[0].describe();
  const std::string profile = read_file(hw);
  EXPECT_NE(profile.find("\"stage_link\""), std::string::npos) << profile;
  EXPECT_FALSE(fs::exists(dir_ / "store")) << "the file store outlived the probe";

  const std::vector<std::string> plan = {kTiergen, "policy", "--model", model().string(), "--device", "cpu",
                                         "--num-prompts", "8", "--prompt-len", "8", "--gen-len", "4", "--stages", "2",
                                         "--gpu-mem", "64MiB", "--cpu-mem", "1GiB", "--hw", hw.string()};
  const Exit measured = run(plan);
  ASSERT_TRUE(measured.exited && measured.code == 0) << measured.describe();
  EXPECT_NE(measured.out.find("(measured, " + hw.string() + ")"), std::string::npos) << measured.out;
  std::vector<std::string> given = plan;
  given.insert(given.end(), {"--link-bandwidth", "3"});
  const Exit overridden = run(given);
  ASSERT_TRUE(overridden.exited && overridden.code == 0) << overridden.describe();
  EXPECT_NE(overridden.out.find("link 3.00 GB/s, 0 us per message between stages (given by --link-bandwidth)"),
            std::string::npos) << overridden.out;
}

TEST_F(CliPipeline, AKilledRankEndsTheJobWithItsNameAndResumeFinishesIt) {
  RunningJob job = start_two_ranks_until_a_result();
  const fs::path& prompts = job.prompts;
  const fs::path& out = job.out;
  const std::vector<std::string>& flags = job.flags;
  Child& first = *job.first;
  Child& last = *job.last;
  // Once the last rank has written a result, the job is under way: kill it.
  ASSERT_GE(count_lines(out), 1) << "no result within 120 s";
  ::kill(last.pid(), SIGKILL);
  const Exit killed = last.wait();
  EXPECT_FALSE(killed.exited);
  const Exit e = first.wait(std::chrono::seconds(60));
  EXPECT_FALSE(e.timed_out) << "rank 0 did not notice its peer's death within 60 s: " << e.describe();
  // Rank 0 meets the death sending to rank 1 or receiving from it.
  expect_clear_failure(e, {"rank 0: ", " rank 1 failed (did rank 1 exit?)"});
  expect_results_not_complete(out, 40);
  EXPECT_FALSE(fs::exists(dir_ / "store")) << "a failed job left its file store for the next one to trip on";

  std::vector<std::string> resume = flags;
  resume.push_back("--resume");
  const auto exits = run_ranks({rank_args(generate_args(prompts, out, resume), 0, 2),
                                rank_args(generate_args(prompts, out, resume), 1, 2)});
  for (const Exit& r : exits) ASSERT_TRUE(r.exited && r.code == 0) << r.describe();
  EXPECT_NE(exits[0].err.find("resuming:"), std::string::npos) << exits[0].describe();
  EXPECT_EQ(read_file(out), read_file(dir_ / "single.jsonl"));
}

// --resume --retry-failed in a pipeline: every rank learns from the last which done
// requests run again, and the file ends as one process's uninterrupted run.
TEST_F(CliPipeline, RetryFailedRunsTheSameRequestsOnEveryRank) {
  const fs::path prompts = prompt_file("prompts.txt", 5), out = dir_ / "pipeline.jsonl";
  const std::vector<std::string> flags = {"-b", "2", "--max-new-tokens", "5"};
  const Exit single = run(generate_args(prompts, dir_ / "single.jsonl", flags));
  ASSERT_TRUE(single.exited && single.code == 0) << single.describe();
  std::istringstream in(read_file(dir_ / "single.jsonl"));
  std::string damaged, line;
  for (int n = 0; std::getline(in, line) && n < 5; ++n) {  // the job record and 4 of 5 results
    damaged += (n == 2 || n == 4 ? R"({"id":")" + std::to_string(n - 1) + R"(","error":"out of memory"})" : line) + "\n";
  }
  write_file(out, damaged);
  std::vector<std::vector<std::string>> args;
  for (int r = 0; r < 2; ++r) {
    auto a = generate_args(prompts, out, flags);
    a.insert(a.end(), {"--resume", "--retry-failed"});
    args.push_back(rank_args(a, r, 2));
  }
  const auto exits = run_ranks(args);
  for (const Exit& e : exits) EXPECT_TRUE(e.exited && e.code == 0) << e.describe();
  EXPECT_NE(exits[0].err.find("running the 2 failed requests among them again"), std::string::npos) << exits[0].err;
  EXPECT_EQ(read_file(out), read_file(dir_ / "single.jsonl"));
}

// Every rank killed: the file store stays behind (no rank signed off). Rerunning the
// same command with --resume, as the README says, finds it stale and finishes the job.
TEST_F(CliPipeline, AllRanksKilledThenResumedGetsPastTheStaleStore) {
  RunningJob job = start_two_ranks_until_a_result();
  const fs::path& prompts = job.prompts;
  const fs::path& out = job.out;
  const std::vector<std::string>& flags = job.flags;
  ASSERT_GE(count_lines(out), 1) << "no result within 120 s";
  ::kill(job.first->pid(), SIGKILL);
  ::kill(job.last->pid(), SIGKILL);
  job.first->wait();
  job.last->wait();
  ASSERT_TRUE(fs::exists(dir_ / "store")) << "the killed job's store is what this test recovers from";
  std::vector<std::string> resume = flags;
  resume.push_back("--resume");
  std::vector<std::vector<std::string>> args = {rank_args(generate_args(prompts, out, resume), 0, 2),
                                                rank_args(generate_args(prompts, out, resume), 1, 2)};
  for (auto& a : args) a.back() = "20";  // --dist-timeout
  const auto exits = run_ranks(args);
  for (const Exit& r : exits) ASSERT_TRUE(r.exited && r.code == 0) << r.describe();
  const std::string logs = exits[0].err + exits[1].err;
  EXPECT_EQ(logs.find("Connection refused"), std::string::npos) << "a rank read the dead job's addresses: " << logs;
  EXPECT_NE(logs.find("removed the rendezvous store of an earlier job"), std::string::npos) << logs;
  EXPECT_EQ(read_file(out), read_file(dir_ / "single.jsonl"));
}

// A file at the store's path that is not a store (README: it must not exist before
// the job) is refused at once, naming it, and left alone.
TEST_F(CliPipeline, AFileAtTheStorePathThatIsNoStoreIsRefusedNamingIt) {
  const fs::path prompts = prompt_file("prompts.txt", 2);
  write_file(dir_ / "store", "stale\n");
  std::vector<std::string> args = rank_args(generate_args(prompts, dir_ / "out.jsonl"), 0, 2);
  args.back() = "4";  // --dist-timeout
  Child c(args, dir_);
  const Exit e = c.wait(std::chrono::seconds(60));
  EXPECT_FALSE(e.timed_out) << "spun on a garbage store";
  expect_clear_failure(e, {(dir_ / "store").string(), "is not a rendezvous store"});
  EXPECT_EQ(read_file(dir_ / "store"), "stale\n");
  EXPECT_FALSE(fs::exists(dir_ / "out.jsonl"));
}

// LibTorch's TCPStore listens on every interface; a loopback rendezvous says so.
TEST_F(CliPipeline, ALoopbackTcpRendezvousWarnsThatItsStoreListensOnEveryInterface) {
  const fs::path prompts = prompt_file("prompts.txt", 2);
  const std::string port = std::to_string(29000 + ::getpid() % 2000);
  std::vector<std::vector<std::string>> args;
  for (int r = 0; r < 2; ++r) {
    auto a = generate_args(prompts, dir_ / "out.jsonl", {"-n", "2"});
    a.insert(a.end(), {"--rank", std::to_string(r), "--world-size", "2", "--dist-init", "tcp://127.0.0.1:" + port,
                       "--dist-timeout", "60"});
    args.push_back(a);
  }
  const auto exits = run_ranks(args);
  for (const Exit& r : exits) ASSERT_TRUE(r.exited && r.code == 0) << r.describe();
  EXPECT_NE(exits[0].err.find("listens on port " + port + " of every interface, not only 127.0.0.1"),
            std::string::npos) << exits[0].describe();
}

TEST_F(CliPipeline, ARankWhosePeersNeverComeFailsAfterTheTimeout) {
  const fs::path prompts = prompt_file("prompts.txt", 2);
  std::vector<std::string> args = rank_args(generate_args(prompts, dir_ / "out.jsonl"), 0, 3);
  args.back() = "2";  // --dist-timeout 2
  const Exit e = run(args);
  expect_clear_failure(e, {"rank 0 of 3 could not join the job", "within 2 s"});
  EXPECT_EQ(e.err.find("frame #"), std::string::npos) << "a backtrace reached the user: " << e.describe();
  EXPECT_FALSE(fs::exists(dir_ / "out.jsonl"));
  EXPECT_FALSE(fs::exists(dir_ / "store"));
}

// --policy auto: each rank searches its own stage, the block shape from the heaviest.
TEST_F(CliPipeline, PolicyAutoPlansEachStageOnItsRank) {
  const auto exits = expect_ranks_write_one_process_results(
      prompt_file("prompts.txt", 11),
      {"--max-new-tokens", "5", "--policy", "auto", "--hw", "t4-flexgen", "--gpu-mem", "64MiB", "--cpu-mem", "1GiB"}, 2);
  ASSERT_EQ(exits.size(), 2u);
  // The tiny model's embedding and head weigh alike: the first stage is the heaviest
  // (it holds the positions too) and chooses the shape.
  const bool first_chose = exits[1].err.find("block shape") != std::string::npos;
  const bool last_chose = exits[0].err.find("block shape") != std::string::npos;
  EXPECT_NE(first_chose, last_chose) << exits[0].describe() << exits[1].describe();
}

TEST_F(CliPipeline, RanksGivenDifferentJobsAreRefusedBeforeAnyWork) {
  const fs::path prompts = prompt_file("prompts.txt", 3);
  const fs::path out = dir_ / "out.jsonl";
  const auto exits = run_ranks({rank_args(generate_args(prompts, out, {"--max-new-tokens", "4"}), 0, 2),
                                rank_args(generate_args(prompts, out, {"--max-new-tokens", "5"}), 1, 2)});
  for (const Exit& e : exits) expect_clear_failure(e, {"were given different jobs: max_tokens is"});
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(dir_ / "store"));

  // Another block shape: found before the first message (which would hang, not fail).
  const auto shapes = run_ranks({rank_args(generate_args(prompts, out, {"-b", "2"}), 0, 2),
                                 rank_args(generate_args(prompts, out, {"-b", "3"}), 1, 2)});
  for (const Exit& e : shapes) expect_clear_failure(e, {"were given different jobs: gpu_batch_size is"});
  expect_results_not_complete(out, 3);  // the policy comes after the results file opens, as in one process
}

// A rank that fails before the job starts (here, its prompt file is missing) ends
// the others at once, not at --dist-timeout.
TEST_F(CliPipeline, ARankThatFailsEarlyEndsTheOthersAtOnce) {
  const fs::path prompts = prompt_file("prompts.txt", 3);
  const auto start = std::chrono::steady_clock::now();
  const auto exits = run_ranks({rank_args(generate_args(prompts, dir_ / "out.jsonl"), 0, 2),
                                rank_args(generate_args(dir_ / "missing.txt", dir_ / "out.jsonl"), 1, 2)});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  expect_clear_failure(exits[1], {"missing.txt"});
  expect_clear_failure(exits[0], {"rank 1 failed; its log says why"});
  EXPECT_FALSE(fs::exists(dir_ / "out.jsonl"));
  EXPECT_FALSE(fs::exists(dir_ / "store"));
}

// `tiergen bench` on 2 ranks: every rank runs its stage of each run (all the same
// command line); the last reports, the first only logs its stage.
TEST_F(CliPipeline, BenchRunsOnEveryRankAndTheLastReports) {
  const fs::path json = dir_ / "bench.json";
  std::vector<std::vector<std::string>> args;
  for (int r = 0; r < 2; ++r) {
    // The model's path may differ from rank to rank (hosts mount it in different places).
    const std::string path = r == 0 ? model().string() : (model() / ".").string();
    args.push_back(rank_args({kTiergen, "bench", "--model", path, "--device", "cpu", "-s", "8", "-n", "3",
                              "-b", "2", "--num-gpu-batches", "2", "-r", "2", "--warmup", "1", "--json", json.string()},
                             r, 2));
  }
  const auto exits = run_ranks(args);
  for (const Exit& e : exits) ASSERT_TRUE(e.exited && e.code == 0) << e.describe();
  EXPECT_EQ(exits[0].out, "") << "only the last rank reports";
  EXPECT_NE(exits[0].err.find("stage 0 of 2 (embedding, decoder layer 0): 2 measured runs"), std::string::npos)
      << exits[0].describe();
  EXPECT_NE(exits[1].out.find("pipeline of 2 ranks"), std::string::npos) << exits[1].describe();
  EXPECT_NE(exits[1].out.find("predicted vs measured: skipped (a pipeline"), std::string::npos) << exits[1].describe();
  const auto record = nlohmann::json::parse(read_file(json));
  EXPECT_EQ(record.at("pipeline").at("ranks"), 2);
  EXPECT_EQ(record.at("pipeline").at("reporting_rank"), 1);
  EXPECT_EQ(record.at("num_prompts"), 2 * 2 * 2) << "a block per stage in flight";
  ASSERT_EQ(record.at("runs").size(), 2u);
  for (const auto& run : record.at("runs")) EXPECT_EQ(run.at("generated_tokens"), 8 * 3) << run.dump();
  EXPECT_GT(record.at("total_throughput").get<double>(), 0.0);
  EXPECT_FALSE(fs::exists(dir_ / "store"));

  // Ranks given different workloads are refused before any run.
  fs::remove(json);
  const auto differ = run_ranks(
      {rank_args({kTiergen, "bench", "--model", model().string(), "--device", "cpu", "-s", "8", "-n", "3", "--json",
                  json.string()}, 0, 2),
       rank_args({kTiergen, "bench", "--model", model().string(), "--device", "cpu", "-s", "8", "-n", "4", "--json",
                  json.string()}, 1, 2)});
  for (const Exit& e : differ) expect_clear_failure(e, {"were given different jobs: gen_len is"});
  EXPECT_FALSE(fs::exists(json));
  EXPECT_FALSE(fs::exists(dir_ / "store"));
}

}  // namespace
