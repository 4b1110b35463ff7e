#include "policy/rounding.h"

#include <algorithm>
#include <cmath>

namespace tiergen::policy {

namespace {

using runtime::Tier;

// Rounds a (gpu, cpu, disk) fraction triple to whole percentages summing to 100.
void round_triple(double gpu, double cpu, double& gpu_percent, double& cpu_percent) {
  const double gpu_end = std::round(gpu * 100);
  const double cpu_end = std::min(100.0, std::round((gpu + cpu) * 100));
  gpu_percent = std::clamp(gpu_end, 0.0, 100.0);
  cpu_percent = std::max(0.0, cpu_end - gpu_percent);
}

// Midpoints (percent of the layer) of the decoder layer's tensors, as FlexGen's
// placement rule sees them.
std::vector<double> midpoints(const model::WeightLayer& layer) {
  std::vector<double> mids;
  const double total = double(layer.numel());
  double cumulative = 0;
  for (const auto& t : layer.tensors) {
    cumulative += double(t.numel());
    mids.push_back((cumulative - double(t.numel()) / 2) / total * 100.0);
  }
  return mids;
}

// Moves the lowest tensor of tier `from` (gpu or cpu) one tier down by the smallest
// whole-percent change that changes the decoder layer's placement.
bool step_weights(const ModelSizes& sizes, Tier from, runtime::Policy& p) {
  double& from_percent = from == Tier::Gpu ? p.w_gpu_percent : p.w_cpu_percent;
  if (from_percent <= 0) return false;
  const auto homes = runtime::place_layer_weights(sizes.decoder_layer(), p);
  const auto mids = midpoints(sizes.decoder_layer());
  double lowest = -1;
  for (size_t i = 0; i < mids.size(); ++i) {
    if (homes[i] == from && (lowest < 0 || mids[i] < lowest)) lowest = mids[i];
  }
  // The boundary below `from` must pass the tensor's midpoint.
  const double boundary = from == Tier::Gpu ? 100 - p.w_gpu_percent : p.w_disk_percent();
  const double step = lowest < 0 ? 1.0 : std::max(1.0, std::floor(lowest) + 1 - boundary);
  const double moved = std::min(step, from_percent);
  from_percent -= moved;
  if (from == Tier::Gpu) p.w_cpu_percent += moved;
  return true;
}

// Moves at least one unit (kv head of a sequence, or a sequence) one tier down.
bool step_units(double& from_percent, double* to_percent, int64_t units) {
  if (from_percent <= 0) return false;
  const double moved = std::min(from_percent, std::ceil(100.0 / double(units)));
  from_percent -= moved;
  if (to_percent != nullptr) *to_percent += moved;
  return true;
}

// One repair step for an over-full tier: move the largest movable contributor down.
bool relieve(const ModelSizes& sizes, const runtime::MemoryPlan& plan, Tier tier, runtime::Policy& p) {
  if (tier == Tier::Disk) return false;
  const bool gpu = tier == Tier::Gpu;
  struct Option { uint64_t bytes; int kind; };
  Option options[] = {{plan.weights[tier], 0}, {plan.kv_cache[tier], 1}, {plan.activations[tier], 2}};
  std::sort(std::begin(options), std::end(options), [](auto& a, auto& b) { return a.bytes > b.bytes; });
  for (const auto& o : options) {
    if (o.bytes == 0) continue;
    bool moved = false;
    if (o.kind == 0) moved = step_weights(sizes, tier, p);
    const int64_t kv_units = p.gpu_batch_size * sizes.num_kv_heads();
    if (o.kind == 1) moved = step_units(gpu ? p.cache_gpu_percent : p.cache_cpu_percent,
                                        gpu ? &p.cache_cpu_percent : nullptr, kv_units);
    if (o.kind == 2) moved = step_units(gpu ? p.act_gpu_percent : p.act_cpu_percent,
                                        gpu ? &p.act_cpu_percent : nullptr, p.gpu_batch_size);
    if (moved) return true;
  }
  return false;
}

std::optional<Tier> first_over(const runtime::MemoryPlan& plan, const runtime::Budgets& budgets) {
  const auto total = plan.total();
  for (Tier t : {Tier::Gpu, Tier::Cpu, Tier::Disk}) {
    if (total[t] > budgets.of(t)) return t;
  }
  return std::nullopt;
}

}  // namespace

std::optional<runtime::Policy> round_to_executable(const ModelSizes& sizes, const runtime::Policy& shape,
                                                   const Fractions& f, const runtime::Workload& workload,
                                                   const runtime::Budgets& budgets) {
  runtime::Policy p = shape;
  round_triple(f[kWg], f[kWc], p.w_gpu_percent, p.w_cpu_percent);
  round_triple(f[kCg], f[kCc], p.cache_gpu_percent, p.cache_cpu_percent);
  round_triple(f[kHg], f[kHc], p.act_gpu_percent, p.act_cpu_percent);
  constexpr int kMaxSteps = 400;
  for (int step = 0; step < kMaxSteps; ++step) {
    const auto plan = runtime::plan_memory(sizes.spec(), p, workload, sizes.dtype_bytes(), sizes.stage_shape());
    const auto over = first_over(plan, budgets);
    if (!over) return p;
    if (!relieve(sizes, plan, *over, p)) return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace tiergen::policy
