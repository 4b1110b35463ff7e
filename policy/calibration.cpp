#include "policy/calibration.h"

#include <fmt/format.h>

#include <cmath>
#include <functional>

#include "policy/cost_model.h"
#include "tiergen/common/error.h"
#include "tiergen/model/presets.h"

namespace tiergen::policy {

namespace {

// The measured decode seconds of one task in a record's per-task comparison.
double measured_decode(const nlohmann::json& tasks, const std::string& task, const std::string& source) {
  TG_CHECK(tasks.contains(task) && tasks.at(task).contains("measured_decode_s"),
           "{}: the record's per-task seconds have no '{}'", source, task);
  const double seconds = tasks.at(task).at("measured_decode_s").get<double>();
  TG_CHECK(std::isfinite(seconds) && seconds >= 0, "{}: '{}' decode seconds {} are not a time", source, task, seconds);
  return seconds;
}

// One calibrated term: which runs price it, what they measured, and the rates it scales.
struct TermRule {
  const char* name;
  const char* fields;
  Task task;
  std::function<bool(const CalibrationRun&, const HardwareProfile&)> eligible;
  std::function<double(const CalibrationRun&)> measured;
  std::function<void(HardwareProfile&, double)> scale;
  // Whether the term is one of this kind of profile's (null: every profile's).
  bool (*applies)(const HardwareProfile&) = nullptr;
};

bool gpu_is_a_gpu(const HardwareProfile& hw) { return !hw.gpu_is_host; }
bool gpu_is_the_host(const HardwareProfile& hw) { return hw.gpu_is_host; }

bool weights_streamed_from_cpu(const runtime::Policy& p) {
  const double on_disk = 100 - p.w_gpu_percent - p.w_cpu_percent;
  return p.w_cpu_percent > 0 && on_disk < 1e-9 && !p.compress_weight.enabled && !p.cpu_weight_compute_decode;
}

bool attention_over_cpu_cache(const runtime::Policy& p) {
  const double on_disk = 100 - p.cache_gpu_percent - p.cache_cpu_percent;
  return p.cpu_cache_compute && p.cache_cpu_percent > 0 && on_disk < 1e-9 && !p.compress_cache.enabled;
}

const std::vector<TermRule>& term_rules() {
  static const std::vector<TermRule> rules = {
      {"weight link", "bandwidth.cpu_to_gpu", Task::WeightLoad,
       [](const CalibrationRun& r, const HardwareProfile&) { return weights_streamed_from_cpu(r.policy); },
       [](const CalibrationRun& r) { return r.weight_load_seconds; },
       [](HardwareProfile& hw, double f) { hw.cpu_to_gpu *= f; }},
      // Every cost of the kernel alike: its bytes' rate and its costs beside them.
      {"cpu attention", "cpu.attention_bandwidth, cpu.attention_call_seconds, cpu.attention_task_seconds",
       Task::CpuAttention,
       [](const CalibrationRun& r, const HardwareProfile&) { return attention_over_cpu_cache(r.policy); },
       [](const CalibrationRun& r) { return r.cpu_attention_seconds; },
       [](HardwareProfile& hw, double f) {
         hw.cpu_attention_bandwidth *= f;
         hw.cpu_attention_call_seconds /= f;
         hw.cpu_attention_task_seconds /= f;
       }},
      // The stand-in prices its "gpu" products at the CPU's measured rates instead.
      {"decode products", "gpu_flops.mm_decode, gpu_flops.bmm_decode", Task::Compute,
       [](const CalibrationRun& r, const HardwareProfile& hw) {
         return !hw.gpu_is_host && !r.policy.cpu_weight_compute_decode;
       },
       [](const CalibrationRun& r) { return r.compute_seconds - r.cpu_attention_seconds; },
       [](HardwareProfile& hw, double f) {
         hw.mm_flops_decode *= f;
         hw.bmm_flops_decode *= f;
       },
       gpu_is_a_gpu},
      // The stand-in's "gpu" products are the CPU's products: its product rates scale.
      {"cpu products",
       "cpu.product_rates, cpu.gemv_bandwidth, cpu.matmul_flops, call_seconds, short_row_rates, "
       "loaded_cache_attention (and every dtype's in cpu.product_tables), "
       "gpu_flops.mm_decode, gpu_flops.bmm_decode",
       Task::Compute, [](const CalibrationRun&, const HardwareProfile& hw) { return hw.gpu_is_host; },
       [](const CalibrationRun& r) { return r.compute_seconds - r.cpu_attention_seconds; },
       [](HardwareProfile& hw, double f) {
         for (auto& rate : hw.cpu_product_rates) rate.second *= f;
         for (auto& rate : hw.cpu_short_row_rates) rate.second *= f;
         hw.cpu_gemv_bandwidth *= f;
         hw.cpu_matmul_flops *= f;
         for (auto& call : hw.cpu_call_seconds) call.second /= f;  // seconds, where the others are rates
         hw.cpu_loaded_cache_attention.speed_up(f);
         for (auto& q : hw.cpu_quantized_product_rates) {
           for (auto& rate : q.rates) rate.second *= f;
         }
         // Every dtype's table alike: the runs' dtypes price theirs (predicted_decode).
         for (auto& table : hw.cpu_product_tables) {
           for (auto& rate : table.rates) rate.second *= f;
           for (auto& rate : table.short_row_rates) rate.second *= f;
           table.gemv_bandwidth *= f;
           table.matmul_flops *= f;
           for (auto& call : table.call_seconds) call.second /= f;
           table.loaded_cache_attention.speed_up(f);
           for (auto& q : table.quantized) {
             for (auto& rate : q.rates) rate.second *= f;
           }
         }
         hw.mm_flops_decode *= f;
         hw.bmm_flops_decode *= f;
       },
       gpu_is_the_host},
  };
  return rules;
}

// Summed predicted decode seconds of `task` over the runs a rule admits.
double predicted_decode(const std::vector<const CalibrationRun*>& runs, Task task, const HardwareProfile& hw) {
  double seconds = 0;
  for (const CalibrationRun* r : runs) {
    const Prediction p = predict(r->spec, r->policy, r->workload, hw.with_cpu_products_of(r->dtype), r->dtype_bytes);
    seconds += task_seconds(p, task, false, r->spec.num_layers, r->decode_steps);
  }
  return seconds;
}

// The record's model: a preset name, or a checkpoint directory that may be gone since;
// then its Hugging Face id, whose preset has the same shape.
model::Spec spec_of_record(const nlohmann::json& record, const std::string& source) {
  const std::string model = record.at("model").get<std::string>();
  try {
    return model::resolve_spec(model);
  } catch (const std::exception& e) {
    const std::string hf_id = record.value("hf_id", "");
    if (!hf_id.empty() && model::find_preset(hf_id)) return *model::find_preset(hf_id);
    throw Error(fmt::format("{}: the record's model '{}' is neither a preset nor a readable checkpoint ({})", source,
                            model, e.what()));
  }
}

constexpr int kMaxRounds = 8;
constexpr double kSettled = 1e-4;

}  // namespace

CalibrationRun calibration_run_from_record(const nlohmann::json& record, const std::string& source) {
  try {
    for (const char* key : {"model", "prompt_len", "gen_len", "num_prompts", "repetitions", "policy"}) {
      TG_CHECK(record.contains(key) && !record.at(key).is_null(), "{}: not a `tiergen bench --json` record (no '{}')",
               source, key);
    }
    TG_CHECK(!record.value("projected", false), "{}: the record's decode was projected from a shorter run, not "
             "measured whole: calibrate on a run of the full --gen-len", source);
    const nlohmann::json& comparison = record.value("predicted_vs_measured", nlohmann::json());
    TG_CHECK(comparison.is_object() && comparison.contains("tasks"),
             "{}: the record has no per-task seconds (a bench run without a hardware profile; rerun it with --hw)", source);
    CalibrationRun run;
    run.source = source;
    run.spec = spec_of_record(record, source);
    run.policy = runtime::policy_from_json(record.at("policy"), source);
    run.workload = {record.at("prompt_len").get<int64_t>(), record.at("gen_len").get<int64_t>()};
    const std::string dtype = record.value("dtype", "float16");
    TG_CHECK(dtype == "float16" || dtype == "bfloat16" || dtype == "float32", "{}: unknown dtype '{}'", source, dtype);
    run.dtype_bytes = dtype == "float32" ? 4 : 2;
    run.dtype = dtype;
    const int64_t prompts = record.at("num_prompts").get<int64_t>();
    const int64_t reps = record.at("repetitions").get<int64_t>();
    TG_CHECK(prompts > 0 && reps > 0 && run.workload.gen_len > 1,
             "{}: {} prompts, {} repetitions, gen_len {}: no decode to calibrate on", source, prompts, reps,
             run.workload.gen_len);
    const int64_t blocks = (prompts + run.policy.block_size() - 1) / run.policy.block_size();
    run.decode_steps = double(blocks * reps * (run.workload.gen_len - 1));
    const nlohmann::json& tasks = comparison.at("tasks");
    run.weight_load_seconds = measured_decode(tasks, "weight_load", source);
    run.cpu_attention_seconds = measured_decode(tasks, "cpu_attention", source);
    run.compute_seconds = measured_decode(tasks, "compute", source);
    return run;
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: a field of the record has the wrong type: {}", source, e.what()));
  }
}

Calibration calibrate(const HardwareProfile& base, const std::vector<CalibrationRun>& runs) {
  TG_CHECK(!runs.empty(), "calibrate: no measured runs");
  Calibration out{base, {}};
  // Which runs price each term, and what they measured (fixed across rounds).
  std::vector<std::vector<const CalibrationRun*>> admitted(term_rules().size());
  for (size_t i = 0; i < term_rules().size(); ++i) {
    const TermRule& rule = term_rules()[i];
    CalibrationTerm term{rule.name, rule.fields};
    term.applies = rule.applies == nullptr || rule.applies(base);
    for (const CalibrationRun& r : runs) {
      if (!rule.eligible(r, base) || rule.measured(r) <= 0) continue;
      admitted[i].push_back(&r);
      term.measured_seconds += rule.measured(r);
    }
    term.runs = int(admitted[i].size());
    if (term.runs > 0) term.predicted_before = predicted_decode(admitted[i], rule.task, base);
    if (term.predicted_before <= 0) term.runs = 0;  // the model prices none of it: nothing to scale
    out.terms.push_back(term);
  }
  bool settled = false;
  for (int round = 0; round < kMaxRounds && !settled; ++round) {
    settled = true;
    for (size_t i = 0; i < term_rules().size(); ++i) {
      CalibrationTerm& term = out.terms[i];
      if (term.runs == 0 || !term.identifiable) continue;
      const double predicted = predicted_decode(admitted[i], term_rules()[i].task, out.profile);
      const double step = predicted / term.measured_seconds;
      if (std::abs(step - 1) < kSettled) continue;
      settled = false;
      term_rules()[i].scale(out.profile, step);
      term.factor *= step;
      // A rate that no longer moves the prediction (decode products held at the
      // weight-read floor, max(flops / rate, bytes / bandwidth)) cannot be fitted: undo.
      const double moved = predicted_decode(admitted[i], term_rules()[i].task, out.profile);
      if (std::abs(moved - predicted) < 1e-3 * std::abs(predicted - term.measured_seconds)) {
        term_rules()[i].scale(out.profile, 1 / step);
        term.factor /= step;
        term.identifiable = false;
      }
    }
  }
  out.settled = settled;
  for (size_t i = 0; i < term_rules().size(); ++i) {
    CalibrationTerm& term = out.terms[i];
    if (term.runs > 0) term.predicted_after = predicted_decode(admitted[i], term_rules()[i].task, out.profile);
  }
  out.profile.name = fmt::format("{} (calibrated on {} run{})", base.name, runs.size(), runs.size() == 1 ? "" : "s");
  out.profile.validate("calibrated profile");
  return out;
}

std::string calibration_table(const Calibration& c) {
  std::string out = fmt::format("{:<16}{:>5}{:>14}{:>14}{:>14}{:>9}  {}\n", "decode term", "runs", "measured s",
                                "predicted s", "after fit s", "factor", "scales");
  for (const CalibrationTerm& t : c.terms) {
    if (!t.applies) {
      out += fmt::format("{:<16}{:>5}  not this profile's term (its decode products are {})\n", t.name, 0,
                         c.profile.gpu_is_host ? "the CPU's" : "the GPU's");
      continue;
    }
    if (t.runs == 0) {
      out += fmt::format("{:<16}{:>5}  not fitted: no run priced it alone  ({})\n", t.name, 0, t.fields);
      continue;
    }
    if (!t.identifiable) {
      out += fmt::format("{:<16}{:>5}  not fitted: its rate does not move the prediction of these runs (measured "
                         "{:.3f} s, predicted {:.3f} s)  ({})\n", t.name, t.runs, t.measured_seconds,
                         t.predicted_after, t.fields);
      continue;
    }
    out += fmt::format("{:<16}{:>5}{:>14.3f}{:>14.3f}{:>14.3f}{:>8.3f}x  {}\n", t.name, t.runs, t.measured_seconds,
                       t.predicted_before, t.predicted_after, t.factor, t.fields);
  }
  if (!c.settled) out += "the fit did not settle: the terms move one another; the factors are the last round's\n";
  return out;
}

}  // namespace tiergen::policy
