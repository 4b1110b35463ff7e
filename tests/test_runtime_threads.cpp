// The engine's compute thread count: the policy's count when it has one, else
// OMP_NUM_THREADS when the user set it, else every core the process may run on
// (LibTorch's own default can be 1 on virtual machines, which left decode on one core).
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>

#include "tests/support/temp_dir.h"
#include "tests/support/tiny_model.h"
#include "tiergen/runtime/engine.h"

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

}  // namespace
}  // namespace tiergen::test
