// The offload directory is empty during and after every run: the offload file is
// unlinked as soon as it is opened, so a successful run, one that fails while placing
// weights, one that fails mid-run, and a CLI run killed by SIGTERM or SIGKILL (what the
// OOM killer sends) all leave nothing behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fcntl.h>
#include <functional>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/support/error_of.h"
#include "tests/support/tiny_model.h"
#include "tiergen/common/error.h"
#include "tiergen/runtime/engine.h"

namespace tiergen::test {
namespace {

using runtime::Tier;

// Offload files process `pid` holds open (by their former names, "... (deleted)").
std::vector<std::string> open_offload_files(pid_t pid) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    const auto target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (!ec && target.find("tiergen-offload-") != std::string::npos) names.push_back(target);
  }
  return names;
}

runtime::Policy disk_policy(int64_t gbs) {
  runtime::Policy p;
  p.gpu_batch_size = gbs;
  p.num_gpu_batches = 1;
  p.w_gpu_percent = 0;
  p.w_cpu_percent = 0;  // weights on disk
  p.cache_gpu_percent = 0;
  p.cache_cpu_percent = 0;  // KV cache on disk
  p.act_gpu_percent = 0;
  p.act_cpu_percent = 50;  // half the activations on disk
  return p;
}

TEST(RuntimeOffloadDir, EmptyAfterASuccessfulRun) {
  TinyModel m = make_tiny_model(tiny_opt(41));
  TempDir offload("offload");
  const NoFileWeights file_less(*m.weights);  // weights go through the offload file
  const auto requests = greedy_requests(make_prompts({3, 5, 2, 6, 4}, m.spec.vocab_size), {5});
  size_t results = 0;
  {
    runtime::Engine engine(m.spec, file_less, disk_policy(2), cpu_engine_options(offload.path), workload_of(requests));
    engine.generate(requests, [&](size_t, const runtime::SequenceResult& r) {
      ++results;
      // While the engine runs, it holds its one offload file open, and the file has
      // no name in the directory.
      EXPECT_TRUE(files_in(offload.path).empty());
      const auto held = open_offload_files(::getpid());
      ASSERT_EQ(held.size(), 1u);
      EXPECT_NE(held[0].find("(deleted)"), std::string::npos) << held[0];
      EXPECT_EQ(r.tokens.size(), 5u);
    });
    EXPECT_GT(engine.stats().peak_bytes[Tier::Disk], 0u);
  }
  EXPECT_EQ(results, requests.size());
  EXPECT_TRUE(files_in(offload.path).empty());
  EXPECT_TRUE(open_offload_files(::getpid()).empty());
}

TEST(RuntimeOffloadDir, NoFileForAPolicyWithoutDisk) {
  TinyModel m = make_tiny_model(tiny_llama(42));
  TempDir offload("offload");
  runtime::Policy p;
  p.gpu_batch_size = 2;
  p.cache_gpu_percent = 0;
  p.cache_cpu_percent = 100;
  const auto requests = greedy_requests(make_prompts({3, 5}, m.spec.vocab_size), {4});
  runtime::Engine engine(m.spec, *m.weights, p, cpu_engine_options(offload.path), workload_of(requests));
  engine.generate(requests, [&](size_t, const runtime::SequenceResult&) { EXPECT_TRUE(files_in(offload.path).empty()); });
  EXPECT_EQ(engine.stats().peak_bytes[Tier::Disk], 0u);
}

TEST(RuntimeOffloadDir, EmptyAfterAWeightReadFailsWhilePlacing) {
  TinyModel m = make_tiny_model(tiny_opt(43));
  TempDir offload("offload");
  // Half-way through placement: layer 1's MLP, after the embedding and layer 0 were
  // written to the offload file.
  const CountingWeights failing(*m.weights, "model.decoder.layers.1.fc1.weight", /*hide_files=*/true);
  const auto requests = greedy_requests(make_prompts({3, 5}, m.spec.vocab_size), {4});
  try {
    runtime::Engine engine(m.spec, failing, disk_policy(2), cpu_engine_options(offload.path), workload_of(requests));
    FAIL() << "placement should have failed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.decoder.layers.1.fc1.weight"), std::string::npos) << e.what();
  }
  EXPECT_GT(failing.reads(), 5);
  EXPECT_TRUE(files_in(offload.path).empty());
}

// Weights on the gpu, KV cache on disk, activations split cpu/disk.
runtime::Policy cache_on_disk_policy() {
  runtime::Policy p = disk_policy(2);
  p.w_gpu_percent = 100;
  return p;
}

TEST(RuntimeOffloadDir, EmptyAfterARunFailsMidway) {
  TinyModel m = make_tiny_model(tiny_llama(44));
  TempDir offload("offload");
  const runtime::Policy p = cache_on_disk_policy();
  const runtime::EngineOptions options = cpu_engine_options(offload.path);
  const auto requests = greedy_requests(make_prompts({3, 4, 2, 4, 5, 3}, m.spec.vocab_size), {4, 2, 3});
  // The results go nowhere after the second (as when the results file's disk fills):
  // the job fails with gpu batches still running and their caches on disk.
  size_t finished = 0;
  {
    runtime::Engine engine(m.spec, *m.weights, p, options, workload_of(requests));
    const std::string e = error_of([&] {
      engine.generate(requests, [&](size_t, const runtime::SequenceResult&) {
        if (++finished > 2) TG_THROW("no space left for results");
      });
    });
    EXPECT_NE(e.find("no space left for results"), std::string::npos) << e;
    EXPECT_GE(finished, 3u);  // the failure came after work was done
  }
  EXPECT_TRUE(files_in(offload.path).empty());
}

// Budgets for short prompts; a job with a longer one is refused when its run starts,
// before any of its work (its KV cache and activation homes are made for the job's
// longest prompt), and leaves nothing behind.
TEST(RuntimeOffloadDir, EmptyAfterAJobLongerThanPlannedIsRefused) {
  TinyModel m = make_tiny_model(tiny_llama(44));
  TempDir offload("offload");
  const runtime::Policy p = cache_on_disk_policy();
  const runtime::Workload planned_for{4, 4};
  const runtime::TierBytes planned = runtime::plan_memory(m.spec, p, planned_for, 4).total();
  runtime::EngineOptions options = cpu_engine_options(offload.path);
  options.budgets = runtime::Budgets{planned[Tier::Gpu], planned[Tier::Cpu], planned[Tier::Disk]};
  const auto requests = greedy_requests(make_prompts({3, 4, 2, 4, 30}, m.spec.vocab_size), {4});
  size_t finished = 0;
  {
    runtime::Engine engine(m.spec, *m.weights, p, options, planned_for);
    const std::string e = error_of([&] {
      engine.generate(requests, [&](size_t, const runtime::SequenceResult&) { ++finished; });
    });
    EXPECT_NE(e.find("disk tier budget exceeded"), std::string::npos) << e;
    EXPECT_EQ(finished, 0u);
  }
  EXPECT_TRUE(files_in(offload.path).empty());
}

// ---- The CLI, killed while it runs.

bool wait_for(const std::function<bool()>& condition, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return condition();
}

// Runs the CLI with its KV cache on disk, sends `signal` once it is generating, and
// returns the wait status; the offload directory is checked by the caller.
int run_cli_and_kill(int signal, const std::string& dir_name, std::string& offload) {
  const std::string binary = std::string(TIERGEN_BINARY_DIR) + "/tiergen";
  TinyModelOptions o = tiny_opt(45);
  o.max_positions = 1024;
  TinyModel m = make_tiny_model(o);
  static std::vector<std::unique_ptr<TempDir>> dirs;  // outlive the call, for the caller's check
  dirs.push_back(std::make_unique<TempDir>(dir_name));
  const std::string work = dirs.back()->path;
  offload = work + "/offload";
  const std::string prompts = work + "/prompts.jsonl";
  const std::string out = work + "/out.jsonl";
  {
    std::ofstream f(prompts);
    for (const auto& p : make_prompts({4, 6, 3, 5, 7, 2, 4, 6, 3, 5, 4, 6, 3, 5, 7, 2}, o.vocab)) {
      f << "{\"prompt_token_ids\": [";
      for (size_t i = 0; i < p.size(); ++i) f << (i ? ", " : "") << p[i];
      f << "]}\n";
    }
  }
  const std::vector<std::string> args = {
      binary, "generate", "-m", m.dir, "-p", prompts, "-o", out, "--device", "cpu", "--dtype", "float32",
      "--offload-dir", offload, "--percent", "100", "0", "0", "0", "100", "0", "-n", "1000", "-b", "2",
      "--gpu-mem", "1GiB", "--cpu-mem", "1GiB", "--disk-mem", "1GiB"};
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, STDERR_FILENO);
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  // Wait until the child holds its (nameless) offload file, let generation get going,
  // then stop it.
  const bool started = wait_for([&] { return !open_offload_files(pid).empty(); }, 120);
  // Checked once generation runs: between mkstemp and its unlink the file has a name
  // for a moment, which a check right when the descriptor appears can catch.
  if (started) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(files_in(offload).empty()) << "the offload file has a name while the run goes on";
  ::kill(pid, signal);
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(started) << "the offload file never appeared";
  return status;
}

TEST(RuntimeOffloadDir, EmptyAfterTheCliIsKilledBySigterm) {
  if (::access((std::string(TIERGEN_BINARY_DIR) + "/tiergen").c_str(), X_OK) != 0) GTEST_SKIP() << "tiergen is not built";
  std::string offload;
  const int status = run_cli_and_kill(SIGTERM, "cli-sigterm", offload);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  EXPECT_TRUE(files_in(offload).empty());
}

TEST(RuntimeOffloadDir, EmptyAfterTheCliIsKilledBySigkill) {
  if (::access((std::string(TIERGEN_BINARY_DIR) + "/tiergen").c_str(), X_OK) != 0) GTEST_SKIP() << "tiergen is not built";
  std::string offload;
  const int status = run_cli_and_kill(SIGKILL, "cli-sigkill", offload);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  EXPECT_TRUE(files_in(offload).empty()) << "SIGKILL left an offload file behind";
}

}  // namespace
}  // namespace tiergen::test
