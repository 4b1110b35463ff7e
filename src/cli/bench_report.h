#pragma once
// What `tiergen bench` measures and prints: FlexGen's report lines (model, cache and
// hidden sizes, peak gpu memory, prefill/decode/total latency and throughput) for the
// median of the measured repetitions, mean ± sd over them, and the same as one JSON
// record for scripts (bench/run_suite.sh, bench/plot.py, bench/compare/compare.py).
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tiergen/model/spec.h"
#include "tiergen/runtime/stats.h"

namespace tiergen::cli {

// Sizes as FlexGen's flex_opt.py computes them (opt_config.py), with the run's dtype:
// model = parameters × bytes; cache = N·(s+n)·L·2·kv_dim × bytes; hidden =
// N·(s+n)·h × bytes (FlexGen labels it "hidden size (p)" but sizes it for s+n).
struct BenchSizes {
  uint64_t model_bytes = 0, cache_bytes = 0, hidden_bytes = 0;
};
BenchSizes bench_sizes(const model::Spec& spec, int64_t num_prompts, int64_t prompt_len, int64_t gen_len,
                       int dtype_bytes);

// The runtime's tasks, in report order.
constexpr int kNumBenchTasks = 8;
extern const std::array<runtime::Task, kNumBenchTasks> kBenchTasks;

// Everything Stats accumulates, copied at one moment; the difference of two is one run.
struct StatsSnapshot {
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t sequences = 0, prompt_tokens = 0, generated_tokens = 0, decode_tokens = 0;
  std::array<double, kNumBenchTasks> prefill_task{}, decode_task{};

  static StatsSnapshot of(const runtime::Stats& stats);
  StatsSnapshot operator-(const StatsSnapshot& earlier) const;
  StatsSnapshot& operator+=(const StatsSnapshot& other);
  // FlexGen's definitions (see Stats).
  double prefill_throughput() const { return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0; }
  double decode_throughput() const { return decode_seconds > 0 ? decode_tokens / decode_seconds : 0; }
  double total_seconds() const { return prefill_seconds + decode_seconds; }
  double total_throughput() const { return total_seconds() > 0 ? generated_tokens / total_seconds() : 0; }
  // FlexGen's --cut-gen-len: a run of `run_len` tokens per sequence projected to
  // `gen_len` by scaling its decode time and decode task times by (gen_len - 1) /
  // (run_len - 1), the mean decode step times the steps of the full run; the token
  // counts become those of the full run. Needs run_len >= 2.
  StatsSnapshot projected(int64_t num_prompts, int64_t run_len, int64_t gen_len) const;
  // Writes the counters and task times into a fresh Stats (for predicted_vs_measured).
  void fill(runtime::Stats& stats) const;
  nlohmann::json to_json() const;
};

struct Summary {
  double mean = 0, sd = 0, median = 0, min = 0, max = 0;  // sd: sample standard deviation
};
Summary summarize(std::vector<double> values);

// The six FlexGen metrics, in report order.
struct MetricSummaries {
  Summary prefill_latency, prefill_throughput, decode_latency, decode_throughput, total_latency, total_throughput;
  static MetricSummaries of(const std::vector<StatsSnapshot>& runs);
  nlohmann::json to_json() const;
};

// FlexGen's write_benchmark_log lines (tab-separated pairs), GB = 2^30 bytes, for the
// median of each metric over the runs; `projected` as FlexGen reports --cut-gen-len runs.
std::string flexgen_report(const BenchSizes& sizes, uint64_t peak_gpu_bytes, const MetricSummaries& m,
                           bool projected = false);
// "mean ± sd (median, min–max)" per metric over `repetitions` runs.
std::string repetition_report(const MetricSummaries& m, size_t repetitions);

// `tiergen bench --format`: the JSON record (`--json`) as "json" (the record itself),
// "csv" (a header line and one row of kBenchColumns) or "md" (a markdown table of the
// same columns, one row). Missing fields are empty cells.
extern const std::vector<std::string> kBenchColumns;
std::string format_bench_record(const nlohmann::json& record, const std::string& format);

}  // namespace tiergen::cli
