#include "tiergen/runtime/worker.h"

#include "tiergen/common/compute_threads.h"

namespace tiergen::runtime {

Worker::Worker(bool threaded, std::function<void()> on_start) : threaded_(threaded) {
  if (threaded_) {
    thread_ = std::thread([this, on_start = std::move(on_start)] {
      // A copy engine beside the compute, one thread: its copies and, on a host standing
      // in for the GPU, the KV cache's (de)quantization run serially, as the profile
      // times them (policy/profiler.cpp), and add no OpenMP threads.
      compute_serially_on_this_thread();
      if (on_start) on_start();
      run();
    });
  }
}

Worker::~Worker() {
  if (!threaded_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  thread_.join();
}

void Worker::enqueue(std::function<void()> job) {
  if (!threaded_) {
    job();  // packaged_task stores any exception in its future
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  ready_.notify_one();
}

void Worker::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace tiergen::runtime
