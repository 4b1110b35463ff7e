#pragma once
// Human-readable and JSON renderings of a search result, shared by `tiergen policy`
// and anyone printing predictions beside measurements.
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "policy/search.h"

namespace tiergen::policy {

struct ReportContext {
  const model::Spec* spec = nullptr;
  runtime::Workload workload;
  runtime::Budgets budgets;
  const HardwareProfile* hw = nullptr;
  int dtype_bytes = 2;  // compute dtype the sizes were planned for
};

// The dry run's report: first what will happen (whether the output is exact, the
// bytes each tier holds under the runtime's own placement, batches, compression,
// attention, threads), then predicted throughput and per-task times, then the
// policy's percentages beside the LP's fractional answer as secondary detail.
std::string format_report(const SearchResult& result, const ReportContext& context);

// {"policy": <policy_to_json>, "predicted": {..., "peak_memory": {...}}, "model": name,
//  "workload": {"prompt_len", "gen_len", "num_sequences"}, "exact": bool, "budgets": {"gpu", "cpu", "disk"} (bytes),
//  "hardware_profile": path}. `generate` and `bench` read the "policy" part.
nlohmann::json report_json(const SearchResult& result, const ReportContext& context);
// {"name", "band"}: the policy's plan class and its error band (plan_class.h).
nlohmann::json plan_class_json(const runtime::Policy& policy);

}  // namespace tiergen::policy
