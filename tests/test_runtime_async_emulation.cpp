// Async stream emulation (emulated_stream.h): queued work runs later and in order on
// the stream's own thread, events complete when their stream reaches them, and a
// stream told to wait on another's event holds its later work until then. With it,
// the block schedule's ordering is checked on the CPU: dropping the wait a reader of
// a stored hidden state owes its writer's stream gives wrong tokens.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "tests/support/tiny_model.h"
#include "tiergen/runtime/device_event.h"
#include "tiergen/runtime/emulated_stream.h"
#include "tiergen/runtime/engine.h"
#include "tiergen/runtime/worker.h"

namespace tiergen::test {
namespace {

runtime::AsyncEmulation config(int max_delay_us) {
  runtime::AsyncEmulation c;
  c.seed = 7;
  c.max_delay_us = max_delay_us;
  return c;
}

TEST(EmulatedStream, RunsQueuedWorkLaterAndInOrder) {
  runtime::EmulatedStream stream(config(2000));
  std::vector<int> order;
  std::mutex mutex;
  for (int i = 0; i < 20; ++i) {
    stream.enqueue([&, i] {
      std::lock_guard<std::mutex> lock(mutex);
      order.push_back(i);
    });
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    EXPECT_LT(order.size(), 20u);  // not all done at once: the first items are delayed
  }
  stream.synchronize();
  std::vector<int> expected(20);
  for (int i = 0; i < 20; ++i) expected[static_cast<size_t>(i)] = i;
  EXPECT_EQ(order, expected);
}

TEST(EmulatedStream, EventCompletesWhenTheStreamReachesIt) {
  runtime::EmulatedStream stream(config(0));
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<bool> ran{false};
  stream.enqueue([gate] { gate.wait(); });
  stream.enqueue([&] { ran = true; });
  auto event = stream.record();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(event->done());
  release.set_value();
  event->wait();
  EXPECT_TRUE(ran.load());
}

TEST(EmulatedStream, WaitForHoldsLaterWorkUntilTheOtherStreamsEvent) {
  runtime::EmulatedStream writer(config(0)), reader(config(0));
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<int> value{0};
  writer.enqueue([gate, &value] {
    gate.wait();
    value = 42;
  });
  auto written = writer.record();
  reader.wait_for(written);
  std::atomic<int> seen{-1};
  reader.enqueue([&] { seen = value.load(); });
  auto read = reader.record();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(read->done());  // the reader's work waits although its host went on
  release.set_value();
  read->wait();
  EXPECT_EQ(seen.load(), 42);
}

TEST(EmulatedStream, AFailureReachesTheNextEventAndLaterWorkIsSkipped) {
  runtime::EmulatedStream stream(config(0));
  std::atomic<bool> later_ran{false};
  stream.enqueue([] { throw Error("copy failed"); });
  stream.enqueue([&] { later_ran = true; });
  auto event = stream.record();
  EXPECT_THROW(event->wait(), Error);
  EXPECT_FALSE(later_ran.load());
}

// DeviceEvent and DeviceContext on worker threads that have emulated streams: a copy
// queued by one worker is invisible to another until it waits on the copy's event.
TEST(EmulatedStream, DeviceCopiesAreOrderedOnlyByEvents) {
  runtime::DeviceContext device = runtime::make_device_context("cpu", "float32", false);
  device.emulation = emulated_streams(3, 5000);
  auto give_stream = [device] { device.use_own_stream(); };
  runtime::Worker writer(true, give_stream), reader(true, give_stream);
  const at::Tensor home = at::zeros({1024});
  const at::Tensor source = at::ones({1024});
  // The writer queues the copy and records an event behind it.
  runtime::DeviceEvent written = writer.submit([&] {
    device.copy(home, source);
    return runtime::DeviceEvent::record(device);
  }).get();
  // The reader's stream waits on it before its own copy; its host does not.
  const at::Tensor out = at::full({1024}, -1.0);
  runtime::DeviceEvent read = reader.submit([&] {
    written.make_current_stream_wait(device);
    device.copy(out, home);
    return runtime::DeviceEvent::record(device);
  }).get();
  read.make_current_stream_wait(device);  // this thread has no stream: waits on the host
  EXPECT_TRUE(at::equal(out, source));
}

// The ordering fault the schedule once had (review finding B1): with activations on
// the gpu tier, a reader of the stored hidden state waited for the store task on the
// host, not for its copy on the storer's stream. Emulation makes it visible.
struct FaultCase {
  const char* name;
  int64_t gbs, ngb;
  std::array<double, 6> percent;
};

class HiddenStoreOrder : public ::testing::TestWithParam<FaultCase> {};

TEST_P(HiddenStoreOrder, EmulationCatchesAReaderThatSkipsTheStoreEvent) {
  const FaultCase& c = GetParam();
  const TinyModel model = make_tiny_model(tiny_llama(61));
  const auto prompts = make_prompts({9, 4, 12, 7, 3, 10, 6, 11}, model.spec.vocab_size, 5);
  const auto requests = greedy_requests(prompts, {6});
  const auto layers = load_all_layers(model.spec, *model.weights);
  std::vector<std::vector<int64_t>> expected;
  for (const auto& r : requests) expected.push_back(greedy_reference(model.spec, layers, r.prompt, r.max_new_tokens));

  TempDir offload("offload");
  const runtime::Policy policy = make_policy(c.gbs, c.ngb, c.percent, false);
  runtime::EngineOptions options = cpu_engine_options(offload.path);
  options.device.emulation = emulated_streams(11, 3000);

  // With the store event waited on: correct under emulation.
  EXPECT_EQ(engine_tokens(model.spec, *model.weights, policy, options, requests), expected);

  // Without it: the emulated store copies land after the reads.
  options.faults.skip_hidden_store_wait = true;
  EXPECT_NE(engine_tokens(model.spec, *model.weights, policy, options, requests), expected);

  // And without emulation the fault is invisible (every copy is done at once), which
  // is why CI needs the emulation to see it.
  options.device.emulation = nullptr;
  EXPECT_EQ(engine_tokens(model.spec, *model.weights, policy, options, requests), expected);
}

// A pass that fails midway leaves no copy queued on any stream: the homes and staging
// buffers those copies use are freed as the engine unwinds (unregistered and unmapped
// on a GPU host), so the runner waits for every stream before the error leaves it.
TEST(FailedPass, EveryStreamIsSettledBeforeTheErrorLeavesTheRunner) {
  const TinyModel model = make_tiny_model(tiny_llama(62));
  const auto requests = greedy_requests(make_prompts({9, 4, 12, 7}, model.spec.vocab_size, 5), {6});
  TempDir offload("offload");
  // Everything on the cpu tier, two gpu batches: every step's loader queues the next
  // batch's copies before the step computes.
  const runtime::Policy policy = make_policy(2, 2, {0, 100, 0, 100, 0, 100}, true);
  runtime::EngineOptions options = cpu_engine_options(offload.path);
  options.faults.fail_compute_at_layer = 2;
  // Which copies are still queued at the failure depends on the threads' timing: a few
  // runs with different delays (a runner that only drained its workers' host queues
  // left copies queued in 13 of 17 single runs, and in each of 6 runs of this loop).
  for (uint64_t seed : {13, 14, 15}) {
    options.device.emulation = emulated_streams(seed, 100000);  // copies land up to 100 ms late
    runtime::Engine engine(model.spec, *model.weights, policy, options, workload_of(requests));
    EXPECT_THROW(engine.generate(requests), Error);
    EXPECT_EQ(runtime::EmulatedStream::unfinished_items(), 0) << "seed " << seed;
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, HiddenStoreOrder,
                         ::testing::Values(FaultCase{"one_gpu_batch_activations_gpu", 4, 1, {100, 0, 100, 0, 100, 0}},
                                           FaultCase{"two_gpu_batches_activations_gpu_cpu", 2, 2, {100, 0, 100, 0, 50, 50}}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tiergen::test
