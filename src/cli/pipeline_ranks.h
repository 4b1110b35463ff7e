#pragma once
// What every command run as a pipeline of ranks (generate, bench) does alike: check
// that the ranks were given the same job before any work, and end the others at once
// when one fails.
#include <exception>
#include <nlohmann/json.hpp>
#include <string>

#include "tiergen/model/spec.h"
#include "tiergen/runtime/policy.h"
#include "tiergen/runtime/stage_link.h"

namespace tiergen::cli {

// Every rank of a pipeline must agree on `what` (the job, the block shape): ranks
// that disagree would mismatch at their first message, or hang until the timeout.
// Each publishes its view; each compares the others' with its own, naming the field.
void check_ranks_agree(runtime::StageLink& link, const std::string& topic, const nlohmann::ordered_json& what);

// Hidden states pass gpu batch by gpu batch: every stage must run the same block shape.
void check_ranks_agree_on_block_shape(runtime::StageLink& link, const runtime::Policy& policy);

// The model as the ranks of a job (and a results file's job record) identify it: by its
// shape, not by its path, which may differ from host to host.
std::string model_shape(const model::Spec& spec);

// `trace` for this process: on a pipeline, each rank traces its own stage to
// TRACE.rankR.
std::string rank_trace_path(const std::string& trace, const runtime::StageLink* link);

// A pipeline rank that fails tells the others, who may be waiting on the job's store
// (the job record, the block shape, where a resumed job starts), so they end now
// rather than at --dist-timeout. No-op without a link.
struct AbortPipelineOnFailure {
  runtime::StageLink* link = nullptr;
  int uncaught = std::uncaught_exceptions();
  ~AbortPipelineOnFailure();
};

}  // namespace tiergen::cli
