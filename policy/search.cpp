#include "policy/search.h"

#include "policy/plan_class.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <tuple>

#include "policy/guardrails.h"
#include "policy/infeasible.h"
#include "policy/memory_model.h"
#include "policy/placement_lp.h"
#include "policy/rounding.h"
#include "policy/thread_search.h"
#include "tiergen/common/bytes.h"
#include "tiergen/common/error.h"

namespace tiergen::policy {

CompressionMode compression_mode_from_string(const std::string& text) {
  if (text == "auto") return CompressionMode::Auto;
  if (text == "on") return CompressionMode::On;
  if (text == "off") return CompressionMode::Off;
  TG_THROW("--compress must be auto, on or off, got '{}'", text);
}

const char* compression_mode_name(CompressionMode mode) {
  return mode == CompressionMode::Auto ? "auto" : mode == CompressionMode::On ? "on" : "off";
}

namespace {

// One point of the outer enumeration with its LP answer.
struct Candidate {
  runtime::Policy shape;
  PlacementAnswer answer;
};

// 1, 2, 4, then every multiple of 8 to 128 (FlexGen's published policies use 24, 40,
// 56 ...), then coarser steps.
std::vector<int64_t> default_gpu_batch_sizes() {
  std::vector<int64_t> sizes = {1, 2, 4};
  for (int64_t gbs = 8; gbs <= 128; gbs += 8) sizes.push_back(gbs);
  for (const int64_t gbs : {192, 256, 384, 512, 768, 1024}) sizes.push_back(gbs);
  return sizes;
}

// 1..16, then coarser steps: block sizes far apart in batches differ little in T/bls.
std::vector<int64_t> num_gpu_batch_choices(int64_t max) {
  std::vector<int64_t> out;
  for (int64_t k = 1; k <= max; k += k < 16 ? 1 : k < 64 ? 4 : 16) out.push_back(k);
  if (out.back() != max) out.push_back(max);  // the largest block the job allows
  return out;
}

// Where the matmuls of host-resident decoder weights run: loaded to the device, or on
// the CPU in decode (prefill's many rows favour the device) for a share of the layers
// (the rest loaded meanwhile), or in both phases for all of them.
struct WeightCompute {
  bool prefill = false, decode = false;
  double layer_percent = 100;
};

// (compress weights, compress cache, cpu attention, weight compute) combinations to
// try. LM-Offload's observation 1: with CPU attention the KV cache never crosses PCIe,
// so compressing it only adds work; that combination is left out. Computing on the
// CPU is tried only where the profile measured its matmul rates.
struct Variant {
  bool compress_weight, compress_cache, cpu_attention;
  WeightCompute weight_compute;
};

std::vector<WeightCompute> weight_compute_choices(const SearchOptions& o, const HardwareProfile& hw) {
  std::vector<WeightCompute> out{WeightCompute{}};
  if (!o.allow_cpu_weight_compute || !hw.prices_cpu_matmuls()) return out;
  for (double percent : {25.0, 50.0, 75.0, 100.0}) out.push_back({false, true, percent});
  out.push_back({true, true, 100});
  return out;
}

std::vector<Variant> variants(const SearchOptions& o, const HardwareProfile& hw) {
  std::vector<Variant> out;
  for (WeightCompute where : weight_compute_choices(o, hw)) {
    for (int w = 0; w < 2; ++w) {
      for (int c = 0; c < 2; ++c) {
        const bool any = w || c;
        if (o.compression == CompressionMode::Off && any) continue;
        if (o.compression == CompressionMode::On && !any) continue;
        out.push_back({bool(w), bool(c), false, where});
        if (o.allow_cpu_attention && !c) out.push_back({bool(w), bool(c), true, where});
      }
    }
  }
  return out;
}

runtime::Policy make_shape(int64_t gbs, int64_t ngb, const Variant& v, const SearchOptions& o) {
  runtime::Policy p;
  p.gpu_batch_size = gbs;
  p.num_gpu_batches = ngb;
  p.cpu_cache_compute = v.cpu_attention;
  p.cpu_weight_compute_decode = v.weight_compute.decode;
  p.cpu_weight_compute_prefill = v.weight_compute.prefill;
  p.cpu_weight_compute_layer_percent = v.weight_compute.layer_percent;
  p.compress_weight = o.compression_config;
  p.compress_weight.enabled = v.compress_weight;
  p.compress_cache = o.compression_config;
  p.compress_cache.enabled = v.compress_cache;
  return p;
}

// The gpu batch sizes to try for a job of `num_sequences` (0: unknown): none larger
// than the job, and the job itself as one batch when the list went beyond it.
std::vector<int64_t> gpu_batch_sizes_for(const SearchOptions& o, int64_t num_sequences) {
  const auto sizes = o.gpu_batch_sizes.empty() ? default_gpu_batch_sizes() : o.gpu_batch_sizes;
  if (num_sequences <= 0) return sizes;
  std::vector<int64_t> out;
  bool beyond = false;
  for (int64_t s : sizes) {
    if (s < num_sequences) out.push_back(s);
    beyond = beyond || s >= num_sequences;
  }
  if (beyond) out.push_back(num_sequences);
  return out;
}

// Most gpu batches of `gbs` sequences a block may hold: the job's sequences bound it.
int64_t max_num_gpu_batches_for(const SearchOptions& o, int64_t gbs, int64_t num_sequences) {
  return num_sequences <= 0 ? o.max_num_gpu_batches : std::max<int64_t>(1, std::min(o.max_num_gpu_batches, num_sequences / gbs));
}

std::vector<Candidate> solve_all(const ModelSizes& sizes, const runtime::Workload& w,
                                 const std::array<double, runtime::kNumTiers>& caps, const HardwareProfile& hw,
                                 const SearchOptions& o) {
  std::vector<Candidate> out;
  for (const Variant& v : variants(o, hw)) {
    for (int64_t gbs : gpu_batch_sizes_for(o, w.num_sequences)) {
      const auto ngb_choices = o.num_gpu_batches > 0 ? std::vector<int64_t>{o.num_gpu_batches}
                                                     : num_gpu_batch_choices(max_num_gpu_batches_for(o, gbs, w.num_sequences));
      for (int64_t ngb : ngb_choices) {
        const runtime::Policy shape = make_shape(gbs, ngb, v, o);
        auto answer = solve_placement_lp(build_cost_model(sizes, shape, w, hw), build_memory_model(sizes, shape, w),
                                         caps, o.tie_break);
        if (!answer) break;  // more batches only need more memory
        out.push_back({shape, *answer});
      }
    }
  }
  return out;
}

// How many tiers the KV cache spans: a cache split across tiers pays two transfer
// paths and two attention placements for a gain the model may not resolve.
int cache_tiers(const runtime::Policy& p) {
  return (p.cache_gpu_percent > 0) + (p.cache_cpu_percent > 0) + (p.cache_disk_percent() > 1e-9);
}

// A plan's throughput over the whole job of `num_sequences` (job_total_throughput).
double job_throughput(const SearchResult& r, int64_t num_sequences) {
  return job_total_throughput(r.prediction, r.policy.block_size(), num_sequences);
}

// The fastest policy over the job, except that among those within `near_tie` of it
// (closer than the model can tell apart) the one keeping the least on disk wins, then
// the one whose KV cache spans the fewest tiers.
SearchResult pick(const std::vector<SearchResult>& accepted, int64_t num_sequences, double near_tie,
                  double split_cache_gain) {
  const auto speed = [&](const SearchResult& r) { return job_throughput(r, num_sequences); };
  double fastest = 0;
  for (const auto& r : accepted) fastest = std::max(fastest, speed(r));
  const SearchResult* best = nullptr;
  const auto key = [&](const SearchResult& r) {
    return std::make_tuple(r.memory.total()[runtime::Tier::Disk], cache_tiers(r.policy), -speed(r));
  };
  for (const auto& r : accepted) {
    if (speed(r) < fastest * (1 - near_tie)) continue;
    if (best == nullptr || key(r) < key(*best)) best = &r;
  }
  // A cache split over more tiers must earn its complexity with a clear gain.
  for (const auto& r : accepted) {
    if (cache_tiers(r.policy) < cache_tiers(best->policy) &&
        r.memory.total()[runtime::Tier::Disk] <= best->memory.total()[runtime::Tier::Disk] &&
        speed(r) >= speed(*best) * (1 - split_cache_gain)) {
      best = &r;
    }
  }
  return *best;
}

// The guardrails that fit the full budgets, priced at default threads as the LP's
// candidates are. None where compression is required (guardrails are uncompressed).
std::vector<SearchResult> price_guardrails(const model::Spec& spec, const ModelSizes& sizes,
                                           const runtime::Workload& workload, const runtime::Budgets& budgets,
                                           const HardwareProfile& hw, const SearchOptions& o) {
  if (!o.guardrails || o.compression == CompressionMode::On) return {};
  SearchOptions flexgen_sizes = o;
  // FlexGen's hand policies use gpu batches like 2, 24 and 48: multiples of 8 up to 64.
  if (flexgen_sizes.gpu_batch_sizes.empty()) flexgen_sizes.gpu_batch_sizes = {1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 96, 128};
  GuardrailShape shape;
  shape.gpu_batch_sizes = gpu_batch_sizes_for(flexgen_sizes, workload.num_sequences);
  shape.max_num_gpu_batches = std::min<int64_t>(o.max_num_gpu_batches, 8);
  shape.num_gpu_batches = o.num_gpu_batches;
  shape.num_sequences = workload.num_sequences;
  shape.allow_cpu_attention = o.allow_cpu_attention;
  shape.host_weights_multiplied_at_home = hw.gpu_is_host && o.allow_cpu_weight_compute && hw.prices_cpu_matmuls();
  std::vector<SearchResult> out;
  for (const runtime::Policy& p : guardrail_policies(shape)) {
    SearchResult r;
    r.memory = runtime::plan_memory(spec, p, workload, o.dtype_bytes, sizes.stage_shape());
    if (!r.memory.over_budget(budgets).empty()) continue;
    r.policy = p;
    r.prediction = predict(spec, p, workload, hw, o.dtype_bytes);
    out.push_back(r);
  }
  return out;
}

// The LP's pick unless the best guardrail comes within the margin of it, both priced
// over the job of `num_sequences` (job_throughput).
SearchResult choose_with_guardrails(const std::vector<SearchResult>& accepted,
                                    const std::vector<SearchResult>& guardrails, int64_t num_sequences,
                                    const SearchOptions& o) {
  const auto speed = [&](const SearchResult& r) { return job_throughput(r, num_sequences); };
  double fastest = 0;
  for (const auto& g : guardrails) fastest = std::max(fastest, speed(g));
  // Among guardrails the model cannot tell apart (within near_tie), the one with the
  // most weights on the gpu, then the fewest gpu batches: less crosses the link, and
  // fewer steps pay the per-step costs the model leaves out.
  const auto safer = [](const SearchResult& a, const SearchResult& b) {
    return std::make_tuple(a.policy.w_gpu_percent, -a.policy.num_gpu_batches, a.policy.gpu_batch_size) >
           std::make_tuple(b.policy.w_gpu_percent, -b.policy.num_gpu_batches, b.policy.gpu_batch_size);
  };
  const SearchResult* guard = nullptr;
  for (const auto& g : guardrails) {
    if (speed(g) < fastest * (1 - o.near_tie)) continue;
    if (guard == nullptr || safer(g, *guard)) guard = &g;
  }
  SearchResult chosen;
  if (!accepted.empty()) chosen = pick(accepted, num_sequences, o.near_tie, o.split_cache_gain);
  const double lp = accepted.empty() ? 0 : speed(chosen);
  const double rail = guard == nullptr ? 0 : speed(*guard);
  const double margin = o.guardrail_margin >= 0 || accepted.empty()
                            ? std::max(0.0, o.guardrail_margin)
                            : plan_class_band(plan_class(chosen.policy));
  if (guard != nullptr && (accepted.empty() || lp < rail * (1 + margin))) {
    chosen = *guard;
    chosen.chosen_by = "guardrail";
  } else {
    chosen.chosen_by = "LP";
  }
  chosen.lp_best_throughput = lp;
  chosen.guardrail_best_throughput = rail;
  chosen.guardrails_fitted = static_cast<int>(guardrails.size());
  chosen.guardrails_priced = o.guardrails && o.compression != CompressionMode::On;
  chosen.guardrail_margin = margin;
  return chosen;
}

[[noreturn]] void throw_infeasible(const model::Spec& spec, const runtime::Workload& workload,
                                   const runtime::Budgets& budgets, const HardwareProfile& hw, const SearchOptions& o) {
  InfeasibleInput in;
  in.spec = &spec;
  in.workload = workload;
  in.budgets = budgets;
  in.dtype_bytes = o.dtype_bytes;
  in.allow_compression = o.compression != CompressionMode::Off;
  in.compression = o.compression_config;
  in.allow_cpu_attention = o.allow_cpu_attention;
  in.allow_cpu_weight_compute = weight_compute_choices(o, hw).size() > 1;
  in.memory_cap_fraction = o.memory_cap_fraction;
  in.groups = o.groups;
  throw InfeasibleError(fmt::format("no placement of {} fits the memory budgets (gpu {}, cpu {}, disk {}) for prompts "
                                    "of {} and {} new tokens: {}",
                                    spec.name, format_bytes(budgets.gpu), format_bytes(budgets.cpu),
                                    format_bytes(budgets.disk), workload.prompt_len, workload.gen_len,
                                    explain_infeasible(in)));
}

// The best candidates, rounded to the placements the runtime can realise and checked
// exactly against the budgets (with, for each, the same plan with its KV cache whole
// on the cpu); `checked` counts the rounded ones.
std::vector<SearchResult> check_exactly(const model::Spec& spec, const ModelSizes& sizes,
                                        const std::vector<Candidate>& candidates, const runtime::Workload& workload,
                                        const runtime::Budgets& budgets, const HardwareProfile& hw,
                                        const SearchOptions& o, int& checked) {
  std::vector<SearchResult> accepted;
  for (const Candidate& c : candidates) {
    if (int(accepted.size()) >= o.exact_checks) break;
    ++checked;
    auto policy = round_to_executable(sizes, c.shape, c.answer.fractions, workload, budgets);
    spdlog::debug("candidate {} x {}, compress w/c {}/{}, cpu attention {}, cpu weight compute {}/{} at {:g}%: LP "
                  "{:.3f} token/s, wg {:.2f} cg {:.2f} hg {:.2f} -> {}",
                  c.shape.gpu_batch_size, c.shape.num_gpu_batches, c.shape.compress_weight.enabled,
                  c.shape.compress_cache.enabled, c.shape.cpu_cache_compute, c.shape.cpu_weight_compute_prefill,
                  c.shape.cpu_weight_compute_decode, c.shape.cpu_weight_compute_layer_percent,
                  double(workload.gen_len) / c.answer.seconds_per_token, c.answer.fractions[kWg],
                  c.answer.fractions[kCg], c.answer.fractions[kHg], policy ? "fits" : "does not fit after rounding");
    if (!policy) continue;
    if (policy->w_gpu_percent >= 100) {
      // Every weight on the gpu: none is multiplied where it lives (and the plan's
      // class, which sets its margin over the guardrails, says so).
      policy->cpu_weight_compute_prefill = policy->cpu_weight_compute_decode = false;
      policy->cpu_weight_compute_layer_percent = 100;
    }
    SearchResult r;
    r.policy = *policy;
    r.prediction = predict(spec, *policy, workload, hw, o.dtype_bytes);
    r.memory = runtime::plan_memory(spec, *policy, workload, o.dtype_bytes, sizes.stage_shape());
    r.lp_fractions = c.answer.fractions;
    r.lp_throughput = double(workload.gen_len) / c.answer.seconds_per_token;
    accepted.push_back(r);
    // The same candidate with its KV cache kept whole on the cpu, for the preference
    // in pick(): the LP happily splits a few percent of the cache onto the gpu.
    runtime::Policy whole = *policy;
    if (whole.cache_gpu_percent > 0 && whole.cache_gpu_percent < 100 && whole.cache_disk_percent() < 1e-9) {
      whole.cache_cpu_percent = 100;
      whole.cache_gpu_percent = 0;
      SearchResult w;
      w.memory = runtime::plan_memory(spec, whole, workload, o.dtype_bytes, sizes.stage_shape());
      if (w.memory.over_budget(budgets).empty()) {
        w.policy = whole;
        w.prediction = predict(spec, whole, workload, hw, o.dtype_bytes);
        w.lp_fractions = r.lp_fractions;
        w.lp_throughput = r.lp_throughput;
        accepted.push_back(w);
      }
    }
  }
  return accepted;
}

// The LP's memory caps to try in turn: the given share of the budgets, then 0.9 and 0.8
// of them where lower.
std::vector<double> cap_ladder(double first) {
  std::vector<double> ladder = {first};
  for (const double lower : {0.9, 0.8}) {
    if (lower < ladder.back()) ladder.push_back(lower);
  }
  return ladder;
}

}  // namespace

SearchResult search_policy(const model::Spec& spec, const runtime::Workload& workload,
                           const runtime::Budgets& budgets, const HardwareProfile& hw, const SearchOptions& o) {
  const auto started = std::chrono::steady_clock::now();
  TG_CHECK(workload.prompt_len >= 1 && workload.gen_len >= 1, "policy search: prompt and generation lengths must be positive");
  TG_CHECK(o.memory_cap_fraction > 0 && o.memory_cap_fraction <= 1, "policy search: memory cap fraction must be in (0, 1]");
  const ModelSizes sizes(spec, o.dtype_bytes, o.groups);
  // Plan at the full budgets the runtime enforces; only where no candidate survives
  // rounding to whole tensors does the LP plan again with headroom (0.9, then 0.8).
  SearchResult best;
  std::vector<SearchResult> accepted;
  std::vector<Candidate> candidates;
  for (const double fraction : cap_ladder(o.memory_cap_fraction)) {
    const std::array<double, runtime::kNumTiers> caps = {double(budgets.gpu) * fraction, double(budgets.cpu) * fraction,
                                                         double(budgets.disk) * fraction};
    candidates = solve_all(sizes, workload, caps, hw, o);
    std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
      return a.answer.seconds_per_token < b.answer.seconds_per_token;
    });
    accepted = check_exactly(spec, sizes, candidates, workload, budgets, hw, o, best.exact_checked);
    if (!accepted.empty()) break;
  }
  const std::vector<SearchResult> guardrails = price_guardrails(spec, sizes, workload, budgets, hw, o);
  if (accepted.empty() && guardrails.empty()) throw_infeasible(spec, workload, budgets, hw, o);
  const int checked = best.exact_checked;
  best = choose_with_guardrails(accepted, guardrails, workload.num_sequences, o);
  if (best.policy.w_gpu_percent >= 100) {
    // Every weight on the gpu: none is multiplied where it lives, whatever the
    // candidate's choice was; the policy says what will happen.
    best.policy.cpu_weight_compute_prefill = best.policy.cpu_weight_compute_decode = false;
    best.policy.cpu_weight_compute_layer_percent = 100;
  }
  best.exact_checked = checked;
  best.lp_solved = static_cast<int>(candidates.size());
  apply_threads(choose_threads(thread_input_for(spec, best.policy, workload, best.prediction, hw), hw), best.policy);
  // The kernels the profile's product rates were measured with, for the run to use.
  if (hw.cpu_small_matmul_max_rows > 0) {
    best.policy.small_matmul = runtime::SmallRowLimit{hw.cpu_product_dtype, hw.cpu_small_matmul_max_rows};
  }
  best.prediction = predict(spec, best.policy, workload, hw, o.dtype_bytes);  // at the chosen threads
  best.memory = runtime::plan_memory(spec, best.policy, workload, o.dtype_bytes, sizes.stage_shape());
  TG_CHECK(best.memory.over_budget(budgets).empty(), "policy search: internal error, chosen policy over budget: {}",
           best.memory.over_budget(budgets));
  best.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  spdlog::info("policy search: {} LPs feasible, {} rounded policies checked exactly, {} guardrails fitted; {} "
               "chosen, {:.3f} s",
               best.lp_solved, best.exact_checked, best.guardrails_fitted, best.chosen_by, best.seconds);
  return best;
}

}  // namespace tiergen::policy
