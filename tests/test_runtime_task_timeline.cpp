// The task timeline (task_timeline.h) on the CPU stand-in: every compute step of every
// token is traced once with its token, layer and gpu batch; weight loads precede the
// compute that reads them; CPU attention lies inside its compute step; the trace of
// `tiergen generate --trace` passes tools/trace-summary.py's checks; a trace path that
// cannot be written is refused before the run. Times are only checked for order and
// consistency, never against thresholds.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "tests/support/cli_fixture.h"
#include "tests/support/error_of.h"
#include "tests/support/tiny_model.h"
#include "tiergen/runtime/engine.h"
#include "tiergen/runtime/task_timeline.h"

namespace tiergen::test {
namespace {

using nlohmann::json;
using Triple = std::tuple<int64_t, int64_t, int64_t>;  // token, layer, batch

constexpr int64_t kTokens = 4, kBatches = 2;

struct TracedRun {
  json trace;
  std::map<std::string, std::vector<json>> spans;  // by task name
  double compute_seconds = 0;  // the report's compute time, prefill and decode
};

Triple step_of(const json& span) {
  return {span["args"]["token"].get<int64_t>(), span["args"]["layer"].get<int64_t>(),
          span["args"]["batch"].get<int64_t>()};
}

double end_of(const json& span) { return span["ts"].get<double>() + span["dur"].get<double>(); }

// Weights and KV cache on the CPU tier with CPU attention, activations on the CPU
// tier: every kind of task runs. Two runs when `runs` is 2, the trace cleared between;
// `prompts` beyond the block's 4 make more blocks.
TracedRun traced_run(const TempDir& dir, bool overlap, int runs = 1, const std::string& device = "cpu",
                     const std::vector<int64_t>& prompt_lengths = {5, 7, 3, 6}, const runtime::ScheduleFaults& faults = {},
                     const std::array<double, 6>& percent = {0, 100, 0, 100, 0, 100}) {
  static const TinyModel model = make_tiny_model(tiny_opt());
  const auto requests = greedy_requests(make_prompts(prompt_lengths, model.spec.vocab_size, 11), {kTokens});
  runtime::EngineOptions options = cpu_engine_options(dir.path);
  options.faults = faults;
  if (device != "cpu") options.device = runtime::make_device_context(device, "float32", true);
  options.keep_trace = true;
  const runtime::Policy policy = make_policy(2, kBatches, percent, percent[2] < 100, overlap);
  runtime::Engine engine(model.spec, *model.weights, policy, options, workload_of(requests));
  for (int r = 0; r < runs; ++r) {
    engine.clear_trace();
    engine.generate(requests);
  }
  const std::string path = dir.path + "/trace.json";
  engine.write_trace(path);
  TracedRun out;
  out.trace = json::parse(read_file(path));
  for (const json& e : out.trace["traceEvents"]) {
    if (e["ph"] == "X") out.spans[e["name"].get<std::string>()].push_back(e);
  }
  out.compute_seconds =
      engine.stats().seconds(runtime::Task::Compute, true) + engine.stats().seconds(runtime::Task::Compute, false);
  // The CPU has no device clock; on CUDA every task is timed on its stream.
  EXPECT_EQ(engine.stats().device_timed(), device != "cpu");
  if (device == "cpu") {
    EXPECT_EQ(engine.stats().seconds(runtime::Task::Compute, false),
              engine.stats().host_seconds(runtime::Task::Compute, false));
  }
  return out;
}

TEST(TaskTimeline, EveryComputeStepOfEveryTokenIsTracedOnceWithItsLayerAndBatch) {
  TempDir dir("timeline");
  const TracedRun run = traced_run(dir, /*overlap=*/true);
  const int64_t layers = tiny_opt().layers + 2;  // embedding, decoder layers, head
  std::set<Triple> steps;
  for (const json& c : run.spans.at("compute")) {
    EXPECT_TRUE(steps.insert(step_of(c)).second) << c.dump();
    EXPECT_GE(c["dur"].get<double>(), 0);
  }
  EXPECT_EQ(static_cast<int64_t>(steps.size()), kTokens * layers * kBatches);
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t j = 0; j < layers; ++j) {
      for (int64_t k = 0; k < kBatches; ++k) EXPECT_TRUE(steps.count({t, j, k})) << t << " " << j << " " << k;
    }
  }
  // Every kind of task of this placement is there, decode and prefill named.
  for (const char* task : {"load_weight", "load_cache", "load_hidden", "store_cache", "store_hidden", "cpu_attention"}) {
    EXPECT_FALSE(run.spans.count(task) == 0 || run.spans.at(task).empty()) << task;
  }
  std::set<std::string> categories;
  for (const json& c : run.spans.at("compute")) categories.insert(c["cat"].get<std::string>());
  EXPECT_EQ(categories, (std::set<std::string>{"prefill", "decode"}));
  // The rows are named for a trace viewer.
  int named_rows = 0;
  for (const json& e : run.trace["traceEvents"]) named_rows += e["ph"] == "M" && e["name"] == "thread_name";
  EXPECT_GE(named_rows, 5);
}

TEST(TaskTimeline, WeightsArriveBeforeTheComputeThatReadsThem) {
  for (bool overlap : {false, true}) {
    TempDir dir("timeline");
    const TracedRun run = traced_run(dir, overlap);
    std::map<std::pair<int64_t, int64_t>, json> loads;  // (token, layer) -> its load
    for (const json& l : run.spans.at("load_weight")) {
      const auto [t, j, k] = step_of(l);
      EXPECT_TRUE(loads.emplace(std::make_pair(t, j), l).second) << "layer loaded twice for one token: " << l.dump();
    }
    for (const json& c : run.spans.at("compute")) {
      const auto [t, j, k] = step_of(c);
      auto it = loads.find({t, j});
      ASSERT_NE(it, loads.end()) << "no weight load for " << c.dump();
      EXPECT_LE(end_of(it->second), c["ts"].get<double>() + 1e-3) << "overlap " << overlap << ": " << c.dump();
    }
  }
}

TEST(TaskTimeline, ComputeStepsNeverOverlapAndCpuAttentionIsInsideItsStep) {
  TempDir dir("timeline");
  const TracedRun run = traced_run(dir, /*overlap=*/true);
  std::vector<json> computes = run.spans.at("compute");
  std::sort(computes.begin(), computes.end(),
            [](const json& a, const json& b) { return a["ts"].get<double>() < b["ts"].get<double>(); });
  for (size_t i = 1; i < computes.size(); ++i) {
    EXPECT_LE(end_of(computes[i - 1]), computes[i]["ts"].get<double>() + 1e-3) << computes[i].dump();
  }
  const int64_t decoder_layers = tiny_opt().layers;
  EXPECT_EQ(static_cast<int64_t>(run.spans.at("cpu_attention").size()), (kTokens - 1) * decoder_layers * kBatches);
  for (const json& a : run.spans.at("cpu_attention")) {
    const auto [t, j, k] = step_of(a);
    const bool inside = std::any_of(computes.begin(), computes.end(), [&, j = j, k = k](const json& c) {
      const auto [ct, cj, ck] = step_of(c);
      return ct > 0 && cj == j && ck == k && c["ts"].get<double>() <= a["ts"].get<double>() + 1e-3 &&
             end_of(a) <= end_of(c) + 1e-3;
    });
    EXPECT_TRUE(inside) << a.dump();
  }
  // The spans add up to the task times the report gives (host times here). Each step is
  // timed twice, by its span and by the stats, a few instructions apart: a preemption
  // between the two (one scheduler tick, 4 ms, seen under a sanitizer with the cores
  // shared by two test processes) shows in one sum only.
  double compute_us = 0;
  for (const json& c : computes) compute_us += c["dur"].get<double>();
  EXPECT_NEAR(compute_us / 1e6, run.compute_seconds, 0.05 * run.compute_seconds + 5e-3);
}

TEST(TaskTimeline, EachRunIsNumberedAndComputesEveryStepOnce) {
  TempDir dir("timeline");
  // 4 sequences per block: a full block, then a gpu batch of 2 refills its first slot
  // (a run's "block" number covers the batches refilled into it).
  const TracedRun run = traced_run(dir, /*overlap=*/true, 1, "cpu", {5, 7, 3, 6, 4, 8});
  const int64_t layers = tiny_opt().layers + 2;
  std::map<int64_t, std::set<Triple>> steps;  // block -> (pass, layer, batch)
  for (const json& c : run.spans.at("compute")) {
    EXPECT_TRUE(steps[c["args"]["block"].get<int64_t>()].insert(step_of(c)).second) << c.dump();
  }
  ASSERT_EQ(steps.size(), 1u);
  // Passes 0..3 run both batch slots, passes 4..7 the third gpu batch in slot 0.
  const auto& run_steps = steps.begin()->second;
  EXPECT_EQ(static_cast<int64_t>(run_steps.size()), kTokens * layers * (kBatches + 1));
  for (int64_t pass = kTokens; pass < 2 * kTokens; ++pass) {
    EXPECT_TRUE(run_steps.count({pass, 0, 0}) && !run_steps.count({pass, 0, 1})) << "pass " << pass;
  }
  // Every span of a step names its block: CPU attention among them.
  for (const json& a : run.spans.at("cpu_attention")) EXPECT_GE(a["args"]["block"].get<int64_t>(), 0) << a.dump();
}

// The next layer's weights have every gpu batch of this layer to arrive: with loads
// slower than the compute, the second batch's step starts while they still load (it
// once waited for them at the first batch's step end, as FlexGen's sync() does).
TEST(TaskTimeline, TheNextLayersWeightsLoadWhileEveryBatchOfThisLayerComputes) {
  TempDir dir("timeline");
  runtime::ScheduleFaults slow;
  slow.slow_weight_loads_ms = 200;  // far beyond a step of this model, even on a loaded machine
  const TracedRun run = traced_run(dir, /*overlap=*/true, 1, "cpu", {5, 7, 3, 6}, slow);
  std::map<std::pair<int64_t, int64_t>, json> loads;  // (token, layer) -> its load
  for (const json& l : run.spans.at("load_weight")) {
    const auto [t, j, k] = step_of(l);
    loads.emplace(std::make_pair(t, j), l);
  }
  int overlapped = 0, prefetched = 0;
  for (const json& c : run.spans.at("compute")) {
    const auto [t, j, k] = step_of(c);
    if (k != 1) continue;
    auto next = loads.find({t, j + 1});
    if (next == loads.end() || next->second["ts"].get<double>() > c["ts"].get<double>()) continue;  // not prefetched
    ++prefetched;
    overlapped += c["ts"].get<double>() < end_of(next->second);
  }
  ASSERT_GT(prefetched, 0);
  EXPECT_EQ(overlapped, prefetched);
}

// The host threads the spans of `task` ran on.
std::set<int64_t> threads_of(const TracedRun& run, const std::string& task) {
  std::set<int64_t> threads;
  for (const json& s : run.spans.at(task)) threads.insert(s["args"]["thread"].get<int64_t>());
  return threads;
}

TEST(TaskTimeline, WeightsThatMoveNothingAreTakenInLineAndTheOthersOnTheLoader) {
  TempDir dir("timeline");
  // Every weight resident on the compute device: each layer is taken at its first step
  // by the compute thread, with no loader task to hand references across.
  const TracedRun resident = traced_run(dir, /*overlap=*/true, 1, "cpu", {5, 7, 3, 6}, {}, {100, 0, 100, 0, 100, 0});
  const std::set<int64_t> compute_thread = threads_of(resident, "compute");
  ASSERT_EQ(compute_thread.size(), 1u);
  EXPECT_EQ(threads_of(resident, "load_weight"), compute_thread);
  // Weights on the cpu tier are copied, and prefetched by the weight loader's thread.
  const TracedRun copied = traced_run(dir, /*overlap=*/true);
  const std::set<int64_t> copied_compute = threads_of(copied, "compute");
  ASSERT_EQ(copied_compute.size(), 1u);
  std::set<int64_t> loader = threads_of(copied, "load_weight");
  loader.erase(*copied_compute.begin());
  EXPECT_EQ(loader.size(), 1u);
}

TEST(TaskTimeline, ClearingKeepsOnlyTheRunsThatFollow) {
  TempDir dir("timeline");
  const TracedRun run = traced_run(dir, /*overlap=*/true, /*runs=*/2);
  const int64_t layers = tiny_opt().layers + 2;
  EXPECT_EQ(static_cast<int64_t>(run.spans.at("compute").size()), kTokens * layers * kBatches);
}

// Runs wherever a GPU is (the GPU host's ctest): each task's time is its stream's, the
// trace has the same steps and order as on the CPU.
TEST(TaskTimeline, OnCudaTasksAreTimedOnTheirStreams) {
  if (!runtime::cuda_available()) GTEST_SKIP() << "no CUDA device";
  TempDir dir("timeline");
  const TracedRun run = traced_run(dir, /*overlap=*/true, 1, "cuda");
  const int64_t layers = tiny_opt().layers + 2;
  std::set<Triple> steps;
  for (const json& c : run.spans.at("compute")) EXPECT_TRUE(steps.insert(step_of(c)).second) << c.dump();
  EXPECT_EQ(static_cast<int64_t>(steps.size()), kTokens * layers * kBatches);
  EXPECT_GT(run.compute_seconds, 0);
  EXPECT_EQ(run.trace["otherData"]["clock"], "device stream times (CUDA events), on the host clock");
  for (const auto& [task, spans] : run.spans) {
    for (const json& s : spans) EXPECT_GE(s["dur"].get<double>(), 0) << s.dump();
  }
}

TEST(TaskTimeline, NoTimelineOnTheCpuUnlessATraceIsKept) {
  static const TinyModel model = make_tiny_model(tiny_opt());
  TempDir dir("timeline");
  const auto requests = greedy_requests({{1, 2, 3}}, {2});
  runtime::Engine engine(model.spec, *model.weights, make_policy(1, 1, {100, 0, 100, 0, 100, 0}, false),
                         cpu_engine_options(dir.path), workload_of(requests));
  engine.generate(requests);
  EXPECT_EQ(engine.stats().timeline(), nullptr);
  EXPECT_FALSE(engine.stats().device_timed());
}

TEST(TaskTimeline, AnUnwritableTracePathIsAnErrorNamingIt) {
  runtime::TaskTimeline timeline(runtime::make_device_context("cpu", "float32", false), true);
  const std::string path = "/nonexistent-tiergen-dir/trace.json";
  EXPECT_NE(error_of([&] { timeline.write_chrome_trace(path); }).find(path + ".partial"), std::string::npos);
}

// ---- Through the CLI, and tools/trace-summary.py on what it wrote.

class TraceCli : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = shared_tiny_model("trace-opt", {"--arch", "opt", "--tokenizer", kTokenizer, "--seed", "5"});
  }
  Exit tiergen(const std::vector<std::string>& args) {
    std::vector<std::string> all = {kTiergen};
    all.insert(all.end(), args.begin(), args.end());
    Child child(all, dir_.path);
    return child.wait();
  }
  Exit python(const std::vector<std::string>& args) {
    std::vector<std::string> all = {"/usr/bin/env", "python3", TIERGEN_TEST_FIXTURES "/../../tools/trace-summary.py"};
    all.insert(all.end(), args.begin(), args.end());
    Child child(all, dir_.path);
    return child.wait();
  }
  TempDir dir_{"trace-cli"};
  fs::path model_;
};

TEST_F(TraceCli, GenerateWritesATraceTheSummaryToolReads) {
  const std::string trace = dir_.path + "/run.trace.json", out = dir_.path + "/out.jsonl";
  // Three prompts in blocks of two: the third takes the first batch slot once the
  // first two are done, in passes 5-9 of the one run.
  const Exit run = tiergen({"generate", "-m", model_.string(), "--device", "cpu", "--prompt", "the cat sat",
                            "--prompt", "on a mat", "--prompt", "and slept", "-n", "5", "--ignore-eos", "--percent", "0", "100", "0", "100", "100", "0",
                            "--cpu-attention", "--gpu-batch-size", "1", "--num-gpu-batches", "2", "--offload-dir",
                            dir_.path + "/offload", "-o", out, "--trace", trace});
  ASSERT_EQ(run.code, 0) << run.describe();
  EXPECT_NE(run.err.find("trace of every task: " + trace), std::string::npos) << run.err;
  EXPECT_FALSE(fs::exists(trace + ".partial"));
  const Exit check = python({trace, "--check"});
  ASSERT_EQ(check.code, 0) << check.describe() << check.out;
  EXPECT_NE(check.out.find("invariants hold"), std::string::npos) << check.out;
  const std::string table_json = dir_.path + "/token.json";
  const Exit summary = python({trace, "--block", "0", "--token", "7", "--json", table_json});
  ASSERT_EQ(summary.code, 0) << summary.describe();
  EXPECT_NE(summary.out.find("token 7 of"), std::string::npos) << summary.out;
  const json table = json::parse(read_file(table_json));
  EXPECT_EQ(table["block"], 0);
  EXPECT_EQ(table["token"], 7);
  EXPECT_GT(table["totals_us"]["compute"].get<double>(), 0);
  EXPECT_GT(table["totals_us"]["cpu_attention"].get<double>(), 0);
  EXPECT_EQ(table["layers"].size(), static_cast<size_t>(2 + 2));  // make-tiny-model's 2 layers, embedding, head
}

// --cpu-attention-batches: each gpu batch's median decode CPU attention, failing when
// one batch's is far above another's (on the H200, a batch whose small copies queued
// behind the next layer's weights took 21.9 ms against 4.1).
TEST_F(TraceCli, CpuAttentionBatchesFailsWhenOneBatchWaitsFarLonger) {
  const auto attention = [](double ts, double dur, int token, int batch) {
    return fmt::format(R"({{"name":"cpu_attention","ph":"X","ts":{},"dur":{},"args":{{"block":0,"token":{},"layer":1,"batch":{}}}}})",
                       ts, dur, token, batch);
  };
  const auto write_trace = [&](const std::string& name, double batch1_us) {
    const std::string trace = dir_.path + "/" + name + ".json";
    std::string events = attention(0, 90000, 0, 0) + "," + attention(100000, 90000, 0, 1);  // the prefill's: not counted
    for (int token = 1; token <= 3; ++token) {
      events += "," + attention(token * 200000, 4100, token, 0) + "," + attention(token * 200000 + 50000, batch1_us, token, 1);
    }
    write_file(trace, "{\"traceEvents\":[" + events + "]}");
    return trace;
  };
  const Exit stalled = python({write_trace("stalled", 21900), "--cpu-attention-batches", "2"});
  EXPECT_EQ(stalled.code, 1) << stalled.describe();
  EXPECT_NE(stalled.out.find("gpu batch 1: median cpu attention 21.900 ms over 3 decode steps"), std::string::npos)
      << stalled.out;
  EXPECT_NE(stalled.err.find("gpu batch 1's CPU attention takes 5.3x batch 0's"), std::string::npos) << stalled.err;

  const Exit even = python({write_trace("even", 5000), "--cpu-attention-batches", "2"});
  EXPECT_EQ(even.code, 0) << even.describe();
  EXPECT_NE(even.out.find("slowest / fastest: 1.22x"), std::string::npos) << even.out;

  const std::string none = dir_.path + "/none.json";
  write_file(none, R"({"traceEvents":[{"name":"compute","ph":"X","ts":0,"dur":1,"args":{"block":0,"token":1,"layer":1,"batch":0}}]})");
  const Exit without = python({none, "--cpu-attention-batches", "2"});
  EXPECT_EQ(without.code, 1) << without.describe();
  EXPECT_NE(without.err.find("no decode CPU attention spans"), std::string::npos) << without.err;
}

TEST_F(TraceCli, ATracePathInAMissingDirectoryIsRefusedBeforeTheRun) {
  const Exit run = tiergen({"generate", "-m", model_.string(), "--device", "cpu", "--prompt", "hi", "-n", "2", "-o",
                            dir_.path + "/out.jsonl", "--trace", "/nonexistent-tiergen-dir/t.json"});
  EXPECT_TRUE(run.clean_failure()) << run.describe();
  EXPECT_NE(run.err.find("--trace /nonexistent-tiergen-dir/t.json"), std::string::npos) << run.err;
  EXPECT_FALSE(fs::exists(dir_.path + "/out.jsonl"));
}

TEST_F(TraceCli, SummaryCheckFailsOnABrokenTrace) {
  const auto check_says = [&](const std::string& name, const std::string& events) {
    const std::string trace = dir_.path + "/" + name + ".json";
    write_file(trace, "{\"traceEvents\":[" + events + "]}");
    const Exit check = python({trace, "--check"});
    EXPECT_EQ(check.code, 1) << name << ": " << check.describe();
    return check.err;
  };
  const auto span = [](const char* task, double ts, int token, int layer) {
    return fmt::format(R"({{"name":"{}","ph":"X","ts":{},"dur":10,"args":{{"block":0,"token":{},"layer":{},"batch":0}}}})",
                       task, ts, token, layer);
  };
  // Two compute steps at once.
  EXPECT_NE(check_says("overlap", span("compute", 0, 0, 0) + "," + span("compute", 5, 0, 1)).find("starts before"),
            std::string::npos);
  // A decode token that skips a layer the prefill computed.
  EXPECT_NE(check_says("missing", span("compute", 0, 0, 0) + "," + span("compute", 10, 0, 1) + "," +
                                      span("compute", 20, 1, 0))
                .find("misses the compute of layers [1]"),
            std::string::npos);
  // CPU attention outside its step.
  EXPECT_NE(check_says("attention", span("compute", 0, 0, 0) + "," + span("cpu_attention", 50, 0, 0))
                .find("outside its compute step"),
            std::string::npos);
}

}  // namespace
}  // namespace tiergen::test
