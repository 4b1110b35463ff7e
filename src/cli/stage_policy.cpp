#include "src/cli/stage_policy.h"

#include <spdlog/spdlog.h>

#include <sstream>

#include "tiergen/common/error.h"

namespace tiergen::cli {

namespace {

constexpr const char* kShapeKey = "block_shape";

policy::BlockShape parse_shape(const std::string& text, int heaviest_rank) {
  TG_CHECK(text.rfind("error: ", 0) != 0, "rank {} (the stage that chooses the block shape) could not plan: {}",
           heaviest_rank, text.substr(7));
  std::istringstream in(text);
  policy::BlockShape shape;
  in >> shape.gpu_batch_size >> shape.num_gpu_batches;
  TG_CHECK(!in.fail() && shape.gpu_batch_size > 0 && shape.num_gpu_batches > 0,
           "internal: block shape '{}' from rank {}", text, heaviest_rank);
  return shape;
}

}  // namespace

policy::SearchResult search_this_stage(const model::Spec& spec, const runtime::Workload& workload,
                                       const runtime::Budgets& budgets, const policy::HardwareProfile& hw,
                                       const policy::SearchOptions& options, runtime::StageLink& link) {
  const auto stages = runtime::split_stages(spec, link.world_size());
  const auto me = static_cast<size_t>(link.rank());
  const size_t heaviest = policy::heaviest_stage(spec, stages);
  if (me != heaviest) {
    const policy::BlockShape shape = parse_shape(link.get(kShapeKey), static_cast<int>(heaviest));
    spdlog::info("block shape {} x {} from rank {} (the stage with the most weights)", shape.gpu_batch_size,
                 shape.num_gpu_batches, heaviest);
    return policy::search_stage(spec, stages, me, workload, budgets, hw, options, shape);
  }
  policy::SearchResult result;
  try {
    result = policy::search_stage(spec, stages, me, workload, budgets, hw, options, std::nullopt);
  } catch (const std::exception& e) {
    link.set(kShapeKey, std::string("error: ") + e.what());  // the others stop waiting for it
    throw;
  }
  link.set(kShapeKey, fmt::format("{} {}", result.policy.gpu_batch_size, result.policy.num_gpu_batches));
  return result;
}

}  // namespace tiergen::cli
