#include "tiergen/runtime/stats.h"

#include <fmt/format.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "tiergen/common/bytes.h"
#include "tiergen/runtime/task_timeline.h"

namespace tiergen::runtime {

namespace {
constexpr Task kAllTasks[] = {Task::LoadWeight, Task::LoadCache,  Task::StoreCache,   Task::LoadHidden,
                              Task::StoreHidden, Task::Compute, Task::CpuAttention, Task::Sample,
                              Task::StageWait};
}

std::string task_name(Task task) {
  switch (task) {
    case Task::LoadWeight: return "load_weight";
    case Task::LoadCache: return "load_cache";
    case Task::StoreCache: return "store_cache";
    case Task::LoadHidden: return "load_hidden";
    case Task::StoreHidden: return "store_hidden";
    case Task::Compute: return "compute";
    case Task::CpuAttention: return "cpu_attention";
    case Task::Sample: return "sample";
    case Task::StageWait: return "stage_wait";
  }
  return "?";
}

void Stats::add(Task task, bool prefill, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  task_seconds_[{task, prefill}] += seconds;
}

void Stats::add_device(Task task, bool prefill, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  device_seconds_[{task, prefill}] += seconds;
}

double Stats::host_seconds(Task task, bool prefill) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = task_seconds_.find({task, prefill});
  return it == task_seconds_.end() ? 0.0 : it->second;
}

double Stats::seconds(Task task, bool prefill) const {
  if (!device_timed()) return host_seconds(task, prefill);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = device_seconds_.find({task, prefill});
  return it == device_seconds_.end() ? 0.0 : it->second;
}

void Stats::attach_timeline(TaskTimeline* timeline, bool device_timed) {
  timeline_ = timeline;
  device_timed_ = device_timed;
}

ScopedTimer::ScopedTimer(Stats& stats, Task task, bool prefill, const StepId& step)
    : stats_(stats), task_(task), prefill_(prefill), start_(std::chrono::steady_clock::now()) {
  if (TaskTimeline* timeline = stats_.timeline()) span_ = timeline->begin(task, prefill, step);
}

ScopedTimer::~ScopedTimer() {
  stats_.add(task_, prefill_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  // No throw from a destructor: a failed event record leaves the span open, and the
  // span's task fails on its own.
  try {
    if (span_ >= 0) stats_.timeline()->end(span_);
  } catch (...) {
  }
}

void Stats::count_compute_step(bool prefill, int64_t rows, int64_t prefill_row_positions) {
  std::lock_guard<std::mutex> lock(mutex_);
  compute_steps_[prefill ? 1 : 0] += 1;
  computed_rows_[prefill ? 1 : 0] += rows;
  if (prefill) prefill_positions_ += prefill_row_positions;
}

int64_t Stats::prefill_positions() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return prefill_positions_;
}

int64_t Stats::compute_steps(bool prefill) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return compute_steps_[prefill ? 1 : 0];
}

int64_t Stats::computed_rows(bool prefill) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return computed_rows_[prefill ? 1 : 0];
}

void Stats::absorb(const Stats& other) {
  if (&other == this) return;
  const bool other_device_timed = other.device_timed();
  std::scoped_lock lock(mutex_, other.mutex_);
  absorbed_device_times_ = absorbed_device_times_ || other_device_timed;
  for (const auto& [key, seconds] : other.task_seconds_) task_seconds_[key] += seconds;
  for (const auto& [key, seconds] : other.device_seconds_) device_seconds_[key] += seconds;
  for (int phase = 0; phase < 2; ++phase) {
    compute_steps_[phase] += other.compute_steps_[phase];
    computed_rows_[phase] += other.computed_rows_[phase];
  }
  prefill_positions_ += other.prefill_positions_;
  prefill_seconds += other.prefill_seconds;
  decode_seconds += other.decode_seconds;
  passes += other.passes;
  decode_passes += other.decode_passes;
  refilled_batches += other.refilled_batches;
  sequences += other.sequences;
  prompt_tokens += other.prompt_tokens;
  padded_prompt_tokens += other.padded_prompt_tokens;
  generated_tokens += other.generated_tokens;
  decode_tokens += other.decode_tokens;
  for (Tier tier : {Tier::Gpu, Tier::Cpu, Tier::Disk}) {
    peak_bytes[tier] = std::max(peak_bytes[tier], other.peak_bytes[tier]);
    budgets[tier] = std::max(budgets[tier], other.budgets[tier]);
  }
}

void Stats::clear_counts() {
  std::scoped_lock lock(mutex_);
  task_seconds_.clear();
  device_seconds_.clear();
  absorbed_device_times_ = false;
  compute_steps_ = {};
  computed_rows_ = {};
  prefill_positions_ = 0;
  prefill_seconds = decode_seconds = 0;
  passes = refilled_batches = decode_passes = 0;
  sequences = prompt_tokens = padded_prompt_tokens = generated_tokens = decode_tokens = 0;
}

std::string Stats::report() const {
  std::string out = fmt::format(
      "prefill latency: {:.3f} s  prefill throughput: {:.3f} token/s\n"
      "decode latency: {:.3f} s  decode throughput: {:.3f} token/s\n"
      "total latency: {:.3f} s  total throughput: {:.3f} token/s\n",
      prefill_seconds, prefill_throughput(), decode_seconds, decode_throughput(), prefill_seconds + decode_seconds,
      total_throughput());
  out += device_timed() ? "task times on the device streams (s, prefill / decode):" : "task times (s, prefill / decode):";
  for (Task t : kAllTasks) out += fmt::format(" {} {:.3f}/{:.3f}", task_name(t), seconds(t, true), seconds(t, false));
  if (device_timed()) {
    out += "\ntask times on the host, queueing included (s, prefill / decode):";
    for (Task t : kAllTasks) {
      out += fmt::format(" {} {:.3f}/{:.3f}", task_name(t), host_seconds(t, true), host_seconds(t, false));
    }
  }
  out += fmt::format("\ncompute steps (prefill / decode): {} / {} over {} / {} rows ({} prefill row-positions)",
                     compute_steps(true), compute_steps(false), computed_rows(true), computed_rows(false),
                     prefill_positions());
  out += fmt::format("\nschedule: {} passes, {} gpu batches refilled while others generated", passes, refilled_batches);
  out += fmt::format("\npeak memory: gpu {} of {}, cpu {} of {}, disk {} of {}", format_bytes(peak_bytes[Tier::Gpu]),
                     format_bytes(budgets[Tier::Gpu]), format_bytes(peak_bytes[Tier::Cpu]),
                     format_bytes(budgets[Tier::Cpu]), format_bytes(peak_bytes[Tier::Disk]),
                     format_bytes(budgets[Tier::Disk]));
  return out;
}

nlohmann::json Stats::to_json() const {
  nlohmann::json tasks = nlohmann::json::object(), host_tasks = nlohmann::json::object();
  for (Task t : kAllTasks) {
    tasks[task_name(t)] = {{"prefill", seconds(t, true)}, {"decode", seconds(t, false)}};
    host_tasks[task_name(t)] = {{"prefill", host_seconds(t, true)}, {"decode", host_seconds(t, false)}};
  }
  return {{"sequences", sequences},
          {"prompt_tokens", prompt_tokens},
          {"padded_prompt_tokens", padded_prompt_tokens},
          {"generated_tokens", generated_tokens},
          {"prefill_latency_s", prefill_seconds},
          {"decode_latency_s", decode_seconds},
          {"total_latency_s", prefill_seconds + decode_seconds},
          {"prefill_throughput", prefill_throughput()},
          {"decode_throughput", decode_throughput()},
          {"total_throughput", total_throughput()},
          {"task_seconds", tasks},
          {"task_seconds_timed_on", device_timed() ? "device" : "host"},
          {"host_task_seconds", host_tasks},
          {"compute_steps", {{"prefill", compute_steps(true)}, {"decode", compute_steps(false)}}},
          {"computed_rows", {{"prefill", computed_rows(true)}, {"decode", computed_rows(false)}}},
          {"prefill_positions", prefill_positions()},
          {"passes", passes},
          {"decode_passes", decode_passes},
          {"refilled_batches", refilled_batches},
          {"peak_bytes", {{"gpu", peak_bytes[Tier::Gpu]}, {"cpu", peak_bytes[Tier::Cpu]}, {"disk", peak_bytes[Tier::Disk]}}},
          {"budget_bytes", {{"gpu", budgets[Tier::Gpu]}, {"cpu", budgets[Tier::Cpu]}, {"disk", budgets[Tier::Disk]}}}};
}

}  // namespace tiergen::runtime
