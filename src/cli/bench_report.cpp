#include "src/cli/bench_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace tiergen::cli {

using runtime::Task;

const std::array<Task, kNumBenchTasks> kBenchTasks = {Task::LoadWeight,  Task::LoadCache, Task::StoreCache,
                                                      Task::LoadHidden,  Task::StoreHidden, Task::Compute,
                                                      Task::CpuAttention, Task::Sample};

BenchSizes bench_sizes(const model::Spec& spec, int64_t num_prompts, int64_t prompt_len, int64_t gen_len,
                       int dtype_bytes) {
  const auto bytes = static_cast<uint64_t>(dtype_bytes);
  const auto tokens = static_cast<uint64_t>(num_prompts) * static_cast<uint64_t>(prompt_len + gen_len);
  BenchSizes s;
  s.model_bytes = static_cast<uint64_t>(spec.total_params()) * bytes;
  s.cache_bytes = tokens * static_cast<uint64_t>(spec.num_layers) *
                  static_cast<uint64_t>(spec.kv_elements_per_token_per_layer()) * bytes;
  s.hidden_bytes = tokens * static_cast<uint64_t>(spec.hidden_size) * bytes;
  return s;
}

StatsSnapshot StatsSnapshot::of(const runtime::Stats& stats) {
  StatsSnapshot s;
  s.prefill_seconds = stats.prefill_seconds;
  s.decode_seconds = stats.decode_seconds;
  s.sequences = stats.sequences;
  s.prompt_tokens = stats.prompt_tokens;
  s.generated_tokens = stats.generated_tokens;
  s.decode_tokens = stats.decode_tokens;
  for (int t = 0; t < kNumBenchTasks; ++t) {
    s.prefill_task[t] = stats.seconds(kBenchTasks[t], true);
    s.decode_task[t] = stats.seconds(kBenchTasks[t], false);
  }
  return s;
}

StatsSnapshot StatsSnapshot::operator-(const StatsSnapshot& e) const {
  StatsSnapshot d;
  d.prefill_seconds = prefill_seconds - e.prefill_seconds;
  d.decode_seconds = decode_seconds - e.decode_seconds;
  d.sequences = sequences - e.sequences;
  d.prompt_tokens = prompt_tokens - e.prompt_tokens;
  d.generated_tokens = generated_tokens - e.generated_tokens;
  d.decode_tokens = decode_tokens - e.decode_tokens;
  for (int t = 0; t < kNumBenchTasks; ++t) {
    d.prefill_task[t] = prefill_task[t] - e.prefill_task[t];
    d.decode_task[t] = decode_task[t] - e.decode_task[t];
  }
  return d;
}

StatsSnapshot& StatsSnapshot::operator+=(const StatsSnapshot& o) {
  prefill_seconds += o.prefill_seconds;
  decode_seconds += o.decode_seconds;
  sequences += o.sequences;
  prompt_tokens += o.prompt_tokens;
  generated_tokens += o.generated_tokens;
  decode_tokens += o.decode_tokens;
  for (int t = 0; t < kNumBenchTasks; ++t) {
    prefill_task[t] += o.prefill_task[t];
    decode_task[t] += o.decode_task[t];
  }
  return *this;
}

StatsSnapshot StatsSnapshot::projected(int64_t num_prompts, int64_t run_len, int64_t gen_len) const {
  StatsSnapshot p = *this;
  const double scale = static_cast<double>(gen_len - 1) / static_cast<double>(run_len - 1);
  p.decode_seconds *= scale;
  for (double& t : p.decode_task) t *= scale;
  p.generated_tokens = num_prompts * gen_len;
  p.decode_tokens = num_prompts * (gen_len - 1);
  return p;
}

void StatsSnapshot::fill(runtime::Stats& stats) const {
  stats.prefill_seconds = prefill_seconds;
  stats.decode_seconds = decode_seconds;
  stats.sequences = sequences;
  stats.prompt_tokens = prompt_tokens;
  stats.generated_tokens = generated_tokens;
  stats.decode_tokens = decode_tokens;
  for (int t = 0; t < kNumBenchTasks; ++t) {
    stats.add(kBenchTasks[t], true, prefill_task[t]);
    stats.add(kBenchTasks[t], false, decode_task[t]);
  }
}

nlohmann::json StatsSnapshot::to_json() const {
  nlohmann::json tasks = nlohmann::json::object();
  for (int t = 0; t < kNumBenchTasks; ++t) {
    tasks[runtime::task_name(kBenchTasks[t])] = {{"prefill", prefill_task[t]}, {"decode", decode_task[t]}};
  }
  return {{"sequences", sequences},
          {"prompt_tokens", prompt_tokens},
          {"generated_tokens", generated_tokens},
          {"prefill_latency_s", prefill_seconds},
          {"decode_latency_s", decode_seconds},
          {"total_latency_s", total_seconds()},
          {"prefill_throughput", prefill_throughput()},
          {"decode_throughput", decode_throughput()},
          {"total_throughput", total_throughput()},
          {"task_seconds", tasks}};
}

Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.min = v.front();
  s.max = v.back();
  s.median = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(n);
  if (n > 1) {
    double sq = 0;
    for (double x : v) sq += (x - s.mean) * (x - s.mean);
    s.sd = std::sqrt(sq / static_cast<double>(n - 1));
  }
  return s;
}

namespace {

template <typename F>
Summary summarize_by(const std::vector<StatsSnapshot>& runs, F metric) {
  std::vector<double> values;
  for (const auto& r : runs) values.push_back(metric(r));
  return summarize(std::move(values));
}

nlohmann::json summary_json(const Summary& s) {
  return {{"mean", s.mean}, {"sd", s.sd}, {"median", s.median}, {"min", s.min}, {"max", s.max}};
}

constexpr double kGB = 1024.0 * 1024.0 * 1024.0;  // FlexGen's GB

}  // namespace

MetricSummaries MetricSummaries::of(const std::vector<StatsSnapshot>& runs) {
  MetricSummaries m;
  m.prefill_latency = summarize_by(runs, [](const StatsSnapshot& r) { return r.prefill_seconds; });
  m.prefill_throughput = summarize_by(runs, [](const StatsSnapshot& r) { return r.prefill_throughput(); });
  m.decode_latency = summarize_by(runs, [](const StatsSnapshot& r) { return r.decode_seconds; });
  m.decode_throughput = summarize_by(runs, [](const StatsSnapshot& r) { return r.decode_throughput(); });
  m.total_latency = summarize_by(runs, [](const StatsSnapshot& r) { return r.total_seconds(); });
  m.total_throughput = summarize_by(runs, [](const StatsSnapshot& r) { return r.total_throughput(); });
  return m;
}

nlohmann::json MetricSummaries::to_json() const {
  return {{"prefill_latency_s", summary_json(prefill_latency)},   {"prefill_throughput", summary_json(prefill_throughput)},
          {"decode_latency_s", summary_json(decode_latency)},     {"decode_throughput", summary_json(decode_throughput)},
          {"total_latency_s", summary_json(total_latency)},       {"total_throughput", summary_json(total_throughput)}};
}

std::string flexgen_report(const BenchSizes& sizes, uint64_t peak_gpu_bytes, const MetricSummaries& m,
                           bool projected) {
  return fmt::format(
      "model size: {:.3f} GB\tcache size: {:.3f} GB\thidden size (p): {:.3f} GB\n"
      "peak gpu mem: {:.3f} GB\tprojected: {}\n"
      "prefill latency: {:.3f} s\tprefill throughput: {:.3f} token/s\n"
      "decode latency: {:.3f} s\tdecode throughput: {:.3f} token/s\n"
      "total latency: {:.3f} s\ttotal throughput: {:.3f} token/s\n",
      sizes.model_bytes / kGB, sizes.cache_bytes / kGB, sizes.hidden_bytes / kGB, peak_gpu_bytes / kGB,
      projected ? "True" : "False", m.prefill_latency.median, m.prefill_throughput.median, m.decode_latency.median, m.decode_throughput.median,
      m.total_latency.median, m.total_throughput.median);
}

std::string repetition_report(const MetricSummaries& m, size_t repetitions) {
  std::string out = fmt::format("over {} measured run{} (mean ± sd, median, min–max):\n", repetitions,
                                repetitions == 1 ? "" : "s");
  const std::pair<const char*, const Summary*> rows[] = {
      {"prefill latency s", &m.prefill_latency}, {"prefill tok/s", &m.prefill_throughput},
      {"decode latency s", &m.decode_latency},   {"decode tok/s", &m.decode_throughput},
      {"total latency s", &m.total_latency},     {"total tok/s", &m.total_throughput}};
  for (const auto& [name, s] : rows) {
    out += fmt::format("  {:<18} {:>12.3f} ± {:<10.3f} median {:>12.3f}  {:.3f}–{:.3f}\n", name, s->mean, s->sd,
                       s->median, s->min, s->max);
  }
  return out;
}

const std::vector<std::string> kBenchColumns = {
    "model", "device", "dtype", "prompt_len", "gen_len", "num_prompts", "gpu_batch_size", "num_gpu_batches",
    "policy", "exact", "repetitions", "prefill_latency_s", "prefill_throughput", "decode_latency_s",
    "decode_throughput", "total_latency_s", "total_throughput", "total_throughput_mean", "total_throughput_sd",
    "peak_gpu_bytes", "peak_cpu_bytes", "peak_disk_bytes", "model_size_bytes", "cache_size_bytes",
    "hidden_size_bytes"};

namespace {

// A column's value in the record (some are nested or renamed there), or null.
nlohmann::json bench_column(const nlohmann::json& r, const std::string& column) {
  const auto at = [&](std::initializer_list<const char*> path) {
    const nlohmann::json* v = &r;
    for (const char* key : path) {
      if (!v->is_object() || !v->contains(key)) return nlohmann::json();
      v = &(*v)[key];
    }
    return *v;
  };
  if (column == "policy") return at({"policy_description"});
  if (column == "total_throughput_mean") return at({"summary", "total_throughput", "mean"});
  if (column == "total_throughput_sd") return at({"summary", "total_throughput", "sd"});
  if (column == "peak_gpu_bytes") return at({"peak_bytes", "gpu"});
  if (column == "peak_cpu_bytes") return at({"peak_bytes", "cpu"});
  if (column == "peak_disk_bytes") return at({"peak_bytes", "disk"});
  return r.is_object() && r.contains(column) ? r[column] : nlohmann::json();
}

std::string plain_cell(const nlohmann::json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return fmt::format("{:.6g}", v.get<double>());
  return v.dump();
}

// RFC 4180: a field with a comma, quote or line break is quoted, quotes doubled.
std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
  return out;
}

}  // namespace

std::string format_bench_record(const nlohmann::json& record, const std::string& format) {
  if (format == "json") return record.dump(2) + "\n";
  std::string header, separator, row;
  for (size_t i = 0; i < kBenchColumns.size(); ++i) {
    const std::string value = plain_cell(bench_column(record, kBenchColumns[i]));
    if (format == "csv") {
      header += (i ? "," : "") + kBenchColumns[i];
      row += (i ? "," : "") + csv_cell(value);
    } else {
      header += "| " + kBenchColumns[i] + " ";
      separator += "|---";
      row += "| " + md_cell(value) + " ";
    }
  }
  if (format == "csv") return header + "\n" + row + "\n";
  if (format == "md") return header + "|\n" + separator + "|\n" + row + "|\n";
  throw std::invalid_argument("bench report format '" + format + "': expected json, csv or md");
}

}  // namespace tiergen::cli
