#pragma once
// Stream semantics on the CPU, for tests (TIERGEN_ASYNC_EMULATION=1). On a GPU, a copy
// queued on a stream happens later, in stream order; a reader on another stream sees
// it only after waiting on an event recorded behind it. On the CPU every copy happens
// at once, so a missing wait can never show. Here a worker's stream is a thread that
// runs its queued items in order, each no earlier than a random (seeded) delay after
// it was queued; an event completes when its stream reaches it; a stream told to wait
// on an event blocks there. Threads without an emulated stream (the compute thread)
// run their work at once and wait for events on the host.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "tiergen/runtime/device.h"

namespace tiergen::runtime {

// A point in an emulated stream: complete once the stream has run everything queued
// before it. Carries the first failure of that stream's work, if any.
class EmulatedEvent {
 public:
  void complete(std::exception_ptr error);
  void wait() const;  // blocks until complete; rethrows the stream's failure
  bool done() const;

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  bool done_ = false;
  std::exception_ptr error_;
};

class EmulatedStream {
 public:
  explicit EmulatedStream(const AsyncEmulation& config);
  ~EmulatedStream();  // runs what is queued, then joins
  EmulatedStream(const EmulatedStream&) = delete;
  EmulatedStream& operator=(const EmulatedStream&) = delete;

  void enqueue(std::function<void()> op);
  std::shared_ptr<EmulatedEvent> record();
  void wait_for(std::shared_ptr<const EmulatedEvent> event);  // the stream waits, the host goes on
  void synchronize();  // the host waits for everything queued so far

  // Items queued on any emulated stream and not yet run or skipped: what a test sees
  // of device work still in flight.
  static int64_t unfinished_items();

  // The calling thread's stream; null on threads that were given none.
  static EmulatedStream* current();
  // Gives the calling thread a stream for the rest of its life.
  static void make_current(const AsyncEmulation& config);

 private:
  struct Item {
    std::chrono::steady_clock::time_point not_before;
    std::function<void()> op;
    bool marker = false;  // an event: runs even after a failure
  };
  void push(std::function<void()> op, bool delayed, bool marker);
  void run();

  int max_delay_us_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Item> items_;
  std::mt19937_64 random_;
  std::exception_ptr error_;  // first failure; later items are skipped
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tiergen::runtime
