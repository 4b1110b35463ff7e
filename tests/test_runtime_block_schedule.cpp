// The runtime runs the schedule the cost model prices (runtime/block_schedule.h): in
// a traced run on the CPU stand-in, each task ran on the compute thread exactly when
// the schedule puts it on the compute queue, for one gpu batch (whose hidden state is
// loaded in line) and for two (loaded ahead by the cache loader).
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "tests/support/cli_fixture.h"
#include "tests/support/tiny_model.h"
#include "tiergen/runtime/block_schedule.h"
#include "tiergen/runtime/engine.h"

namespace tiergen::test {
namespace {

using nlohmann::json;
using runtime::Task;
namespace schedule = runtime::schedule;

struct SpanThreads {
  int compute_thread = -1;
  // By task: the threads its spans ran on, for the spans the schedule dispatches (the
  // run's very first weight load has nothing before it to prefetch it, and the
  // embedding's decode loads move nothing, so the compute queue takes them in line:
  // both are left out).
  std::map<std::string, std::set<int>> threads;
};

// Weights, KV cache and activations on the CPU tier with CPU attention: every task runs.
SpanThreads traced_threads(const TempDir& dir, int64_t batches) {
  static const TinyModel model = make_tiny_model(tiny_opt());
  const auto requests = greedy_requests(make_prompts({5, 7, 3, 6}, model.spec.vocab_size, 11), {4});
  runtime::EngineOptions options = cpu_engine_options(dir.path);
  options.keep_trace = true;
  const runtime::Policy policy = make_policy(4 / batches, batches, {0, 100, 0, 100, 0, 100}, true, true);
  runtime::Engine engine(model.spec, *model.weights, policy, options, workload_of(requests));
  engine.generate(requests);
  const std::string path = dir.path + "/trace.json";
  engine.write_trace(path);
  SpanThreads out;
  const json trace = json::parse(read_file(path));
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const std::string name = e["name"].get<std::string>();
    const json& args = e["args"];
    if (name == "compute") out.compute_thread = args["thread"].get<int>();
    if (name == "load_weight" && args["layer"] == 0 && (args["token"] == 0 || e["cat"] == "decode")) continue;
    out.threads[name].insert(args["thread"].get<int>());
  }
  return out;
}

void expect_tasks_on_their_queues(int64_t batches) {
  TempDir dir("schedule");
  const SpanThreads run = traced_threads(dir, batches);
  ASSERT_GE(run.compute_thread, 0);
  const Task tasks[] = {Task::LoadWeight, Task::LoadCache, Task::StoreCache, Task::LoadHidden,
                        Task::StoreHidden, Task::Compute, Task::CpuAttention, Task::Sample};
  for (const Task task : tasks) {
    const std::string name = runtime::task_name(task);
    const auto it = run.threads.find(name);
    if (task == Task::LoadCache && it == run.threads.end()) continue;  // CPU attention reads cpu homes in place
    ASSERT_NE(it, run.threads.end()) << name << " never ran";
    const bool on_compute = schedule::queue_of(task, batches) == schedule::Queue::Compute;
    for (const int thread : it->second) {
      EXPECT_EQ(thread == run.compute_thread, on_compute)
          << name << " ran on thread " << thread << " (compute: " << run.compute_thread << ") with " << batches
          << " gpu batches; the schedule puts it on " << schedule::queue_name(schedule::queue_of(task, batches));
    }
  }
}

TEST(BlockSchedule, OneGpuBatchLoadsItsHiddenStateOnTheComputeQueue) {
  EXPECT_FALSE(schedule::hidden_prefetched(1));
  EXPECT_EQ(schedule::queue_of(Task::LoadHidden, 1), schedule::Queue::Compute);
  EXPECT_TRUE(schedule::on_compute_path(Task::StoreHidden, 1));
  expect_tasks_on_their_queues(1);
}

TEST(BlockSchedule, TwoGpuBatchesLoadTheNextBatchsHiddenStateAhead) {
  EXPECT_TRUE(schedule::hidden_prefetched(2));
  EXPECT_EQ(schedule::queue_of(Task::LoadHidden, 2), schedule::Queue::CacheLoader);
  EXPECT_FALSE(schedule::on_compute_path(Task::StoreHidden, 2));
  expect_tasks_on_their_queues(2);
}

}  // namespace
}  // namespace tiergen::test
