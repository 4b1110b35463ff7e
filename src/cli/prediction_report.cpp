#include "src/cli/prediction_report.h"

#include <fmt/format.h>

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

// Whole-run seconds of a task from the model's per-layer time.
double predicted_total(const policy::PhaseTimes& phase, policy::Task task, double layer_runs) {
  return phase.tasks[static_cast<int>(task)] * layer_runs;
}

double ratio(double measured, double predicted) { return predicted > 0 ? measured / predicted : 0.0; }

}  // namespace

std::string predicted_vs_measured(const policy::Prediction& p, const runtime::Stats& m, const PredictionScale& s) {
  const double prefill_runs = static_cast<double>(s.num_layers * s.blocks);
  const double decode_runs = prefill_runs * static_cast<double>(std::max<int64_t>(0, s.gen_len - 1));
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
                       predicted_total(p.prefill, pair.predicted, prefill_runs), m.seconds(pair.measured, true),
                       predicted_total(p.decode, pair.predicted, decode_runs), m.seconds(pair.measured, false));
  }
  return out;
}

nlohmann::json predicted_vs_measured_json(const policy::Prediction& p, const runtime::Stats& m,
                                          const PredictionScale& s) {
  const double prefill_runs = static_cast<double>(s.num_layers * s.blocks);
  const double decode_runs = prefill_runs * static_cast<double>(std::max<int64_t>(0, s.gen_len - 1));
  nlohmann::json tasks = nlohmann::json::object();
  for (const auto& pair : kTaskPairs) {
    tasks[policy::task_name(pair.predicted)] = {
        {"predicted_prefill_s", predicted_total(p.prefill, pair.predicted, prefill_runs)},
        {"measured_prefill_s", m.seconds(pair.measured, true)},
        {"predicted_decode_s", predicted_total(p.decode, pair.predicted, decode_runs)},
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
