#include "policy/pipeline_report.h"

#include <fmt/format.h>

#include "tiergen/common/bytes.h"

namespace tiergen::policy {

namespace {

std::string tier_bytes(const runtime::MemoryPlan& memory) {
  const auto total = memory.total();
  return fmt::format("gpu {}, cpu {}, disk {}", format_bytes(total[runtime::Tier::Gpu]),
                     format_bytes(total[runtime::Tier::Cpu]), format_bytes(total[runtime::Tier::Disk]));
}

}  // namespace

std::string format_pipeline_report(const PipelinePlan& plan, const ReportContext& context,
                                   const std::optional<SearchResult>& single) {
  const model::Spec& spec = *context.spec;
  const PipelinePrediction& p = plan.prediction;
  const runtime::Policy& shape = plan.stages.front().search.policy;
  std::string out = fmt::format(
      "pipeline of {} stages, one process each with its own budgets (gpu {}, cpu {}, disk {}); {} blocks in flight "
      "(one per stage); link {:.2f} GB/s, {:.0f} us per message between stages ({})\n",
      plan.stages.size(), format_bytes(context.budgets.gpu), format_bytes(context.budgets.cpu),
      format_bytes(context.budgets.disk), plan.stages.size(), p.link.bytes_per_second / 1e9,
      p.link.latency_seconds * 1e6, p.link.origin);
  const bool exact = std::all_of(plan.stages.begin(), plan.stages.end(), [](const StagePlan& s) { return s.search.policy.exact(); });
  out += fmt::format("output: {}\n", exact ? "exact (no compression)" : "lossy: a stage compresses (--compress)");
  out += fmt::format("every stage runs gpu batch {} x {} batches (a block of {} sequences)\n", shape.gpu_batch_size,
                     shape.num_gpu_batches, shape.block_size());
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const StagePlan& stage = plan.stages[s];
    const Prediction& pr = stage.search.prediction;
    const double decode_token =
        context.workload.gen_len > 1 ? pr.decode_seconds / double(context.workload.gen_len - 1) : 0.0;
    out += fmt::format("stage {} ({}):\n  policy: {}\n  holds: {}\n  per block: prefill {:.3f} s, decode {:.4f} s "
                       "per token{}\n",
                       s, stage.layers.describe(spec), stage.search.policy.describe(), tier_bytes(stage.search.memory),
                       pr.prefill_seconds, decode_token, static_cast<int>(s) == p.bottleneck_stage ? " (slowest)" : "");
  }
  out += fmt::format("hidden states per hop: prefill {:.4f} s, decode {:.5f} s per block\n", p.prefill_hop_seconds,
                     p.decode_hop_seconds);
  out += fmt::format("predicted per wave of {} sequences: prefill {:.3f} s (pipeline fill included), decode cycle "
                     "{:.4f} s per token, {:.3f} s in all\n",
                     p.sequences_per_wave, p.prefill_seconds, p.decode_cycle_seconds, p.wave_seconds);
  out += fmt::format("predicted throughput: total {:.2f} token/s, decode {:.2f} token/s\n", p.total_throughput,
                     p.decode_throughput);
  if (single) {
    out += fmt::format("one process with the same budgets: total {:.2f} token/s, decode {:.2f} token/s ({}); "
                       "pipeline / one process: total {:.2f}x, decode {:.2f}x\n",
                       single->prediction.total_throughput, single->prediction.decode_throughput,
                       single->policy.describe(), p.total_throughput / single->prediction.total_throughput,
                       p.decode_throughput / single->prediction.decode_throughput);
  } else {
    out += "one process with the same budgets: no placement fits\n";
  }
  out += "run each stage with its policy file: tiergen generate ... --policy FILE.stageR.json --rank R --world-size N\n";
  return out;
}

}  // namespace tiergen::policy
