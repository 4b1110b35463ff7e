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

AbortPipelineOnFailure::~AbortPipelineOnFailure() {
  if (link && std::uncaught_exceptions() > uncaught) {
    link->abort(fmt::format("rank {} failed; its log says why", link->rank()));
  }
}

}  // namespace tiergen::cli
