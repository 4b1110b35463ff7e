#include "src/cli/pipeline_ranks.h"

#include "tiergen/common/error.h"

namespace tiergen::cli {

void check_ranks_agree(runtime::StageLink& link, const std::string& topic, const nlohmann::ordered_json& what) {
  link.set(fmt::format("agree/{}/{}", topic, link.rank()), what.dump());
  for (int r = 0; r < link.world_size(); ++r) {
    if (r == link.rank()) continue;
    const auto other = nlohmann::ordered_json::parse(link.get(fmt::format("agree/{}/{}", topic, r)));
    for (const auto& [key, value] : what.items()) {
      TG_CHECK(other.contains(key) && other.at(key) == value, "rank {} and rank {} were given different jobs: {} is "
               "{} here and {} there; give every rank the same prompts and flags", link.rank(), r, key, value.dump(),
               other.contains(key) ? other.at(key).dump() : "absent");
    }
  }
}

void check_ranks_agree_on_block_shape(runtime::StageLink& link, const runtime::Policy& policy) {
  check_ranks_agree(link, "block_shape",
                    {{"gpu_batch_size", policy.gpu_batch_size}, {"num_gpu_batches", policy.num_gpu_batches}});
}

std::string model_shape(const model::Spec& spec) {
  return fmt::format("{} layers, hidden {}, vocab {}", spec.num_layers, spec.hidden_size, spec.vocab_size);
}

std::string rank_trace_path(const std::string& trace, const runtime::StageLink* link) {
  return link ? fmt::format("{}.rank{}", trace, link->rank()) : trace;
}

AbortPipelineOnFailure::~AbortPipelineOnFailure() {
  if (link && std::uncaught_exceptions() > uncaught) {
    link->abort(fmt::format("rank {} failed; its log says why", link->rank()));
  }
}

}  // namespace tiergen::cli
