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

class Stats {
 public:
  void add(Task task, bool prefill, double seconds);
  double seconds(Task task, bool prefill) const;

  // One (layer, gpu batch) compute step over `rows` rows. Finished sequences and
  // padding rows leave decode steps (live_rows.h), and a gpu batch with no live row
  // skips its steps, so these count the work actually done, not the padded block.
  // A prefill step also counts the (row, position) pairs it computes: each group of
  // similar prompts runs over its own longest one (block_compute.cpp), not the block's.
  void count_compute_step(bool prefill, int64_t rows, int64_t prefill_row_positions = 0);
  int64_t compute_steps(bool prefill) const;
  int64_t computed_rows(bool prefill) const;
  int64_t prefill_positions() const;  // (row, position) pairs over all prefill steps

  // FlexGen's definitions over all blocks: prefill = N*s / t_prefill,
  // decode = N*(n-1) / t_decode, total = N*n / (t_prefill + t_decode).
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t sequences = 0;        // N (padding rows of a partial block excluded)
  int64_t prompt_tokens = 0;    // sum of padded prompt lengths (N*s)
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

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<Task, bool>, double> task_seconds_;
  std::array<int64_t, 2> compute_steps_{}, computed_rows_{};  // [decode, prefill]
  int64_t prefill_positions_ = 0;
};

// Adds the lifetime of the scope to a task's time.
class ScopedTimer {
 public:
  ScopedTimer(Stats& stats, Task task, bool prefill)
      : stats_(stats), task_(task), prefill_(prefill), start_(std::chrono::steady_clock::now()) {}
  ~ScopedTimer() {
    stats_.add(task_, prefill_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }

 private:
  Stats& stats_;
  Task task_;
  bool prefill_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tiergen::runtime
