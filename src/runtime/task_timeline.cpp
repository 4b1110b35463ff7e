#include "tiergen/runtime/task_timeline.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tiergen/common/error.h"

#ifdef TIERGEN_WITH_CUDA
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace tiergen::runtime {

namespace {

std::chrono::steady_clock::time_point process_origin() {
  static const auto origin = std::chrono::steady_clock::now();
  return origin;
}

// One trace row per kind of work, in the order a reader scans them: what the compute
// stream does, what the CPU computes for it, and the three copy streams.
int track_of(Task task) {
  switch (task) {
    case Task::Compute:
    case Task::Sample: return 1;
    case Task::CpuAttention: return 2;
    case Task::LoadWeight: return 3;
    case Task::LoadCache:
    case Task::LoadHidden: return 4;
    case Task::StoreCache:
    case Task::StoreHidden: return 5;
    case Task::StageWait: return 6;
  }
  return 7;
}

const char* track_name(int track) {
  switch (track) {
    case 1: return "compute stream (compute, sample)";
    case 2: return "cpu attention";
    case 3: return "weight loader stream";
    case 4: return "cache/hidden loader stream";
    case 5: return "storer stream";
    case 6: return "pipeline waits";
  }
  return "other";
}

}  // namespace

// The CUDA side: a pool of timing events (creating one per span would cost more than
// recording it), and one base event per block with its host time.
struct TaskTimeline::Events {
#ifdef TIERGEN_WITH_CUDA
  explicit Events(c10::DeviceIndex index) : device(index) {}
  ~Events() {
    try {  // no throw from a destructor: after a device error the events are lost anyway
      c10::cuda::CUDAGuard guard(device);
      for (cudaEvent_t e : pool) cudaEventDestroy(e);
      for (const Base& b : bases) cudaEventDestroy(b.event);
    } catch (...) {
    }
  }

  cudaEvent_t acquire() {
    if (!pool.empty()) {
      cudaEvent_t e = pool.back();
      pool.pop_back();
      return e;
    }
    c10::cuda::CUDAGuard guard(device);
    cudaEvent_t e = nullptr;
    C10_CUDA_CHECK(cudaEventCreate(&e));  // timing enabled
    return e;
  }
  void release(cudaEvent_t e) { pool.push_back(e); }

  // Records `e` on the calling thread's current stream of the compute device (with
  // that device current: a thread that never chose one is on device 0).
  void record(cudaEvent_t e) const {
    c10::cuda::CUDAGuard guard(device);
    C10_CUDA_CHECK(cudaEventRecord(e, c10::cuda::getCurrentCUDAStream(device).stream()));
  }

  // Milliseconds from `from` to `to`; both complete.
  static double elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
    float ms = 0;
    C10_CUDA_CHECK(cudaEventElapsedTime(&ms, from, to));
    return ms;
  }

  struct Base {
    cudaEvent_t event;
    double host_us;
  };
  c10::DeviceIndex device;
  std::vector<cudaEvent_t> pool;
  std::vector<Base> bases;
#endif
};

TaskTimeline::TaskTimeline(const DeviceContext& device, bool keep_trace)
    : device_(device), keep_trace_(keep_trace), on_device_(device.is_cuda() && !device.emulation) {
  process_origin();
#ifdef TIERGEN_WITH_CUDA
  if (on_device_) {
    events_ = std::make_unique<Events>(device_.cuda_index());
    mark_base();
  }
#endif
}

TaskTimeline::~TaskTimeline() {
#ifdef TIERGEN_WITH_CUDA
  // Spans never resolved (a failed run) hand their events back to be destroyed.
  if (!events_) return;
  const auto give_back = [this](const Span& s) {
    for (void* e : {s.start_event, s.end_event}) {
      if (e) events_->release(static_cast<cudaEvent_t>(e));
    }
  };
  for (const auto& [id, span] : open_) give_back(span);
  for (const Span& span : closed_) give_back(span);
#endif
}

double TaskTimeline::host_now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - process_origin()).count();
}

int64_t TaskTimeline::mark_base() {
#ifdef TIERGEN_WITH_CUDA
  if (on_device_) {
    cudaEvent_t e = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      e = events_->acquire();
    }
    events_->record(e);
    C10_CUDA_CHECK(cudaEventSynchronize(e));
    const double now = host_now_us();
    std::lock_guard<std::mutex> lock(mutex_);
    events_->bases.push_back({e, now});
  }
#endif
  std::lock_guard<std::mutex> lock(mutex_);
  return blocks_++;
}

int64_t TaskTimeline::begin(Task task, bool prefill, const StepId& step) {
  Span span{task, prefill, step};
  span.host_start_us = host_now_us();
#ifdef TIERGEN_WITH_CUDA
  if (on_device_) {
    cudaEvent_t e = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      span.base = events_->bases.size() - 1;
      e = events_->acquire();
    }
    span.start_event = e;
    try {
      events_->record(e);  // outside the lock: the workers' spans do not queue on each other
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      events_->release(e);
      throw;
    }
  }
#endif
  std::lock_guard<std::mutex> lock(mutex_);
  // The thread a span ran on shows which of the schedule's queues ran its task
  // (runtime/block_schedule.h): the compute thread or one of the workers.
  span.thread = threads_.emplace(std::this_thread::get_id(), static_cast<int>(threads_.size())).first->second;
  const int64_t id = next_id_++;
  open_.emplace(id, span);
  return id;
}

void TaskTimeline::end(int64_t id) {
  const double now = host_now_us();
#ifdef TIERGEN_WITH_CUDA
  cudaEvent_t e = nullptr;
  if (on_device_) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      e = events_->acquire();
    }
    try {
      events_->record(e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      events_->release(e);
      throw;  // the span stays open; its events go back when the timeline does
    }
  }
#endif
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = open_.find(id);
  TG_CHECK(it != open_.end(), "internal: task span {} is not open", id);
  Span span = it->second;
  open_.erase(it);
  span.host_end_us = now;
#ifdef TIERGEN_WITH_CUDA
  span.end_event = e;
#endif
  closed_.push_back(span);
}

// Fills the span's device times once its events have completed; false while they
// have not (never when waiting). Called with the mutex held.
bool TaskTimeline::resolve(Span& span, bool wait_all, Stats& stats) {
  span.device_start_us = span.host_start_us;
  span.device_end_us = span.host_end_us;
#ifdef TIERGEN_WITH_CUDA
  if (on_device_) {
    auto* end = static_cast<cudaEvent_t>(span.end_event);
    auto* start = static_cast<cudaEvent_t>(span.start_event);
    if (wait_all) {
      C10_CUDA_CHECK(cudaEventSynchronize(end));
    } else {
      const cudaError_t status = cudaEventQuery(end);
      if (status == cudaErrorNotReady) {
        (void)cudaGetLastError();  // "not ready" is not an error: leave no sticky state
        return false;
      }
      C10_CUDA_CHECK(status);
    }
    // Both ends from the base: the float milliseconds round the same way for spans of
    // one stream, which keeps them in order (a start from its end's rounding would not).
    const Events::Base& base = events_->bases[span.base];
    span.device_start_us = base.host_us + 1000.0 * Events::elapsed_ms(base.event, start);
    span.device_end_us = base.host_us + 1000.0 * Events::elapsed_ms(base.event, end);
    stats.add_device(span.task, span.prefill, Events::elapsed_ms(start, end) / 1000.0);
    events_->release(start);
    events_->release(end);
    span.start_event = span.end_event = nullptr;
  }
#else
  (void)wait_all;
  (void)stats;
#endif
  return true;
}

void TaskTimeline::collect(Stats& stats, bool wait_all) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Span> waiting;
  size_t next = 0;
  try {
    for (; next < closed_.size(); ++next) {
      Span& span = closed_[next];
      if (!resolve(span, wait_all, stats)) {
        waiting.push_back(span);
      } else if (keep_trace_) {
        traced_.push_back(span);
      }
    }
  } catch (...) {
    // Resolved spans (their events given back) are not resolved again; the failing
    // one and those after it stay.
    waiting.insert(waiting.end(), closed_.begin() + static_cast<std::ptrdiff_t>(next), closed_.end());
    closed_ = std::move(waiting);
    throw;
  }
  closed_ = std::move(waiting);
}

void TaskTimeline::clear_trace() {
  std::lock_guard<std::mutex> lock(mutex_);
  traced_.clear();
}

size_t TaskTimeline::traced_spans() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return traced_.size();
}

void TaskTimeline::write_chrome_trace(const std::string& path) const {
  nlohmann::json events = nlohmann::json::array();
  for (int track = 1; track <= 6; ++track) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", track},
                      {"args", {{"name", track_name(track)}}}});
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 0}, {"tid", track},
                      {"args", {{"sort_index", track}}}});
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Span& s : traced_) {
      events.push_back({{"name", task_name(s.task)},
                        {"cat", s.prefill ? "prefill" : "decode"},
                        {"ph", "X"},
                        {"pid", 0},
                        {"tid", track_of(s.task)},
                        {"ts", s.device_start_us},
                        {"dur", s.device_end_us - s.device_start_us},
                        {"args",
                         {{"block", s.step.block},
                          {"token", s.step.token},
                          {"layer", s.step.layer},
                          {"batch", s.step.batch},
                          {"thread", s.thread},
                          {"host_start_us", s.host_start_us},
                          {"host_us", s.host_end_us - s.host_start_us}}}});
    }
  }
  const nlohmann::json trace = {
      {"traceEvents", events},
      {"displayTimeUnit", "ms"},
      {"otherData",
       {{"generator", "tiergen"},
        {"device", device_.compute.str()},
        {"clock", on_device_ ? "device stream times (CUDA events), on the host clock" : "host times"}}}};
  // Written aside and renamed: a trace that is there is whole.
  const std::string partial = path + ".partial";
  std::ofstream out(partial);
  TG_CHECK(out.good(), "cannot write the trace {}: {}", partial, std::strerror(errno));
  out << trace.dump() << "\n";
  out.close();
  TG_CHECK(out.good(), "writing the trace {} failed: {}", partial, std::strerror(errno));
  TG_CHECK(std::rename(partial.c_str(), path.c_str()) == 0, "cannot move the trace {} to {}: {}", partial, path,
           std::strerror(errno));
}

}  // namespace tiergen::runtime
