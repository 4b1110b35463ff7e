#pragma once
// A stand-in for a CUDA stream: one thread running submitted tasks in order. With
// overlap off, tasks run inline on the caller, so the same schedule code serves both.
// In CUDA builds each worker issues its copies on a stream of its own; a task's
// future means "queued", and the event it returns (device_event.h) "data ready".
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

namespace tiergen::runtime {

class Worker {
 public:
  // `on_start` runs first on the worker's thread (e.g. to give it a CUDA stream).
  explicit Worker(bool threaded, std::function<void()> on_start = {});
  ~Worker();  // runs what is queued, then joins
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  template <typename F>
  auto submit(F fn) -> std::shared_future<decltype(fn())> {
    using R = decltype(fn());
    auto task = std::make_shared<std::packaged_task<R()>>(std::move(fn));
    std::shared_future<R> future = task->get_future().share();
    enqueue([task] { (*task)(); });
    return future;
  }

 private:
  void enqueue(std::function<void()> job);
  void run();

  bool threaded_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tiergen::runtime
