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
};

// The dry run's table: placement, batches, compression, attention, threads,
// predicted throughput, per-task times and peak memory per tier.
std::string format_report(const SearchResult& result, const ReportContext& context);

// {"policy": <policy_to_json>, "predicted": {..., "peak_memory": {...}}, "model": name,
//  "workload": {"prompt_len", "gen_len"}, "budgets": {"gpu", "cpu", "disk"} (bytes),
//  "hardware_profile": path}. `generate` and `bench` read the "policy" part.
nlohmann::json report_json(const SearchResult& result, const ReportContext& context);

}  // namespace tiergen::policy
