#pragma once
// Per-task times and throughput as FlexGen reports them, plus peak bytes per tier.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "tiergen/runtime/placement.h"

namespace tiergen::runtime {

// StageWait: a pipeline stage waiting for the messages of another (stage_link.h).
enum class Task { LoadWeight, LoadCache, StoreCache, LoadHidden, StoreHidden, Compute, CpuAttention, Sample, StageWait };
std::string task_name(Task task);

// Which step of the schedule a task belongs to (-1: not known or not applicable):
// the token, the weight layer (0 the embedding), the gpu batch, and the block (the
// timeline numbers the blocks of a run as they start).
struct StepId {
  int64_t token = -1, layer = -1, batch = -1, block = -1;
};

class TaskTimeline;  // task_timeline.h

class Stats {
 public:
  // Host time: how long the calling thread spent in the task. On CUDA, a task that
  // queues copies returns before they run, so its host time is the queueing only.
  void add(Task task, bool prefill, double seconds);
  double host_seconds(Task task, bool prefill) const;
  // Device time: how long the task's work ran on its stream (task_timeline.h).
  void add_device(Task task, bool prefill, double seconds);
  // The task's time: its device time where tasks are timed on a device, else its host time.
  double seconds(Task task, bool prefill) const;
  bool device_timed() const { return (timeline_ != nullptr && device_timed_) || absorbed_device_times_; }

  // Task timers (ScopedTimer) also open spans on this timeline; null: host times only.
  void attach_timeline(TaskTimeline* timeline, bool device_timed);
  TaskTimeline* timeline() const { return timeline_; }

  // One (layer, gpu batch) compute step over `rows` rows. Finished sequences and
  // padding rows leave decode steps (live_rows.h), and a gpu batch with no live row
  // skips its steps, so these count the work actually done, not the padded block.
  // A prefill step also counts the (row, position) pairs it computes: each group of
  // similar prompts runs over its own longest one (block_compute.cpp), not the block's.
  void count_compute_step(bool prefill, int64_t rows, int64_t prefill_row_positions = 0);
  int64_t compute_steps(bool prefill) const;
  int64_t computed_rows(bool prefill) const;
  int64_t prefill_positions() const;  // (row, position) pairs over all prefill steps

  // FlexGen's definitions over all blocks, with s each sequence's own prompt length
  // (the tokens asked for, as a user counts them): prefill = sum of s / t_prefill,
  // decode = N*(n-1) / t_decode, total = N*n / (t_prefill + t_decode).
  // A pass that prefills refilled gpu batches beside other batches' decode tokens
  // counts as prefill time (block_runner.h).
  double prefill_seconds = 0, decode_seconds = 0;
  // Passes of the schedule (each running gpu batch's next token; each loads the
  // stage's weights once), and gpu batches that took new sequences while other
  // batches of their run still generated (RunFeed::refill_each_batch).
  int64_t passes = 0, refilled_batches = 0;
  int64_t decode_passes = 0;    // passes with no prefill in them
  int64_t sequences = 0;        // N (padding rows of a partial block excluded)
  int64_t prompt_tokens = 0;    // sum of the sequences' own prompt lengths
  int64_t padded_prompt_tokens = 0;  // the same, each padded to its gpu batch's longest
  int64_t generated_tokens = 0; // tokens generated for real sequences
  int64_t decode_tokens = 0;    // generated tokens after the first of each sequence
  TierBytes peak_bytes;
  TierBytes budgets;

  double prefill_throughput() const { return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0; }
  double decode_throughput() const { return decode_seconds > 0 ? decode_tokens / decode_seconds : 0; }
  double total_throughput() const {
    const double t = prefill_seconds + decode_seconds;
    return t > 0 ? generated_tokens / t : 0;
  }
  std::string report() const;
  nlohmann::json to_json() const;
  // Adds `other`'s times and counts to this one's (peaks: the larger), so that a job
  // run by two engines one after the other reports as one (a re-planned job). A Stats
  // that absorbs device-timed tasks reports device times (absorb into a fresh Stats).
  void absorb(const Stats& other);
  // Forgets the times and counts so far; the peaks, budgets and timeline stay.
  void clear_counts();

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<Task, bool>, double> task_seconds_, device_seconds_;
  TaskTimeline* timeline_ = nullptr;
  bool device_timed_ = false;
  bool absorbed_device_times_ = false;  // absorb() took device-timed tasks
  std::array<int64_t, 2> compute_steps_{}, computed_rows_{};  // [decode, prefill]
  int64_t prefill_positions_ = 0;
};

// Adds the lifetime of the scope to a task's host time, and brackets the work the
// scope queues on this thread's stream with a span of the stats' timeline, if any.
class ScopedTimer {
 public:
  ScopedTimer(Stats& stats, Task task, bool prefill, const StepId& step = {});
  ~ScopedTimer();
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  Stats& stats_;
  Task task_;
  bool prefill_;
  int64_t span_ = -1;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tiergen::runtime
