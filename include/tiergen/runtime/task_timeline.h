#pragma once
// Where each task's time went as the device saw it. On CUDA a task's host-side timer
// (ScopedTimer, stats.h) measures only how long queueing its copies took; its real
// duration is how long its work ran on its stream. Each timed task is therefore a
// span bracketed by a pair of timing CUDA events recorded on the calling thread's
// current stream (a loader's, the storer's or the compute stream). Spans are resolved
// once their end event has completed (at each token's end, and waited for at each
// block's end): their stream durations go into Stats as the tasks' device seconds,
// and, when a trace is kept, every span goes into a Chrome trace (chrome://tracing,
// Perfetto) with its token, layer and gpu batch.
//
// Device times are placed on the host clock through a base event per block: recorded
// on the compute stream and waited for when the block starts, so its host time is
// known; a span's start is then the base's host time plus the events' elapsed time.
//
// On the CPU (or under stream emulation) there is no device clock: spans carry their
// host times, Stats keeps only host seconds, and the trace shows host times.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tiergen/runtime/device.h"
#include "tiergen/runtime/stats.h"

namespace tiergen::runtime {

class TaskTimeline {
 public:
  // keep_trace: keep every resolved span for write_chrome_trace (memory grows with
  // the run: a few hundred bytes per span).
  TaskTimeline(const DeviceContext& device, bool keep_trace);
  ~TaskTimeline();
  TaskTimeline(const TaskTimeline&) = delete;
  TaskTimeline& operator=(const TaskTimeline&) = delete;

  // True when spans are timed by events on CUDA streams.
  bool on_device() const { return on_device_; }
  bool keeps_trace() const { return keep_trace_; }

  // A block starts: returns its number (StepId::block) and, on a device, sets a new
  // base for the spans that follow (the compute thread waits for its stream's queued
  // work to place the base on the host clock).
  int64_t mark_base();

  // Opens a span on the calling thread's current stream; `end` closes it there.
  int64_t begin(Task task, bool prefill, const StepId& step);
  void end(int64_t span);

  // Resolves the closed spans whose work has completed (all of them, waiting, when
  // `wait_all`), adding their device seconds to `stats` on a device.
  void collect(Stats& stats, bool wait_all);

  // Forgets the kept spans (bench keeps the last measured run only).
  void clear_trace();
  size_t traced_spans() const;
  // Writes the kept spans as Chrome trace JSON; throws naming the path if it cannot.
  void write_chrome_trace(const std::string& path) const;

 private:
  struct Span {
    Task task;
    bool prefill;
    StepId step;
    double host_start_us = 0, host_end_us = 0;      // host clock, from the timeline's origin
    double device_start_us = 0, device_end_us = 0;  // the same clock; host times off a device
    void* start_event = nullptr;  // cudaEvent_t, from the pool
    void* end_event = nullptr;
    size_t base = 0;  // the base its events are measured from
    int thread = 0;   // which host thread ran it, numbered as threads first open spans
  };
  struct Events;
  double host_now_us() const;
  bool resolve(Span& span, bool wait_all, Stats& stats);

  DeviceContext device_;
  bool keep_trace_;
  bool on_device_;
  std::unique_ptr<Events> events_;  // CUDA events: a pool, and the bases
  mutable std::mutex mutex_;
  int64_t next_id_ = 0;
  int64_t blocks_ = 0;
  std::map<int64_t, Span> open_;
  std::vector<Span> closed_;  // waiting for their events
  std::vector<Span> traced_;
  std::map<std::thread::id, int> threads_;  // host threads by the order they first opened a span
};

}  // namespace tiergen::runtime
