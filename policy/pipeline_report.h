#pragma once
// `tiergen policy --stages N`: each stage's slice, policy and bytes, the block shape
// they share, and the pipeline's predicted throughput beside one process's.
#include <optional>
#include <string>

#include "policy/pipeline.h"
#include "policy/report.h"

namespace tiergen::policy {

// `single`: the one-process plan with the same budgets, when one fits.
std::string format_pipeline_report(const PipelinePlan& plan, const ReportContext& context,
                                   const std::optional<SearchResult>& single);

}  // namespace tiergen::policy
