// `tiergen policy`, `generate --policy auto` and the hardware profile end to end on a
// tiny random model (--device cpu): a missing profile never fails a finished run,
// `policy --device cpu` and `generate` agree on feasibility, budgets without a unit are
// refused, the installed binary finds its built-in profiles, and the dry run prints
// the bytes each tier will hold and whether the output is exact.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernels_revision.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;

namespace {

const std::string kTiergen = TIERGEN_BINARY_DIR "/tiergen";
const std::string kMakeTinyModel = TIERGEN_BINARY_DIR "/make-tiny-model";

struct Result {
  int code = -1;  // exit code, or -signal
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Result lines: the job record a results file starts with is not one.
int64_t count_lines(const fs::path& p) {
  const std::string s = slurp(p);
  const bool job_line = s.rfind("{\"tiergen_job\"", 0) == 0;
  return std::count(s.begin(), s.end(), '\n') - (job_line ? 1 : 0);
}

// Runs `args` with stdout and stderr to files in `dir`, and an environment whose
// profile cache is `dir`/cache (empty: no profile of this host) and without
// $TIERGEN_HW_PROFILE, so the machine's own cached profile never leaks in.
Result run(const std::vector<std::string>& args, const fs::path& dir, const std::string& cache_name = "cache") {
  static int counter = 0;
  const std::string out = (dir / ("out-" + std::to_string(++counter))).string();
  const std::string err = out + ".err";
  const std::string cache = (dir / cache_name).string();
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0) ::_exit(126);
    ::dup2(o, STDOUT_FILENO);
    ::dup2(e, STDERR_FILENO);
    ::setenv("XDG_CACHE_HOME", cache.c_str(), 1);
    ::unsetenv("TIERGEN_HW_PROFILE");
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  Result r;
  int status = 0;
  if (pid > 0 && ::waitpid(pid, &status, 0) == pid) {
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

class PolicyCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::path(::testing::TempDir()) / ("tiergen-policy-cli-" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
    const Result made = run({kMakeTinyModel, "--arch", "opt", "--out", model_dir(), "--seed", "5"}, *dir_);
    ASSERT_EQ(made.code, 0) << made.err;
    std::ofstream prompts(prompts_file());
    for (int i = 0; i < 5; ++i) {
      prompts << "{\"prompt_token_ids\": [" << 10 + i << ", 11, 12, 13, 14, 15], \"max_tokens\": " << 3 + i << "}\n";
    }
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    tiergen::test::remove_tree(*dir_);
    delete dir_;
  }
  static std::string model_dir() { return (*dir_ / "tiny-opt").string(); }
  static std::string prompts_file() { return (*dir_ / "prompts.jsonl").string(); }
  static fs::path dir() { return *dir_; }

  static std::vector<std::string> generate_args(const std::string& out, std::vector<std::string> extra) {
    std::vector<std::string> a = {kTiergen, "generate", "--model", model_dir(), "--device", "cpu",
                                  "-p", prompts_file(), "-o", out, "--overwrite",
                                  "--offload-dir", (dir() / "offload").string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  static fs::path* dir_;
};

fs::path* PolicyCli::dir_ = nullptr;

TEST_F(PolicyCli, MissingProfileNeverFailsAFinishedRun) {
  // A fixed placement needs no profile to run: the report is skipped, never an error.
  const std::vector<std::string> fixed = {"--percent", "100", "0", "100", "0", "100", "0", "--report"};
  const fs::path out = dir() / "missing-profile.jsonl";
  std::vector<std::string> missing = fixed;
  missing.insert(missing.end(), {"--hw", (dir() / "no-such-profile.json").string()});
  const Result r = run(generate_args(out.string(), missing), dir());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(count_lines(out), 5);
  EXPECT_NE(r.err.find("predicted vs measured: skipped"), std::string::npos) << r.err;
  // No profile of this host at all (empty cache): the prediction is skipped, never an
  // error, and no profile is measured after the results.
  const Result none = run(generate_args(out.string(), fixed), dir(), "empty-cache");
  EXPECT_EQ(none.code, 0) << none.err;
  EXPECT_EQ(count_lines(out), 5);
  EXPECT_EQ(none.err.find("measuring a quick one"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("predicted vs measured: skipped"), std::string::npos) << none.err;
  // The default placement is searched, and the profile it needs is measured before any
  // work, once.
  const Result searched = run(generate_args(out.string(), {}), dir(), "empty-cache-searched");
  EXPECT_EQ(searched.code, 0) << searched.err;
  EXPECT_EQ(count_lines(out), 5);
  const size_t measured = searched.err.find("measuring a quick one"), placed = searched.err.find("placing weights");
  ASSERT_NE(measured, std::string::npos) << searched.err;
  EXPECT_LT(measured, placed) << searched.err;
  EXPECT_NE(searched.err.find("policy (searched for this job; --percent or --policy fixes one): gpu batch"),
            std::string::npos) << searched.err;
}

// The predicted-vs-measured block is asked for (--report or -v), not printed after
// every job; a short job's ratios come with a warning that they mean little.
TEST_F(PolicyCli, PredictedAgainstMeasuredIsShownOnRequest) {
  const fs::path out = dir() / "report.jsonl";
  const Result plain = run(generate_args(out.string(), {"--hw", "t4-flexgen"}), dir());
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(plain.err.find("pred prefill"), std::string::npos) << plain.err;
  const auto start = std::chrono::steady_clock::now();
  const Result report = run(generate_args(out.string(), {"--hw", "t4-flexgen", "--report"}), dir());
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(report.code, 0) << report.err;
  EXPECT_NE(report.err.find("pred prefill"), std::string::npos) << report.err;
  // The warning is for jobs of under 2 s; this one is, unless the machine is loaded (the
  // whole process, start-up included, bounds the job's own seconds).
  if (wall < 2.0) EXPECT_NE(report.err.find("these ratios mean little"), std::string::npos) << report.err;
}

TEST_F(PolicyCli, ExactnessIsReported) {
  const fs::path out = dir() / "exact.jsonl";
  const Result r = run(generate_args(out.string(), {"--policy", "auto", "--hw", "t4-flexgen"}), dir());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("output: exact"), std::string::npos) << r.err;
  const Result lossy = run(generate_args(out.string(), {"--compress-weight", "--hw", "t4-flexgen"}), dir());
  ASSERT_EQ(lossy.code, 0) << lossy.err;
  EXPECT_NE(lossy.err.find("LOSSY"), std::string::npos) << lossy.err;
  // --compress applies to the search only.
  const Result misplaced = run(generate_args(out.string(), {"--compress", "auto"}), dir());
  EXPECT_GT(misplaced.code, 0);
}

TEST_F(PolicyCli, UnitLessBudgetIsRefused) {
  const fs::path out = dir() / "never.jsonl";
  const Result r = run(generate_args(out.string(), {"--gpu-mem", "16"}), dir());
  EXPECT_GT(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("a size needs a unit"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out) && count_lines(out) > 0);
  const Result p = run({kTiergen, "policy", "--model", model_dir(), "--prompt-len", "8", "--cpu-mem", "100"}, dir());
  EXPECT_GT(p.code, 0) << p.err;
}

TEST_F(PolicyCli, PolicyPrintsTierBytesFirstAndPlansForTheJob) {
  const Result r = run({kTiergen, "policy", "--model", model_dir(), "--prompts", prompts_file(), "--device", "cpu",
                        "--gpu-mem", "4MiB", "--cpu-mem", "64MiB", "--hw", "t4-flexgen"},
                       dir());
  ASSERT_EQ(r.code, 0) << r.err;
  const size_t bytes = r.out.find("tier bytes");
  const size_t fractions = r.out.find("fractions (secondary)");
  ASSERT_NE(bytes, std::string::npos) << r.out;
  ASSERT_NE(fractions, std::string::npos) << r.out;
  EXPECT_LT(bytes, fractions);
  EXPECT_NE(r.out.find("output: exact"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("5 prompts, prompt 6, gen 7, 4-byte dtype"), std::string::npos) << r.out;
}

// `tiergen policy` prices a given policy (FlexGen's flags, a file, or both) with the
// search's model instead of searching, sets it beside --policy auto's choice for the
// job, prints its FlexGen flags, and refuses one that does not fit the budgets.
TEST_F(PolicyCli, PricesAGivenPolicyBesideTheSearchsChoice) {
  const std::vector<std::string> job = {kTiergen, "policy", "--model", "opt-30b", "--prompt-len", "512", "--gen-len",
                                        "32", "--hw", "h100-spr", "--gpu-mem", "16GiB", "--cpu-mem", "100GiB",
                                        "--disk-mem", "64GiB"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = job;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const fs::path json = dir() / "given.json";
  const Result r = run(with({"--percent", "20", "80", "0", "100", "0", "100", "-b", "24", "--num-gpu-batches", "2",
                             "--cpu-attention", "--json", json.string()}),
                       dir());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("chosen by: given"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FlexGen flags  --percent 20 80 0 100 0 100 --gpu-batch-size 24 --num-gpu-batches 2 "
                       "--cpu-cache-compute"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("tiergen flags  --percent 20 80 0 100 0 100 --gpu-batch-size 24 --num-gpu-batches 2 "
                       "--cpu-attention\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--policy auto for this job: "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("search: "), std::string::npos) << "a priced policy is not searched: " << r.out;
  // Decode of this plan waits on the weights crossing the link (20.8 ms a layer against
  // 14.2 of compute and CPU attention), and the report says so in those words.
  EXPECT_NE(r.out.find("bottleneck: prefill compute, decode weight loads"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("A.3"), std::string::npos) << r.out;
  const std::string written = slurp(json);
  EXPECT_NE(written.find("\"gpu_batch_size\": 24"), std::string::npos) << written;
  EXPECT_NE(written.find("\"chosen_by\": \"given\""), std::string::npos) << written;

  // The file it wrote prices the same, and flags refine a file.
  const Result again = run(with({"--policy", json.string(), "--num-gpu-batches", "1"}), dir());
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find("--gpu-batch-size 24 --num-gpu-batches 1 --cpu-cache-compute"), std::string::npos)
      << again.out;

  const Result too_big = run(with({"--percent", "100", "0", "100", "0", "100", "0"}), dir());
  EXPECT_GT(too_big.code, 0);
  EXPECT_NE(too_big.err.find("does not fit the budgets: gpu tier needs"), std::string::npos) << too_big.err;
  const Result five = run(with({"--percent", "100", "0", "100", "0", "100"}), dir());
  EXPECT_GT(five.code, 0) << five.out;
}

// The "tiergen flags" line of a searched plan is a command line that runs that plan:
// given back to `tiergen policy`, it places every tier's bytes and shapes the block as
// the search did (what no flag sets, the thread counts, is named, with --json's way).
TEST_F(PolicyCli, TheTiergenFlagsOfASearchedPlanGiveThatPlanBack) {
  for (const std::string cap : {"16GiB", "40GiB"}) {
    const std::vector<std::string> job = {kTiergen, "policy", "-m", "opt-13b", "-s", "512", "-n", "32", "--hw",
                                          "h100-spr", "--gpu-mem", cap, "--cpu-mem", "100GiB", "--disk-mem", "64GiB"};
    const Result searched = run(job, dir());
    ASSERT_EQ(searched.code, 0) << searched.err;
    const std::string tag = "tiergen flags  ";
    const size_t at = searched.out.find(tag);
    ASSERT_NE(at, std::string::npos) << searched.out;
    std::string line = searched.out.substr(at + tag.size(), searched.out.find('\n', at) - at - tag.size());
    if (const size_t note = line.find(" (without "); note != std::string::npos) {
      EXPECT_NE(line.find("--json FILE writes the whole plan"), std::string::npos) << line;
      line.resize(note);
    }
    std::vector<std::string> given = job;
    std::istringstream words(line);
    for (std::string w; words >> w;) given.push_back(w);
    const Result priced = run(given, dir());
    ASSERT_EQ(priced.code, 0) << priced.err;
    EXPECT_NE(priced.out.find("chosen by: given"), std::string::npos) << priced.out;
    // The bytes per tier and the block, as searched.
    const auto section = [](const std::string& out) {
      const size_t from = out.find("tier bytes"), to = out.find("\ncompression ", from);
      return out.substr(from, to - from);
    };
    EXPECT_EQ(section(priced.out), section(searched.out)) << line;
    EXPECT_NE(priced.out.find(tag + line), std::string::npos) << priced.out;
  }
}

// A plan's "tiergen flags" line names every field a flag sets (CPU weight compute and its
// share of layers, compression, overlap), and `tiergen policy` takes each of them, so
// the line prices there as it runs under `generate`; a field flag with nothing to set,
// and --compress beside a given policy, are refused rather than ignored.
TEST_F(PolicyCli, PricesEveryFieldTheTiergenFlagsLineNames) {
  const std::vector<std::string> job = {kTiergen, "policy", "-m", "opt-30b", "-s", "512", "-n", "32", "--hw",
                                        "h100-spr", "--gpu-mem", "16GiB", "--cpu-mem", "100GiB", "--disk-mem", "64GiB"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = job;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const std::vector<std::string> placement = {"--percent", "20", "80", "0", "100", "0", "100", "-b", "24",
                                              "--num-gpu-batches", "2", "--cpu-attention"};
  std::vector<std::string> fields = placement;
  fields.insert(fields.end(), {"--cpu-weight-compute", "decode", "--cpu-weight-compute-layers", "50",
                               "--compress-weight", "--compress-bits", "4", "--compress-group-size", "32",
                               "--overlap", "false", "--sep-layer", "false", "--pin-weight", "false"});
  const Result plain = run(with(placement), dir());
  const Result refined = run(with(fields), dir());
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(refined.code, 0) << refined.err;
  const std::string tag = "tiergen flags  ";
  const auto flags_line = [&](const std::string& out) {
    const size_t at = out.find(tag);
    if (at == std::string::npos) return std::string();
    std::string line = out.substr(at + tag.size(), out.find('\n', at) - at - tag.size());
    if (const size_t note = line.find(" (without "); note != std::string::npos) line.resize(note);
    return line;
  };
  const std::string line = flags_line(refined.out);
  for (const char* field : {"--cpu-weight-compute decode", "--cpu-weight-compute-layers 50", "--compress-weight",
                            "--compress-bits 4 --compress-group-size 32", "--overlap off", "--sep-layer false",
                            "--pin-weight false"}) {
    EXPECT_NE(line.find(field), std::string::npos) << field << " missing from: " << line;
  }
  EXPECT_NE(refined.out.find("compression   weights 4-bit, group 32"), std::string::npos) << refined.out;
  EXPECT_NE(refined.out.find("matmuls       cpu in decode, 50% of the layers"), std::string::npos) << refined.out;
  const auto predicted = [](const std::string& out) {
    const size_t at = out.find("predicted throughput");
    return at == std::string::npos ? std::string("(no prediction)") : out.substr(at, out.find('\n', at) - at);
  };
  // Each field alone is priced: CPU weight compute, and overlap off (every queue in turn).
  auto cwc = placement;
  cwc.insert(cwc.end(), {"--cpu-weight-compute", "decode"});
  auto no_overlap = placement;
  no_overlap.insert(no_overlap.end(), {"--overlap", "off"});
  const Result at_home = run(with(cwc), dir()), serial = run(with(no_overlap), dir());
  ASSERT_EQ(at_home.code, 0) << at_home.err;
  ASSERT_EQ(serial.code, 0) << serial.err;
  EXPECT_NE(predicted(at_home.out), predicted(plain.out)) << "CPU weight compute was not priced";
  EXPECT_NE(predicted(serial.out), predicted(plain.out)) << "overlap off was not priced";
  EXPECT_NE(serial.out.find("every queue in turn (overlap off)"), std::string::npos) << serial.out;

  // The line, given back, is the same plan at the same price.
  std::vector<std::string> again = job;
  std::istringstream words(line);
  for (std::string w; words >> w;) again.push_back(w);
  const Result priced = run(again, dir());
  ASSERT_EQ(priced.code, 0) << priced.err;
  EXPECT_EQ(flags_line(priced.out), line);
  EXPECT_EQ(predicted(priced.out), predicted(refined.out));

  const Result alone = run(with({"--compress-weight"}), dir());
  EXPECT_GT(alone.code, 0);
  EXPECT_NE(alone.err.find("--compress-weight sets a field of a given policy"), std::string::npos) << alone.err;
  std::vector<std::string> bits_alone = placement;
  bits_alone.insert(bits_alone.end(), {"--compress-bits", "8"});
  const Result bits = run(with(bits_alone), dir());
  EXPECT_GT(bits.code, 0);
  EXPECT_NE(bits.err.find("--compress-bits and --compress-group-size shape --compress-weight or --compress-cache"),
            std::string::npos)
      << bits.err;
  std::vector<std::string> searched_and_given = placement;
  searched_and_given.insert(searched_and_given.end(), {"--compress", "on"});
  const Result both = run(with(searched_and_given), dir());
  EXPECT_GT(both.code, 0);
  EXPECT_NE(both.err.find("--compress on applies to the search"), std::string::npos) << both.err;
}

// `tiergen policy` takes generate's and bench's short flags (-m, -s, -n) and refuses a
// job past the model's context before planning (opt-125m has 2048 positions).
TEST_F(PolicyCli, TakesTheShortFlagsAndRefusesAJobPastTheContext) {
  const Result r = run({kTiergen, "policy", "-m", "opt-125m", "-s", "64", "-n", "8", "--hw", "t4-flexgen"}, dir());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("prompt 64, gen 8"), std::string::npos) << r.out;
  // -b and --num-gpu-batches alone fix the block the search plans for (as in generate).
  const Result shaped = run({kTiergen, "policy", "-m", "opt-125m", "-s", "64", "-n", "8", "--hw", "t4-flexgen",
                             "-b", "24", "--num-gpu-batches", "3"}, dir());
  ASSERT_EQ(shaped.code, 0) << shaped.err;
  EXPECT_EQ(shaped.out.find("chosen by: given"), std::string::npos) << shaped.out;
  EXPECT_NE(shaped.out.find("--gpu-batch-size 24 --num-gpu-batches 3"), std::string::npos) << shaped.out;
  const Result past = run({kTiergen, "policy", "-m", "opt-125m", "-s", "5000", "--hw", "t4-flexgen"}, dir());
  EXPECT_GT(past.code, 0);
  EXPECT_NE(past.err.find("--prompt-len 5000 plus --gen-len 32 exceeds opt-125m's 2048 positions"), std::string::npos)
      << past.err;
}

// A profile measured without a GPU plans for the CPU stand-in, and says so; a --hw that
// is neither a file nor a built-in lists the built-ins.
TEST_F(PolicyCli, SaysWhenTheProfileHasNoGpuAndListsBuiltInsForAnUnknownHw) {
  nlohmann::json stand_in = nlohmann::json::parse(slurp(TIERGEN_SOURCE_DIR "/configs/hw/t4-flexgen.json"));
  stand_in["gpu_is_host"] = true;
  const fs::path file = dir() / "stand-in.json";
  std::ofstream(file) << stand_in.dump();
  const Result r = run({kTiergen, "policy", "-m", "opt-125m", "-s", "64", "-n", "8", "--hw", file.string()}, dir());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("a machine without a GPU: host memory stands in for the GPU tier"), std::string::npos) << r.err;
  const Result gpu = run({kTiergen, "policy", "-m", "opt-125m", "-s", "64", "-n", "8", "--hw", "t4-flexgen"}, dir());
  EXPECT_EQ(gpu.err.find("stands in"), std::string::npos) << gpu.err;
  const Result typo = run({kTiergen, "policy", "-m", "opt-125m", "-s", "64", "--hw", "h100-sp"}, dir());
  EXPECT_GT(typo.code, 0);
  EXPECT_NE(typo.err.find("hardware profile 'h100-sp': no such file, and no built-in profile has that name "
                          "(built-ins: a100-40gb-pcie4, h100-spr, t4-flexgen"),
            std::string::npos)
      << typo.err;
}

// A policy file planned for another model or job is run, with a warning naming both.
TEST_F(PolicyCli, APolicyFileForAnotherModelOrJobIsWarned) {
  const fs::path file = dir() / "planned.json";
  const Result planned = run({kTiergen, "policy", "-m", model_dir(), "-s", "8", "-n", "4", "--device", "cpu",
                              "--hw", "t4-flexgen", "--json", file.string()}, dir());
  ASSERT_EQ(planned.code, 0) << planned.err;
  const auto out = (dir() / "warned.jsonl").string();
  const Result same = run(generate_args(out, {"-n", "4", "--policy", file.string()}), dir());
  ASSERT_EQ(same.code, 0) << same.err;
  EXPECT_EQ(same.err.find("planned for model"), std::string::npos) << same.err;
  nlohmann::json j = nlohmann::json::parse(slurp(file));
  j["model"] = "opt-30b";
  j["workload"]["gen_len"] = 2;
  std::ofstream(file) << j.dump();
  const Result other = run(generate_args(out, {"-n", "4", "--policy", file.string()}), dir());
  ASSERT_EQ(other.code, 0) << other.err;
  EXPECT_NE(other.err.find("planned for model opt-30b, this job runs"), std::string::npos) << other.err;
  EXPECT_NE(other.err.find("planned for prompt 8 and gen 2"), std::string::npos) << other.err;
}

// Result lines after the job record.
std::string results_of(const fs::path& p) {
  const std::string s = slurp(p);
  return s.rfind("{\"tiergen_job\"", 0) == 0 ? s.substr(s.find('\n') + 1) : s;
}

// `--cpu-weight-compute` reaches the engine and changes no token; the search offers it
// on a profile with the CPU's matmul rates (predicted for a small job on the H100 host)
// and `--no-cpu-weight-compute` rules it out.
TEST_F(PolicyCli, CpuWeightComputeKeepsTheResultsAndIsSearchedWherePriced) {
  const fs::path loaded = dir() / "weights-loaded.jsonl", at_home = dir() / "weights-at-home.jsonl";
  const std::vector<std::string> placement = {"--percent", "0", "100", "100", "0", "100", "0", "--hw", "t4-flexgen"};
  const Result a = run(generate_args(loaded.string(), placement), dir());
  ASSERT_EQ(a.code, 0) << a.err;
  auto with = placement;
  with.insert(with.end(), {"--cpu-weight-compute", "all", "--cpu-weight-compute-layers", "50"});
  const Result b = run(generate_args(at_home.string(), with), dir());
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_NE(b.err.find("cpu weight compute prefill+decode in 50% of layers"), std::string::npos) << b.err;
  EXPECT_EQ(results_of(at_home), results_of(loaded));
  EXPECT_EQ(count_lines(at_home), 5);
  with.back() = "150";
  EXPECT_GT(run(generate_args(at_home.string(), with), dir()).code, 0);
  // A share of layers with no phase to apply it to is refused, not ignored.
  auto share_alone = placement;
  share_alone.insert(share_alone.end(), {"--cpu-weight-compute-layers", "50"});
  const Result alone = run(generate_args(at_home.string(), share_alone), dir());
  EXPECT_GT(alone.code, 0);
  EXPECT_NE(alone.err.find("--cpu-weight-compute-layers applies to"), std::string::npos) << alone.err;

  const std::vector<std::string> small_job = {kTiergen, "policy", "--model", "opt-30b", "--prompt-len", "512",
                                              "--num-prompts", "4", "--gpu-mem", "16GiB", "--hw", "h100-spr"};
  const Result searched = run(small_job, dir());
  ASSERT_EQ(searched.code, 0) << searched.err;
  EXPECT_NE(searched.out.find("matmuls       cpu in decode"), std::string::npos) << searched.out;
  auto refused = small_job;
  refused.push_back("--no-cpu-weight-compute");
  const Result plain = run(refused, dir());
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_NE(plain.out.find("matmuls       gpu"), std::string::npos) << plain.out;
}

// A plan is priced at the CPU products of its own dtype. This host's cached profile,
// which timed float32 only, gains bfloat16's when a bfloat16 job plans (timed once, then
// read back), and names the kernel path they took; a profile the user named is never
// rewritten: a dtype it did not time is priced without CPU products, and the run says so.
TEST_F(PolicyCli, AJobsDtypeIsTimedIntoThisHostsProfileOrNamedAsUntimed) {
  nlohmann::json timed_fp32 = nlohmann::json::parse(slurp(TIERGEN_SOURCE_DIR "/configs/hw/t4-flexgen.json"));
  timed_fp32["gpu_is_host"] = true;
  timed_fp32["cpu"]["product_dtype"] = "float32";
  timed_fp32["cpu"]["product_rates"] = {{1, 2e10}, {64, 3e9}};
  timed_fp32["cpu"]["matmul_flops"] = 8e10;
  timed_fp32["cpu"]["gemv_bandwidth"] = 1.8e10;
  const fs::path cached = dir() / "dtype-cache" / "tiergen" / "hw-profile.json";
  fs::create_directories(cached.parent_path());
  std::ofstream(cached) << timed_fp32.dump();
  const std::vector<std::string> job = {kTiergen, "policy", "--model", model_dir(), "--device", "cpu",
                                        "--dtype", "bfloat16", "-s", "8", "-n", "4"};
  const Result first = run(job, dir(), "dtype-cache");
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_NE(first.err.find("this host's profile did not time bfloat16 CPU products: timing them"), std::string::npos)
      << first.err;
  const nlohmann::json after = nlohmann::json::parse(slurp(cached));
  const nlohmann::json& tables = after["cpu"]["product_tables"];
  ASSERT_EQ(tables.size(), 2u) << after.dump();
  EXPECT_EQ(tables[0]["dtype"], "float32");
  EXPECT_EQ(tables[0]["rates"], timed_fp32["cpu"]["product_rates"]) << "the float32 table kept";
  EXPECT_EQ(tables[1]["dtype"], "bfloat16");
  EXPECT_EQ(tables[1]["kernel_path"].get<std::string>().rfind("small_matmul (", 0), 0u) << tables[1].dump();
  EXPECT_GE(tables[1]["rates"].size(), 6u);
  const Result again = run(job, dir(), "dtype-cache");
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.err.find("timing them"), std::string::npos) << again.err;

  const fs::path named = dir() / "timed-fp32.json";
  std::ofstream(named) << timed_fp32.dump();
  std::vector<std::string> with_hw = job;
  with_hw.insert(with_hw.end(), {"--hw", named.string()});
  const Result untimed = run(with_hw, dir(), "dtype-cache");
  ASSERT_EQ(untimed.code, 0) << untimed.err;
  EXPECT_NE(untimed.err.find("did not time CPU products in bfloat16: no CPU products are priced in bfloat16"),
            std::string::npos)
      << untimed.err;
  EXPECT_EQ(nlohmann::json::parse(slurp(named)), timed_fp32) << "a named profile is not rewritten";
  with_hw[7] = "float32";
  const Result fp32 = run(with_hw, dir(), "dtype-cache");
  ASSERT_EQ(fp32.code, 0) << fp32.err;
  EXPECT_EQ(fp32.err.find("did not time"), std::string::npos) << fp32.err;
}

// A table of this host's cached profile that other kernels timed (an earlier revision)
// is timed again for a job in its dtype; a named profile's is priced as timed, with a
// warning naming why it may be off (and, on a host standing in for the GPU, that its
// attention over a loaded cache was not timed).
TEST_F(PolicyCli, ATableTimedByOtherKernelsIsTimedAgainInThisHostsProfile) {
  nlohmann::json stale = nlohmann::json::parse(slurp(TIERGEN_SOURCE_DIR "/configs/hw/t4-flexgen.json"));
  stale["gpu_is_host"] = true;
  const std::string level = tiergen::kernels::cpu_isa_name(tiergen::kernels::cpu_isa_in_use());
  const int old_revision = tiergen::kernels::kCpuProductKernelsRevision - 1;
  stale["cpu"]["product_tables"] = nlohmann::json::array(
      {{{"dtype", "float32"},
        {"kernel_path", "small_matmul (avx2) at every row count"},
        {"kernel_level", level},
        {"kernels_revision", old_revision},
        {"rates", {{1, 2e10}, {64, 3e9}}},
        {"matmul_flops", 8e10},
        {"gemv_bandwidth", 1.8e10}}});
  const fs::path cached = dir() / "stale-cache" / "tiergen" / "hw-profile.json";
  fs::create_directories(cached.parent_path());
  std::ofstream(cached) << stale.dump();
  const std::vector<std::string> job = {kTiergen, "policy", "--model", model_dir(), "--device", "cpu",
                                        "--dtype", "float32", "-s", "8", "-n", "4"};
  const std::string why = "timed float32 CPU products with kernels of revision " + std::to_string(old_revision) +
                          ", and this build's are revision " + std::to_string(tiergen::kernels::kCpuProductKernelsRevision);
  const Result first = run(job, dir(), "stale-cache");
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_NE(first.err.find("this host's profile " + why + ": timing them"), std::string::npos) << first.err;
  const nlohmann::json after = nlohmann::json::parse(slurp(cached));
  const nlohmann::json& tables = after["cpu"]["product_tables"];
  ASSERT_EQ(tables.size(), 1u) << after.dump();
  EXPECT_EQ(tables[0]["kernels_revision"], tiergen::kernels::kCpuProductKernelsRevision) << tables[0].dump();
  EXPECT_EQ(tables[0]["kernel_level"], level);
  EXPECT_NE(tables[0]["rates"], stale["cpu"]["product_tables"][0]["rates"]) << "timed again";
  const Result again = run(job, dir(), "stale-cache");
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.err.find("timing them"), std::string::npos) << again.err;
  // Timed again on a host standing in for the GPU, the table times that host's attention
  // over a loaded cache too (the stale one had none: its price is said below), unless a
  // noisy host timed wider heads no slower: the profiler then says so, records nothing,
  // and the price says it is untimed (the profiler's own rule; seen on a busy 2-core host).
  const std::string untimed_attention = "prices the stand-in's attention over a loaded cache in float32 as its FLOPs";
  const bool attention_timed =
      nlohmann::json::parse(slurp(cached))["cpu"]["product_tables"][0].contains("loaded_cache_attention");
  if (!attention_timed) {
    EXPECT_NE(first.err.find("attention over a loaded cache in float32 took no longer over wider heads"),
              std::string::npos)
        << first.err;
  }
  EXPECT_EQ(again.err.find(untimed_attention) == std::string::npos, attention_timed) << again.err;

  const fs::path named = dir() / "stale.json";
  std::ofstream(named) << stale.dump();
  std::vector<std::string> with_hw = job;
  with_hw.insert(with_hw.end(), {"--hw", named.string()});
  const Result priced = run(with_hw, dir(), "stale-cache");
  ASSERT_EQ(priced.code, 0) << priced.err;
  EXPECT_NE(priced.err.find(why + ": they are priced as timed"), std::string::npos) << priced.err;
  EXPECT_NE(priced.err.find(untimed_attention), std::string::npos) << priced.err;
  EXPECT_EQ(nlohmann::json::parse(slurp(named)), stale) << "a named profile is not rewritten";

  // A table of this revision timed at another kernel level (another CPU, or under
  // TIERGEN_CPU_ISA) is timed again too.
  nlohmann::json elsewhere = stale;
  const std::string other_level = level == "portable" ? "avx2" : "portable";
  elsewhere["cpu"]["product_tables"][0]["kernel_level"] = other_level;
  elsewhere["cpu"]["product_tables"][0]["kernels_revision"] = tiergen::kernels::kCpuProductKernelsRevision;
  std::ofstream(cached) << elsewhere.dump();
  const Result moved = run(job, dir(), "stale-cache");
  ASSERT_EQ(moved.code, 0) << moved.err;
  EXPECT_NE(moved.err.find("this host's profile timed float32 CPU products at kernel level " + other_level +
                           ", and this process runs " + level + ": timing them"),
            std::string::npos)
      << moved.err;
  EXPECT_EQ(nlohmann::json::parse(slurp(cached))["cpu"]["product_tables"][0]["kernel_level"], level);
}

// For a range of gpu budgets around what the tiny model needs in float32, `policy
// --device cpu` (the dry run) and `generate --policy auto` (the real run) agree.
TEST_F(PolicyCli, PolicyAndGenerateAgreeOnFeasibility) {
  int feasible = 0, infeasible = 0;
  for (const char* gpu : {"256KiB", "512KiB", "600KiB", "768KiB", "1MiB", "4MiB"}) {
    const std::vector<std::string> budgets = {"--gpu-mem", gpu, "--cpu-mem", "2MiB", "--disk-mem", "1MiB",
                                              "--hw", "t4-flexgen"};
    std::vector<std::string> policy = {kTiergen, "policy", "--model", model_dir(), "--prompts", prompts_file(),
                                       "--device", "cpu", "--dtype", "float32"};
    policy.insert(policy.end(), budgets.begin(), budgets.end());
    const Result planned = run(policy, dir());
    const fs::path out = dir() / (std::string("agree-") + gpu + ".jsonl");
    std::vector<std::string> extra = {"--policy", "auto", "--dtype", "float32"};
    extra.insert(extra.end(), budgets.begin(), budgets.end());
    const Result ran = run(generate_args(out.string(), extra), dir());
    ASSERT_GE(planned.code, 0) << planned.err;
    ASSERT_GE(ran.code, 0) << ran.err;
    EXPECT_EQ(planned.code == 0, ran.code == 0) << "gpu " << gpu << "\npolicy:\n" << planned.out << planned.err
                                                << "\ngenerate:\n" << ran.err;
    (planned.code == 0 ? feasible : infeasible) += 1;
    if (planned.code != 0) EXPECT_NE(planned.err.find("short by"), std::string::npos) << planned.err;
    if (ran.code == 0) EXPECT_EQ(count_lines(out), 5);
  }
  // The range covers both answers (otherwise the agreement proves little).
  EXPECT_GT(feasible, 0);
  EXPECT_GT(infeasible, 0);
}

// `cmake --install` gives a binary that needs nothing from the source or build tree for
// its defaults: presets and hardware profiles are compiled in.
TEST_F(PolicyCli, InstalledBinaryFindsItsDefaults) {
  const fs::path prefix = dir() / "prefix";
  const Result installed = run({"/usr/bin/cmake", "--install", TIERGEN_BINARY_DIR, "--prefix", prefix.string()}, dir());
  if (installed.code == 127) GTEST_SKIP() << "no cmake at /usr/bin/cmake";
  ASSERT_EQ(installed.code, 0) << installed.out << installed.err;
  const fs::path bin = prefix / "bin" / "tiergen";
  ASSERT_TRUE(fs::exists(bin));
  // With an empty profile cache: the default is the built-in profile.
  const Result r = run({bin.string(), "policy", "--model", "opt-125m", "--num-prompts", "4", "--prompt-len", "16",
                        "--gen-len", "8"},
                       dir(), "empty-cache");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("built-in:t4-flexgen"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("block of"), std::string::npos) << r.out;
  const Result named = run({bin.string(), "policy", "--model", "opt-125m", "--prompt-len", "16", "--hw",
                            "a100-40gb-pcie4"}, dir());
  EXPECT_EQ(named.code, 0) << named.err;
}

}  // namespace
