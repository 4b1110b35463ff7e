// The offload directory is empty after every run: a successful one, one that fails
// while placing weights, one that fails mid-run, and a CLI run killed by SIGTERM.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fcntl.h>
#include <functional>
#include <fstream>
#include <thread>

#include "tests/support/tiny_model.h"
#include "tiergen/common/error.h"
#include "tiergen/runtime/engine.h"

namespace tiergen::test {
namespace {

using runtime::Tier;

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
      // While the engine runs, its one offload file is there.
      const auto files = files_in(offload.path);
      ASSERT_EQ(files.size(), 1u);
      EXPECT_EQ(files[0].rfind("tiergen-offload-", 0), 0u) << files[0];
      EXPECT_EQ(r.tokens.size(), 5u);
    });
    EXPECT_GT(engine.stats().peak_bytes[Tier::Disk], 0u);
  }
  EXPECT_EQ(results, requests.size());
  EXPECT_TRUE(files_in(offload.path).empty());
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

TEST(RuntimeOffloadDir, EmptyAfterARunFailsMidway) {
  TinyModel m = make_tiny_model(tiny_llama(44));
  TempDir offload("offload");
  // Weights on the gpu, KV cache on disk, activations split cpu/disk.
  runtime::Policy p = disk_policy(2);
  p.w_gpu_percent = 100;
  // Budgets for short prompts; a long prompt in a later block then exhausts the disk
  // tier (its KV cache is allocated when the block starts) after the first blocks ran.
  const runtime::Workload planned_for{4, 4};
  const runtime::TierBytes planned = runtime::plan_memory(m.spec, p, planned_for, 4).total();
  runtime::EngineOptions options = cpu_engine_options(offload.path);
  options.budgets = runtime::Budgets{planned[Tier::Gpu], planned[Tier::Cpu], planned[Tier::Disk]};
  auto requests = greedy_requests(make_prompts({3, 4, 2, 4, 30}, m.spec.vocab_size), {4});
  size_t finished = 0;
  {
    runtime::Engine engine(m.spec, *m.weights, p, options, planned_for);
    try {
      engine.generate(requests, [&](size_t, const runtime::SequenceResult&) { ++finished; });
      ADD_FAILURE() << "the long prompt should not fit";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("disk tier budget exceeded"), std::string::npos) << e.what();
    }
    EXPECT_GE(finished, 2u);  // the failure came after work was done
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

TEST(RuntimeOffloadDir, EmptyAfterTheCliIsKilledBySigterm) {
  const std::string binary = std::string(TIERGEN_BINARY_DIR) + "/tiergen";
  if (::access(binary.c_str(), X_OK) != 0) GTEST_SKIP() << binary << " is not built";
  TinyModelOptions o = tiny_opt(45);
  o.max_positions = 1024;
  TinyModel m = make_tiny_model(o);
  TempDir work("cli-sigterm");
  const std::string offload = work.path + "/offload";
  const std::string prompts = work.path + "/prompts.jsonl";
  const std::string out = work.path + "/out.jsonl";
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
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, STDERR_FILENO);
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  // Wait until the offload file exists, let generation get going, then stop it.
  const bool started = wait_for([&] { return !files_in(offload).empty(); }, 120);
  if (started) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(started) << "the offload file never appeared";
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  EXPECT_TRUE(files_in(offload).empty());
}

}  // namespace
}  // namespace tiergen::test
