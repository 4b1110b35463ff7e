#include "policy/replan.h"

#include <fmt/format.h>

#include "policy/cost_model.h"
#include "policy/plan_class.h"
#include "tiergen/common/error.h"

namespace tiergen::policy {

namespace {

bool same_compression(const runtime::CompressionConfig& a, const runtime::CompressionConfig& b) {
  return a.enabled == b.enabled && (!a.enabled || (a.bits == b.bits && a.group_size == b.group_size));
}

// The calibrated terms, as "weight link 0.31x, cpu attention 1.20x" (fitted ones only).
std::string fitted_factors(const Calibration& c) {
  std::string out;
  for (const CalibrationTerm& t : c.terms) {
    if (t.runs == 0 || !t.identifiable) continue;
    out += fmt::format("{}{} {:.3g}x", out.empty() ? "" : ", ", t.name, t.factor);
  }
  return out;
}

// Over the rest of the job, its last block partly empty where the blocks do not divide it.
double total_throughput(const runtime::Policy& policy, const ReplanInput& in, const HardwareProfile& hw) {
  return job_total_throughput(predict(in.first_block.spec, policy, in.remaining, hw, in.first_block.dtype_bytes),
                              policy.block_size(), in.remaining.num_sequences);
}

}  // namespace

const char* replan_scope_name(ReplanScope scope) {
  return scope == ReplanScope::AnyPlan ? "any plan (batch-invariant products)"
                                       : "placement only (products follow their batch here)";
}

std::string replan_forbidden_change(const runtime::Policy& a, const runtime::Policy& b, ReplanScope scope) {
  // Lossy choices are the user's: no scope changes them.
  if (!same_compression(a.compress_weight, b.compress_weight)) return "the weights' compression";
  if (!same_compression(a.compress_cache, b.compress_cache)) return "the KV cache's compression";
  if (scope == ReplanScope::AnyPlan) return "";
  if (a.gpu_batch_size != b.gpu_batch_size) {
    return fmt::format("the gpu batch size {} -> {}", a.gpu_batch_size, b.gpu_batch_size);
  }
  if (a.num_gpu_batches != b.num_gpu_batches) {
    return fmt::format("the number of gpu batches {} -> {}", a.num_gpu_batches, b.num_gpu_batches);
  }
  if (a.cpu_cache_compute != b.cpu_cache_compute) return "where attention is computed";
  if (a.cpu_weight_compute_prefill != b.cpu_weight_compute_prefill ||
      a.cpu_weight_compute_decode != b.cpu_weight_compute_decode ||
      a.cpu_weight_compute_layer_percent != b.cpu_weight_compute_layer_percent) {
    return "where the weights' products run";
  }
  // Attention runs per tier of the cache (a kernel for each part), so a new split of
  // the cache moves rows between attention calls.
  if (a.cache_gpu_percent != b.cache_gpu_percent || a.cache_cpu_percent != b.cache_cpu_percent) {
    return "the KV cache's split between tiers";
  }
  // Weights multiplied where they live: a new split moves products between devices.
  if ((a.cpu_weight_compute_prefill || a.cpu_weight_compute_decode) &&
      (a.w_gpu_percent != b.w_gpu_percent || a.w_cpu_percent != b.w_cpu_percent)) {
    return "the split of weights multiplied where they live";
  }
  // Products split between threads may sum in another order (a GEMM's, not ours).
  if (a.threads.compute_intra_op != b.threads.compute_intra_op) {
    return fmt::format("the compute threads {} -> {}", a.threads.compute_intra_op, b.threads.compute_intra_op);
  }
  return "";
}

ReplanDecision replan_after_first_block(const ReplanInput& in,
                                        const std::function<runtime::Policy(const HardwareProfile&)>& plan_on) {
  ReplanDecision d;
  d.policy = in.current;
  d.calibration = calibrate(in.profile, {in.first_block});
  const std::string factors = fitted_factors(d.calibration);
  if (factors.empty()) {
    d.reason = "plan kept: the first block measured no decode task the profile could be fitted on";
    return d;
  }
  const HardwareProfile& hw = d.calibration.profile;
  d.current_throughput = total_throughput(in.current, in, hw);
  runtime::Policy searched;
  try {
    searched = plan_on(hw);
  } catch (const InfeasibleError& e) {
    d.reason = fmt::format("plan kept: no plan fits on the profile fitted to the first block ({}): {}", factors,
                           e.what());
    return d;
  }
  d.searched_throughput = total_throughput(searched, in, hw);
  d.band = plan_class_band(plan_class(searched));
  const std::string priced = fmt::format(
      "fitted to the first block ({}), the current plan is priced at {:.3f} tok/s and the best searched plan at "
      "{:.3f} tok/s ({:.2f}x; its class '{}' is trusted to +-{:.0f}%)",
      factors, d.current_throughput, d.searched_throughput,
      d.current_throughput > 0 ? d.searched_throughput / d.current_throughput : 0.0,
      plan_class_name(plan_class(searched)), 100 * d.band);
  if (searched.describe() == in.current.describe()) {
    d.reason = fmt::format("plan kept: {}; the search chose the same plan", priced);
    return d;
  }
  if (!(d.searched_throughput > d.current_throughput * (1 + d.band))) {
    d.reason = fmt::format("plan kept: {}; not a win the model can tell apart", priced);
    return d;
  }
  if (in.remaining_tokens > 0 && d.current_throughput > 0 && d.searched_throughput > 0) {
    const double saved = in.remaining_tokens / d.current_throughput - in.remaining_tokens / d.searched_throughput;
    if (saved <= in.rebuild_seconds) {
      d.reason = fmt::format("plan kept: {}; it would save {:.2f} s of the remaining blocks, not more than the "
                             "{:.2f} s of placing the weights again", priced, saved, in.rebuild_seconds);
      return d;
    }
  }
  const std::string forbidden = replan_forbidden_change(in.current, searched, in.scope);
  if (!forbidden.empty()) {
    d.reason = fmt::format("plan kept: {}; but it changes {}, which would change results here (re-plans may "
                           "move {})", priced, forbidden, replan_scope_name(in.scope));
    return d;
  }
  d.replanned = true;
  d.policy = searched;
  d.reason = fmt::format("re-planned the remaining blocks: {}", priced);
  return d;
}

}  // namespace tiergen::policy
