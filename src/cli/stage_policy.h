#pragma once
// `--policy auto` on a pipeline rank: the search for this rank's stage alone
// (policy::search_stage), with the block shape every stage must share taken from the
// rank of the heaviest stage, which searches first and publishes it in the job's store.
#include "policy/pipeline.h"
#include "tiergen/runtime/stage_link.h"

namespace tiergen::cli {

policy::SearchResult search_this_stage(const model::Spec& spec, const runtime::Workload& workload,
                                       const runtime::Budgets& budgets, const policy::HardwareProfile& hw,
                                       const policy::SearchOptions& options, runtime::StageLink& link);

}  // namespace tiergen::cli
