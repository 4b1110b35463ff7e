#include "policy/infeasible.h"

#include <fmt/format.h>

#include <algorithm>

#include "tiergen/common/bytes.h"

namespace tiergen::policy {

namespace {

using runtime::Tier;

// The least memory any policy the search may pick needs on the gpu and cpu tiers: one
// sequence per batch, one batch, all homes on disk (their working buffers remain).
runtime::Policy least_demanding(const InfeasibleInput& in, bool cpu_attention) {
  runtime::Policy p;
  p.gpu_batch_size = 1;
  p.num_gpu_batches = 1;
  p.w_gpu_percent = p.w_cpu_percent = 0;
  p.cache_gpu_percent = p.cache_cpu_percent = 0;
  p.act_gpu_percent = p.act_cpu_percent = 0;
  p.cpu_cache_compute = cpu_attention;
  p.cpu_weight_compute_prefill = p.cpu_weight_compute_decode = in.allow_cpu_weight_compute;
  p.compress_weight = in.compression;
  p.compress_weight.enabled = in.allow_compression;
  p.compress_cache = in.compression;
  p.compress_cache.enabled = in.allow_compression && !cpu_attention;
  return p;
}

uint64_t shortfall(uint64_t need, uint64_t have) { return need > have ? need - have : 0; }

std::string short_line(const char* tier, const std::string& component, uint64_t need, uint64_t budget) {
  return fmt::format("{} tier: {} needs {}, budget {} (short by {})", tier, component, format_bytes(need),
                     format_bytes(budget), format_bytes(need - budget));
}

}  // namespace

std::string explain_infeasible(const InfeasibleInput& in) {
  runtime::MemoryPlan plan = runtime::plan_memory(*in.spec, least_demanding(in, false), in.workload, in.dtype_bytes,
                                                 runtime::StageShape{{}, in.groups});
  if (in.allow_cpu_attention) {
    const auto cpu_attention = runtime::plan_memory(*in.spec, least_demanding(in, true), in.workload, in.dtype_bytes,
                                                     runtime::StageShape{{}, in.groups});
    if (cpu_attention.working[Tier::Gpu] < plan.working[Tier::Gpu]) plan = cpu_attention;
  }
  const auto cap = [&](uint64_t budget) { return static_cast<uint64_t>(double(budget) * in.memory_cap_fraction); };
  const std::string cap_note = fmt::format(" (the planner uses {:.0f}% of each budget)", in.memory_cap_fraction * 100);
  // Working memory cannot move: staging and compute scratch of one layer for one sequence.
  if (plan.working[Tier::Gpu] > cap(in.budgets.gpu)) {
    return short_line("gpu", "working memory (one layer's double-buffered weights and compute scratch for one "
                      "sequence)", plan.working[Tier::Gpu], cap(in.budgets.gpu)) + cap_note +
           "; raise --gpu-mem" + (in.allow_compression ? "" : " or allow compression (--compress auto)");
  }
  if (plan.working[Tier::Cpu] > cap(in.budgets.cpu)) {
    return short_line("cpu", "working memory (staging of disk-resident tensors)", plan.working[Tier::Cpu],
                      cap(in.budgets.cpu)) + cap_note + "; raise --cpu-mem";
  }
  // Homes can go anywhere: what is left of all tiers together must hold them.
  const uint64_t room = (cap(in.budgets.gpu) - plan.working[Tier::Gpu]) + (cap(in.budgets.cpu) - plan.working[Tier::Cpu]) +
                        shortfall(cap(in.budgets.disk), plan.working[Tier::Disk]);
  const auto sum = [](const runtime::TierBytes& t) { return t[Tier::Gpu] + t[Tier::Cpu] + t[Tier::Disk]; };
  const uint64_t weights = sum(plan.weights), cache = sum(plan.kv_cache), activations = sum(plan.activations);
  const uint64_t homes = weights + cache + activations;
  if (homes > room) {
    const char* biggest = weights >= cache && weights >= activations ? "weights"
                          : cache >= activations                     ? "KV cache (one sequence)"
                                                                     : "activations";
    return fmt::format("all tiers together: weights {} + KV cache {} + activations {} = {} must fit in the {} left "
                       "after working memory (short by {}; the largest part: {}){}; raise --disk-mem or --cpu-mem{}",
                       format_bytes(weights), format_bytes(cache), format_bytes(activations), format_bytes(homes),
                       format_bytes(room), format_bytes(homes - room), biggest, cap_note,
                       in.allow_compression ? "" : ", or allow compression (--compress auto)");
  }
  return fmt::format("the least demanding policy fits ({} gpu, {} cpu working memory); the budgets are too tight "
                     "once rounded to whole tensors{}: raise the budgets a little",
                     format_bytes(plan.working[Tier::Gpu]), format_bytes(plan.working[Tier::Cpu]), cap_note);
}

}  // namespace tiergen::policy
