#include "src/cli/prediction_report.h"

#include <fmt/format.h>

#include <algorithm>

namespace tiergen::cli {

namespace {

struct TaskPair {
  policy::Task predicted;
  runtime::Task measured;
};

constexpr TaskPair kTaskPairs[] = {
    {policy::Task::WeightLoad, runtime::Task::LoadWeight},      {policy::Task::CacheLoad, runtime::Task::LoadCache},
    {policy::Task::CacheStore, runtime::Task::StoreCache},      {policy::Task::ActivationLoad, runtime::Task::LoadHidden},
    {policy::Task::ActivationStore, runtime::Task::StoreHidden}, {policy::Task::Compute, runtime::Task::Compute},
    {policy::Task::CpuAttention, runtime::Task::CpuAttention},
};

// Whole-run seconds of a task: the decoder layers' and the embedding's and head's, as
// the runtime's task times hold both.
double predicted_total(const policy::Prediction& p, policy::Task task, bool prefill, const PredictionScale& s) {
  const double blocks = static_cast<double>(s.blocks);
  const double steps = prefill ? blocks : blocks * static_cast<double>(std::max<int64_t>(0, s.gen_len - 1));
  return policy::task_seconds(p, task, prefill, s.num_layers, steps);
}

double ratio(double measured, double predicted) { return predicted > 0 ? measured / predicted : 0.0; }

}  // namespace

std::string predicted_vs_measured(const policy::Prediction& p, const runtime::Stats& m, const PredictionScale& s) {
  std::string out = "predicted vs measured (cost model vs this run):\n";
  out += fmt::format("  {:<16} {:>12} {:>12} {:>8}\n", "throughput", "predicted", "measured", "ratio");
  const std::pair<const char*, std::pair<double, double>> rows[] = {
      {"prefill tok/s", {p.prefill_throughput, m.prefill_throughput()}},
      {"decode tok/s", {p.decode_throughput, m.decode_throughput()}},
      {"total tok/s", {p.total_throughput, m.total_throughput()}}};
  for (const auto& [name, v] : rows) {
    out += fmt::format("  {:<16} {:>12.3f} {:>12.3f} {:>8.2f}\n", name, v.first, v.second, ratio(v.second, v.first));
  }
  out += fmt::format("  {:<16} {:>12} {:>12} {:>12} {:>12}\n", "task seconds", "pred prefill", "meas prefill",
                     "pred decode", "meas decode");
  for (const auto& pair : kTaskPairs) {
    out += fmt::format("  {:<16} {:>12.3f} {:>12.3f} {:>12.3f} {:>12.3f}\n", policy::task_name(pair.predicted),
                       predicted_total(p, pair.predicted, true, s), m.seconds(pair.measured, true),
                       predicted_total(p, pair.predicted, false, s), m.seconds(pair.measured, false));
  }
  return out;
}

nlohmann::json predicted_vs_measured_json(const policy::Prediction& p, const runtime::Stats& m,
                                          const PredictionScale& s) {
  nlohmann::json tasks = nlohmann::json::object();
  for (const auto& pair : kTaskPairs) {
    tasks[policy::task_name(pair.predicted)] = {
        {"predicted_prefill_s", predicted_total(p, pair.predicted, true, s)},
        {"measured_prefill_s", m.seconds(pair.measured, true)},
        {"predicted_decode_s", predicted_total(p, pair.predicted, false, s)},
        {"measured_decode_s", m.seconds(pair.measured, false)}};
  }
  return {{"throughput",
           {{"predicted", {{"prefill", p.prefill_throughput}, {"decode", p.decode_throughput}, {"total", p.total_throughput}}},
            {"measured", {{"prefill", m.prefill_throughput()}, {"decode", m.decode_throughput()}, {"total", m.total_throughput()}}}}},
          {"tasks", tasks}};
}

nlohmann::json measured_only_json(const runtime::Stats& m) {
  return {{"throughput",
           {{"predicted", nullptr},
            {"measured", {{"prefill", m.prefill_throughput()}, {"decode", m.decode_throughput()}, {"total", m.total_throughput()}}}}}};
}

}  // namespace tiergen::cli
