#include "tiergen/runtime/emulated_stream.h"

#include <atomic>

#include "tiergen/common/compute_threads.h"

namespace tiergen::runtime {

void EmulatedEvent::complete(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    error_ = std::move(error);
  }
  changed_.notify_all();
}

void EmulatedEvent::wait() const {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool EmulatedEvent::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

namespace {

thread_local std::unique_ptr<EmulatedStream> this_thread_stream;

std::atomic<int64_t> unfinished{0};  // EmulatedStream::unfinished_items()

// Streams of one process draw different delays from the same seed.
uint64_t next_stream_seed(uint64_t seed) {
  static std::atomic<uint64_t> streams{0};
  return seed * 0x9E3779B97F4A7C15ull + streams.fetch_add(1);
}

}  // namespace

EmulatedStream::EmulatedStream(const AsyncEmulation& config)
    : max_delay_us_(std::max(0, config.max_delay_us)), random_(next_stream_seed(config.seed)) {
  thread_ = std::thread([this] {
    compute_serially_on_this_thread();  // a copy engine: no OpenMP threads of its own
    run();
  });
}

EmulatedStream::~EmulatedStream() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

EmulatedStream* EmulatedStream::current() { return this_thread_stream.get(); }

int64_t EmulatedStream::unfinished_items() { return unfinished.load(); }

void EmulatedStream::make_current(const AsyncEmulation& config) {
  if (!this_thread_stream) this_thread_stream = std::make_unique<EmulatedStream>(config);
}

void EmulatedStream::push(std::function<void()> op, bool delayed, bool marker) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto delay = std::chrono::microseconds(
        delayed && max_delay_us_ > 0 ? static_cast<int64_t>(random_() % static_cast<uint64_t>(max_delay_us_ + 1)) : 0);
    items_.push_back({std::chrono::steady_clock::now() + delay, std::move(op), marker});
    unfinished.fetch_add(1);
  }
  changed_.notify_all();
}

void EmulatedStream::enqueue(std::function<void()> op) { push(std::move(op), /*delayed=*/true, /*marker=*/false); }

std::shared_ptr<EmulatedEvent> EmulatedStream::record() {
  auto event = std::make_shared<EmulatedEvent>();
  // Completes with the stream's first failure, so a waiter learns of it.
  push([this, event] { event->complete(error_); }, /*delayed=*/false, /*marker=*/true);
  return event;
}

void EmulatedStream::wait_for(std::shared_ptr<const EmulatedEvent> event) {
  if (!event || event->done()) return;
  // A failed wait (the other stream failed) fails this stream too.
  push([event] { event->wait(); }, /*delayed=*/false, /*marker=*/false);
}

void EmulatedStream::synchronize() {
  record()->wait();
}

void EmulatedStream::run() {
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return stopping_ || !items_.empty(); });
      if (items_.empty()) return;
      item = std::move(items_.front());
      items_.pop_front();
    }
    std::this_thread::sleep_until(item.not_before);
    // After a failure the stream only completes events, as a CUDA stream with a
    // sticky error refuses further work.
    // An event is counted done before it completes: its waiters may look at once.
    if (item.marker) unfinished.fetch_sub(1);
    if (!error_ || item.marker) {
      try {
        item.op();
      } catch (...) {
        error_ = std::current_exception();
      }
    }
    if (!item.marker) unfinished.fetch_sub(1);
  }
}

}  // namespace tiergen::runtime
