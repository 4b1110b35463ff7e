// The engine's compute thread count: the policy's count when it has one, else
// OMP_NUM_THREADS when the user set it, else every core the process may run on
// (LibTorch's own default can be 1 on virtual machines, which left decode on one core);
// and the copy queues' threads compute on themselves alone.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <omp.h>
#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "tests/support/temp_dir.h"
#include "tests/support/tiny_model.h"
#include "tiergen/runtime/emulated_stream.h"
#include "tiergen/runtime/engine.h"
#include "tiergen/runtime/worker.h"

namespace tiergen::test {
namespace {

int affinity_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  return CPU_COUNT(&set);
}

// Restores OMP_NUM_THREADS and LibTorch's thread count after a test.
class ThreadState {
 public:
  ThreadState() : threads_(at::get_num_threads()) {
    if (const char* env = std::getenv("OMP_NUM_THREADS")) env_ = env;
  }
  ~ThreadState() {
    if (env_) setenv("OMP_NUM_THREADS", env_->c_str(), 1);
    else unsetenv("OMP_NUM_THREADS");
    at::set_num_threads(threads_);
  }

 private:
  int threads_;
  std::optional<std::string> env_;
};

int threads_after_engine(const runtime::Policy& policy) {
  static const TinyModel model = make_tiny_model(tiny_llama());
  TempDir offload("offload");
  const std::vector<runtime::SequenceRequest> requests = greedy_requests({{1, 2, 3}}, {2});
  runtime::Engine engine(model.spec, *model.weights, policy, cpu_engine_options(offload.path), workload_of(requests));
  return at::get_num_threads();
}

const runtime::Policy kAllGpu = make_policy(1, 1, {100, 0, 100, 0, 100, 0}, false);

TEST(EngineThreads, EveryUsableCoreWhenNothingSaysOtherwise) {
  ThreadState restore;
  unsetenv("OMP_NUM_THREADS");
  at::set_num_threads(1);
  EXPECT_EQ(threads_after_engine(kAllGpu), affinity_cores());
}

TEST(EngineThreads, ThePolicysCountWins) {
  ThreadState restore;
  unsetenv("OMP_NUM_THREADS");
  runtime::Policy p = kAllGpu;
  p.threads.compute_intra_op = 1;
  at::set_num_threads(affinity_cores());
  EXPECT_EQ(threads_after_engine(p), 1);
}

TEST(EngineThreads, OmpNumThreadsIsLeftToLibTorch) {
  ThreadState restore;
  setenv("OMP_NUM_THREADS", "1", 1);
  at::set_num_threads(1);
  EXPECT_EQ(threads_after_engine(kAllGpu), 1);
}

// The thread count LibTorch (and OpenMP code such as the dummy weights) sees while
// the weights are read for placement.
class ThreadCountingWeights final : public model::WeightSource {
 public:
  explicit ThreadCountingWeights(const model::WeightSource& inner) : inner_(inner) {}
  at::Tensor read(const model::TensorSpec& tensor, at::ScalarType dtype) const override {
    const int threads = at::get_num_threads();
    int seen = fewest_.load();
    while (threads < seen && !fewest_.compare_exchange_weak(seen, threads)) {
    }
    return inner_.read(tensor, dtype);
  }
  std::string describe() const override { return "thread-counting " + inner_.describe(); }
  int fewest() const { return fewest_.load(); }

 private:
  const model::WeightSource& inner_;
  mutable std::atomic<int> fewest_{1 << 30};
};

TEST(EngineThreads, WeightsArePlacedOnEveryCoreWhateverThePolicyComputesOn) {
  if (affinity_cores() < 2) GTEST_SKIP() << "one usable core: nothing to tell apart";
  ThreadState restore;
  unsetenv("OMP_NUM_THREADS");
  static const TinyModel model = make_tiny_model(tiny_llama());
  ThreadCountingWeights weights(*model.weights);
  runtime::Policy one_thread = kAllGpu;
  one_thread.threads.compute_intra_op = 1;
  TempDir offload("offload");
  const std::vector<runtime::SequenceRequest> requests = greedy_requests({{1, 2, 3}}, {2});
  at::set_num_threads(1);  // as a previous engine of this process may have left it
  runtime::Engine engine(model.spec, weights, one_thread, cpu_engine_options(offload.path), workload_of(requests));
  EXPECT_EQ(weights.fewest(), affinity_cores());
  EXPECT_EQ(at::get_num_threads(), 1);  // the run computes on the policy's count
}

// The threads LibTorch's parallel_for runs a large loop on, from the calling thread.
std::set<std::thread::id> threads_of_a_parallel_loop() {
  std::mutex mutex;
  std::set<std::thread::id> ids;
  at::parallel_for(0, 1 << 16, 1, [&](int64_t, int64_t) {
    std::lock_guard<std::mutex> lock(mutex);
    ids.insert(std::this_thread::get_id());
  });
  return ids;
}

// The copy queues (runtime/worker.h, and the emulated streams) open no OpenMP teams of
// their own: libgomp counts every team's threads, and past the cores it makes every
// thread, the compute team's included, sleep after 100 pauses of waiting instead of
// about 300000, so the compute team slept and woke between products (decode 1.04-1.34x
// faster without).
TEST(CopyQueueThreads, AWorkersParallelLoopsRunOnItsOwnThread) {
  if (affinity_cores() < 2) GTEST_SKIP() << "one usable core: every loop is serial";
  ThreadState restore;
  unsetenv("OMP_NUM_THREADS");
  at::set_num_threads(affinity_cores());  // the count a new thread of LibTorch starts with
  runtime::Worker worker(true);
  std::thread::id worker_thread;
  int kernel_threads = 0;  // what the CPU kernels' own parallel regions would use
  const std::set<std::thread::id> on_worker = worker.submit([&] {
    worker_thread = std::this_thread::get_id();
    kernel_threads = omp_get_max_threads();
    return threads_of_a_parallel_loop();
  }).get();
  EXPECT_EQ(on_worker, std::set<std::thread::id>{worker_thread});
  EXPECT_EQ(kernel_threads, 1);
  // The compute thread keeps its team.
  EXPECT_EQ(at::get_num_threads(), affinity_cores());
  EXPECT_EQ(static_cast<int>(threads_of_a_parallel_loop().size()), affinity_cores());
}

TEST(CopyQueueThreads, AnEmulatedStreamsParallelLoopsRunOnItsOwnThread) {
  if (affinity_cores() < 2) GTEST_SKIP() << "one usable core: every loop is serial";
  ThreadState restore;
  unsetenv("OMP_NUM_THREADS");
  at::set_num_threads(affinity_cores());  // the count a new thread of LibTorch starts with
  std::promise<std::pair<std::thread::id, std::set<std::thread::id>>> seen;  // outlives the stream's thread
  runtime::EmulatedStream stream(runtime::AsyncEmulation{});
  stream.enqueue([&] { seen.set_value({std::this_thread::get_id(), threads_of_a_parallel_loop()}); });
  const auto [stream_thread, on_stream] = seen.get_future().get();
  EXPECT_EQ(on_stream, std::set<std::thread::id>{stream_thread});
}

}  // namespace
}  // namespace tiergen::test
