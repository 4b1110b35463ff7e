#include "policy/report.h"

#include "policy/plan_class.h"

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tiergen/common/bytes.h"

namespace tiergen::policy {

namespace {

using runtime::Tier;

std::string compression_text(const runtime::CompressionConfig& c) {
  return c.enabled ? fmt::format("{}-bit, group {}", c.bits, c.group_size) : "off";
}

// Percentages as the policy holds them, beside the LP's fractions before rounding: the
// runtime places whole tensors, so the bytes above are what counts.
void append_fractions(std::string& out, const runtime::Policy& p, const Fractions& lp, bool from_lp) {
  if (!from_lp) {  // a guardrail: whole percentages, no LP answer behind them
    out += fmt::format("\nfractions (secondary)     weights {:.0f}/{:.0f}/{:.0f}%, kv cache {:.0f}/{:.0f}/{:.0f}%, "
                       "activations {:.0f}/{:.0f}/{:.0f}% (gpu/cpu/disk)\n",
                       p.w_gpu_percent, p.w_cpu_percent, p.w_disk_percent(), p.cache_gpu_percent,
                       p.cache_cpu_percent, p.cache_disk_percent(), p.act_gpu_percent, p.act_cpu_percent,
                       p.act_disk_percent());
    return;
  }
  out += fmt::format("\n{:<26}{:>8}{:>8}{:>8}   {:>8}{:>8}{:>8}\n", "fractions (secondary)", "gpu", "cpu", "disk",
                     "LP gpu", "LP cpu", "LP disk");
  auto row = [&](const char* what, double gpu, double cpu, double disk, int g, int c, int d) {
    out += fmt::format("{:<26}{:>7.1f}%{:>7.1f}%{:>7.1f}%   {:>7.1f}%{:>7.1f}%{:>7.1f}%\n", what, gpu, cpu, disk,
                       lp[g] * 100, lp[c] * 100, lp[d] * 100);
  };
  row("  weights", p.w_gpu_percent, p.w_cpu_percent, p.w_disk_percent(), kWg, kWc, kWn);
  row("  kv cache", p.cache_gpu_percent, p.cache_cpu_percent, p.cache_disk_percent(), kCg, kCc, kCn);
  row("  activations", p.act_gpu_percent, p.act_cpu_percent, p.act_disk_percent(), kHg, kHc, kHn);
}

// What bounds a layer, in words a user can act on: the schedule's term that sets its
// time, and on the compute queue the largest of its tasks (CPU attention is not the
// GPU computing; a step's fixed cost is neither).
// The lane or task that bounds a phase, in words. `cpu_products`: the phase multiplies
// host-resident weights on the CPU, so its compute is mostly the CPU's.
std::string bottleneck_text(const PhaseTimes& t, bool cpu_products) {
  const auto task = [&](Task k) { return t.tasks[static_cast<int>(k)]; };
  switch (t.bottleneck) {
    case Bound::WeightLoader: return "weight loads";
    case Bound::CacheLoader: return "cache/act. loads";
    case Bound::Storer: return "stores";
    case Bound::LinkToGpu: return "cpu->gpu link";
    case Bound::LinkFromGpu: return "gpu->cpu link";
    case Bound::DiskRead: return "disk reads";
    case Bound::DiskWrite: return "disk writes";
    case Bound::HostCores: return "host cores (compute, copies and disk reads beside them)";
    case Bound::InTurn: return "every queue in turn (overlap off)";
    case Bound::Compute: break;
  }
  const double attention = task(Task::CpuAttention);
  const double compression = task(Task::Dequantize) + task(Task::Quantize);
  const double round_trip = task(Task::ActivationLoad) + task(Task::ActivationStore);
  const double largest = std::max({attention, compression, task(Task::Compute), t.fixed_seconds});
  if (attention == largest) return "cpu attention";
  if (t.fixed_seconds == largest) return "per-step fixed cost";
  if (compression == largest) return "(de)quantize";
  if (round_trip > task(Task::Compute)) return "act. round trip";
  return cpu_products ? "compute (the CPU's products of host-resident weights)" : "compute";
}

void append_times(std::string& out, const Prediction& r, const runtime::Policy& p) {
  out += fmt::format("\n{:<22}{:>12}{:>12}\n", "per-layer time (ms)", "prefill", "decode");
  for (int i = 0; i < kNumTasks; ++i) {
    if (r.prefill.tasks[i] == 0 && r.decode.tasks[i] == 0) continue;
    out += fmt::format("  {:<20}{:>12.3f}{:>12.3f}\n", task_name(static_cast<Task>(i)), r.prefill.tasks[i] * 1e3,
                       r.decode.tasks[i] * 1e3);
  }
  if (r.prefill.fixed_seconds > 0 || r.decode.fixed_seconds > 0) {
    out += fmt::format("  {:<20}{:>12.3f}{:>12.3f}\n", "fixed (per step)", r.prefill.fixed_seconds * 1e3,
                       r.decode.fixed_seconds * 1e3);
  }
  out += "  per link:\n";
  for (int i = 0; i < kNumLanes; ++i) {
    out += fmt::format("  {:<20}{:>12.3f}{:>12.3f}\n", lane_name(static_cast<Lane>(i)), r.prefill.lanes[i] * 1e3,
                       r.decode.lanes[i] * 1e3);
  }
  out += runtime::schedule::queues_run_concurrently(p.overlap) ? "  per queue (the queues overlap):\n"
                                                                 : "  per queue (in turn: overlap off):\n";
  for (int i = 0; i < runtime::schedule::kNumQueues; ++i) {
    out += fmt::format("  {:<20}{:>12.3f}{:>12.3f}\n",
                       runtime::schedule::queue_name(static_cast<runtime::schedule::Queue>(i)),
                       r.prefill.queues[i] * 1e3, r.decode.queues[i] * 1e3);
  }
  out += fmt::format("  {:<20}{:>12.3f}{:>12.3f}\n", "layer (scheduled)", r.prefill.layer_seconds * 1e3,
                     r.decode.layer_seconds * 1e3);
  out += fmt::format("  {:<20}{:>12.3f}{:>12.3f}\n", "embedding + head", r.prefill_edges.layer_seconds * 1e3,
                     r.decode_edges.layer_seconds * 1e3);
  out += fmt::format("  bottleneck: prefill {}, decode {}\n", bottleneck_text(r.prefill, p.cpu_weight_compute(true)),
                     bottleneck_text(r.decode, p.cpu_weight_compute(false)));
}

// The bytes each tier will hold: runtime::plan_memory, the accounting the runtime
// allocates by (whole tensors placed by FlexGen's midpoint rule).
void append_memory(std::string& out, const runtime::MemoryPlan& m, const runtime::Budgets& b) {
  out += fmt::format("{:<14}{:>13}{:>13}{:>13}\n", "tier bytes", "gpu", "cpu", "disk");
  auto row = [&](const char* what, const runtime::TierBytes& t) {
    out += fmt::format("{:<14}{:>13}{:>13}{:>13}\n", what, format_bytes(t[Tier::Gpu]), format_bytes(t[Tier::Cpu]),
                       format_bytes(t[Tier::Disk]));
  };
  row("weights", m.weights);
  row("kv cache", m.kv_cache);
  row("activations", m.activations);
  row("working", m.working);
  row("total (peak)", m.total());
  out += fmt::format("{:<14}{:>13}{:>13}{:>13}\n", "budget", format_bytes(b.gpu), format_bytes(b.cpu),
                     format_bytes(b.disk));
}

nlohmann::json tier_json(const runtime::TierBytes& t) {
  return {{"gpu", t[Tier::Gpu]}, {"cpu", t[Tier::Cpu]}, {"disk", t[Tier::Disk]}};
}

// Where the matmuls of host-resident weights run, phase by phase.
std::string matmul_placement_text(const runtime::Policy& p) {
  const std::string phases = p.cpu_weight_compute_phases();
  if (phases == "off") return "gpu (host-resident weights are loaded every layer)";
  const std::string layers = p.cpu_weight_compute_layer_percent >= 100
                                 ? std::string("every layer")
                                 : fmt::format("{:g}% of the layers, spread (the others loaded meanwhile)",
                                               p.cpu_weight_compute_layer_percent);
  return fmt::format("cpu in {}, {}, for weights on cpu/disk (multiplied where they live; only activations cross)",
                     phases, layers);
}

// The same plan as FlexGen's flex_opt.py flags, where FlexGen can run it.
std::string flexgen_flags_text(const runtime::Policy& p) {
  std::string flags = fmt::format("--percent {:g} {:g} {:g} {:g} {:g} {:g} --gpu-batch-size {} --num-gpu-batches {}",
                                  p.w_gpu_percent, p.w_cpu_percent, p.cache_gpu_percent, p.cache_cpu_percent,
                                  p.act_gpu_percent, p.act_cpu_percent, p.gpu_batch_size, p.num_gpu_batches);
  if (p.cpu_cache_compute) flags += " --cpu-cache-compute";
  if (p.compress_weight.enabled) flags += " --compress-weight";
  if (p.compress_cache.enabled) flags += " --compress-cache";
  if (!p.overlap) flags += " --overlap false";
  if (!p.sep_layer) flags += " --sep-layer false";
  if (!p.pin_weight) flags += " --pin-weight false";
  if (p.cpu_weight_compute_prefill || p.cpu_weight_compute_decode) {
    flags += " (FlexGen has no CPU weight compute: it would load those weights)";
  }
  return "FlexGen flags  " + flags + "\n";
}

// The same plan as `tiergen generate`/`bench` flags. What no flag sets (the search's
// thread counts, the small-row limit, different bits for weights and cache) stays in
// the policy file `--json` writes, which `--policy FILE` runs as planned.
std::string tiergen_flags_text(const runtime::Policy& p) {
  std::string flags = fmt::format("--percent {:g} {:g} {:g} {:g} {:g} {:g} --gpu-batch-size {} --num-gpu-batches {}",
                                  p.w_gpu_percent, p.w_cpu_percent, p.cache_gpu_percent, p.cache_cpu_percent,
                                  p.act_gpu_percent, p.act_cpu_percent, p.gpu_batch_size, p.num_gpu_batches);
  if (p.cpu_cache_compute) flags += " --cpu-attention";
  const std::string phases = p.cpu_weight_compute_phases();
  if (phases != "off") {
    flags += " --cpu-weight-compute " + (phases == "prefill+decode" ? std::string("all") : phases);
    if (p.cpu_weight_compute_layer_percent < 100) {
      flags += fmt::format(" --cpu-weight-compute-layers {:g}", p.cpu_weight_compute_layer_percent);
    }
  }
  const runtime::CompressionConfig* compression = p.compress_weight.enabled ? &p.compress_weight
                                                  : p.compress_cache.enabled ? &p.compress_cache
                                                                             : nullptr;
  if (p.compress_weight.enabled) flags += " --compress-weight";
  if (p.compress_cache.enabled) flags += " --compress-cache";
  const bool mixed_compression = p.compress_weight.enabled && p.compress_cache.enabled &&
                                 (p.compress_weight.bits != p.compress_cache.bits ||
                                  p.compress_weight.group_size != p.compress_cache.group_size);
  if (compression) {
    flags += fmt::format(" --compress-bits {} --compress-group-size {}", compression->bits, compression->group_size);
  }
  if (!p.overlap) flags += " --overlap off";
  if (!p.sep_layer) flags += " --sep-layer false";
  if (!p.pin_weight) flags += " --pin-weight false";
  std::vector<std::string> unflagged;
  if (p.threads.compute_intra_op > 0 || p.threads.compute_inter_op > 0 || p.threads.io_threads > 0) {
    unflagged.push_back("its thread counts");
  }
  if (p.small_matmul.max_rows > 0) unflagged.push_back("its small-row limit");
  if (mixed_compression) unflagged.push_back("the cache's compression bits and groups");
  if (!unflagged.empty()) {
    std::string list = unflagged[0];
    for (size_t i = 1; i < unflagged.size(); ++i) list += (i + 1 == unflagged.size() ? " and " : ", ") + unflagged[i];
    flags += fmt::format(" (without {}: --json FILE writes the whole plan, --policy FILE runs it)", list);
  }
  return "tiergen flags  " + flags + "\n";
}

// Which side of the search the policy came from, with both sides' best predictions.
std::string chosen_by_text(const SearchResult& r) {
  if (r.chosen_by == "given") return "chosen by: given (priced, not searched)\n";
  if (!r.guardrails_priced) return "chosen by: the LP (guardrails off, or compression required)\n";
  if (r.guardrails_fitted == 0) return "chosen by: the LP (no guardrail policy fits the budgets)\n";
  if (r.chosen_by == "guardrail") {
    return fmt::format(
        "chosen by: a guardrail (FlexGen-shaped policy, {} fitted): predicted {:.3f} token/s over the job at default "
        "threads; the LP's best {} (taken only when more than {:.0f}% faster)\n",
        r.guardrails_fitted, r.guardrail_best_throughput,
        r.lp_best_throughput > 0 ? fmt::format("{:.3f}", r.lp_best_throughput) : std::string("found none"),
        r.guardrail_margin * 100);
  }
  return fmt::format(
      "chosen by: the LP, predicted {:.2f}x the best of {} guardrail policies ({:.3f} token/s over the job; the LP's "
      "plan needed {:.0f}% more)\n",
      r.lp_best_throughput / r.guardrail_best_throughput, r.guardrails_fitted, r.guardrail_best_throughput,
      r.guardrail_margin * 100);
}

}  // namespace

std::string format_report(const SearchResult& result, const ReportContext& c) {
  const auto& p = result.policy;
  const auto& r = result.prediction;
  std::string out = fmt::format(
      "model {} ({} layers, hidden {}), {} prompts, prompt {}, gen {}, {}-byte dtype; hardware {}\n",
      c.spec->name, c.spec->num_layers, c.spec->hidden_size,
      c.workload.num_sequences > 0 ? std::to_string(c.workload.num_sequences) : std::string("any number of"),
      c.workload.prompt_len, c.workload.gen_len, c.dtype_bytes, c.hw->name);
  out += p.exactness() + "\n\n";
  append_memory(out, result.memory, c.budgets);
  out += fmt::format("\nbatches       gpu batch {} x {} gpu batches = block of {} sequences\n", p.gpu_batch_size,
                     p.num_gpu_batches, p.block_size());
  out += fmt::format("compression   weights {}; kv cache {}\n", compression_text(p.compress_weight),
                     compression_text(p.compress_cache));
  out += fmt::format("attention     {}\n", p.cpu_cache_compute ? "cpu (decode attention where the KV cache lives)"
                                                               : "gpu (offloaded KV cache is loaded)");
  out += fmt::format("matmuls       {}\n", matmul_placement_text(p));
  out += fmt::format("threads       compute intra-op {}, inter-op {}; load/store {}\n", p.threads.compute_intra_op,
                     p.threads.compute_inter_op, p.threads.io_threads);
  out += tiergen_flags_text(p);
  out += flexgen_flags_text(p);
  out += fmt::format("\npredicted throughput (token/s): prefill {:.2f}, decode {:.2f}, total {:.3f}\n",
                     r.prefill_throughput, r.decode_throughput, r.total_throughput);
  const PlanClass plan = plan_class(p);
  out += fmt::format("plan class    {} (predictions of its class measured within +/-{:.0f}%)\n",
                     plan_class_name(plan), plan_class_band(plan) * 100);
  out += fmt::format("predicted time (s): prefill {:.1f}, decode {:.1f}, total {:.1f}{}\n", r.prefill_seconds,
                     r.decode_seconds, r.total_seconds,
                     r.init_seconds > 0 ? fmt::format(" (+{:.1f} one-off weight quantization)", r.init_seconds) : "");
  append_times(out, r, p);
  append_fractions(out, p, result.lp_fractions, result.chosen_by == "LP" || result.chosen_by.empty());
  if (result.chosen_by != "given") {
    out += fmt::format("\nsearch: {} feasible LPs, {} rounded policies checked, {:.3f} s\n", result.lp_solved,
                       result.exact_checked, result.seconds);
  }
  if (!result.chosen_by.empty()) out += chosen_by_text(result);
  return out;
}

nlohmann::json report_json(const SearchResult& result, const ReportContext& c) {
  nlohmann::json predicted = prediction_to_json(result.prediction);
  predicted["peak_memory"] = {{"weights", tier_json(result.memory.weights)},
                              {"kv_cache", tier_json(result.memory.kv_cache)},
                              {"activations", tier_json(result.memory.activations)},
                              {"working", tier_json(result.memory.working)},
                              {"total", tier_json(result.memory.total())},
                              {"units", "bytes"}};
  return {{"policy", runtime::policy_to_json(result.policy)},
          {"predicted", predicted},
          {"model", c.spec->name},
          {"workload",
           {{"prompt_len", c.workload.prompt_len},
            {"gen_len", c.workload.gen_len},
            {"num_sequences", c.workload.num_sequences}}},
          {"exact", result.policy.exact()},
          {"dtype_bytes", c.dtype_bytes},
          {"budgets", {{"gpu", c.budgets.gpu}, {"cpu", c.budgets.cpu}, {"disk", c.budgets.disk}}},
          {"hardware_profile", c.hw->path},
          {"search",
           {{"chosen_by", result.chosen_by},
            {"lp_best_throughput", result.lp_best_throughput},
            {"guardrail_best_throughput", result.guardrail_best_throughput},
            {"guardrails_fitted", result.guardrails_fitted},
            {"margin", result.guardrail_margin}}},
          {"plan_class", plan_class_json(result.policy)}};
}

nlohmann::json plan_class_json(const runtime::Policy& policy) {
  const PlanClass plan = plan_class(policy);
  return {{"name", plan_class_name(plan)}, {"band", plan_class_band(plan)}};
}

}  // namespace tiergen::policy
