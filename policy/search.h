#pragma once
// Policy search (FlexGen section 4.3, LM-Offload sections 3–4): an outer enumeration
// over gpu batch size, number of gpu batches, compression and attention placement;
// for each, a linear program over the nine placement fractions minimises T/bls under
// the peak-memory constraints; the best fractional answers are rounded to executable
// percentages, re-checked with the runtime's exact byte accounting
// (runtime::plan_memory against the user's budgets) and ranked by predicted total
// throughput; LM-Offload's Algorithm 3 then picks thread counts.
#include <cstdint>
#include <string>
#include <vector>

#include "policy/cost_model.h"
#include "policy/hardware_profile.h"
#include "tiergen/model/spec.h"
#include "tiergen/runtime/placement.h"
#include "tiergen/runtime/policy.h"

namespace tiergen::policy {

enum class CompressionMode {
  Auto,  // try none, weights, KV cache and both; keep what the cost model prefers
  On,    // only policies that compress weights, KV cache or both
  Off,   // never compress
};
CompressionMode compression_mode_from_string(const std::string& text);
const char* compression_mode_name(CompressionMode mode);

struct SearchOptions {
  // Compression changes results, so the search uses it only when the user allows it.
  CompressionMode compression = CompressionMode::Off;
  bool allow_cpu_attention = true;
  // Matmuls of host-resident weights on the CPU (Policy::cpu_weight_compute_*), tried
  // when the hardware profile has the CPU's matmul rates.
  bool allow_cpu_weight_compute = true;
  int dtype_bytes = 2;
  // The share of each tier's budget the LP plans against: all of it (the runtime's exact
  // accounting, plan_memory, checks every rounded policy, and the default gpu budget
  // already reserves the allocator's excess). Where no candidate survives rounding the
  // LP plans again at 0.9, then 0.8 of the budgets (FlexGen's relaxation).
  double memory_cap_fraction = 1.0;
  runtime::CompressionConfig compression_config{true, 4, 64};
  // Empty: 1, 2, 4, every multiple of 8 to 128, 192, 256, ... 1024. Sizes above the workload's
  // num_sequences are dropped (and num_sequences itself is tried): a block never holds
  // more sequences than the job has.
  std::vector<int64_t> gpu_batch_sizes;
  int64_t max_num_gpu_batches = 256;
  int64_t num_gpu_batches = 0;  // > 0: only this many (a pipeline's stages share one block shape)
  // Blocks resident at once (a pipeline stage holds one per stage): the KV cache and
  // activations are counted this many times.
  int64_t groups = 1;
  int exact_checks = 8;  // best LP answers rounded and checked exactly
  // Weight of the sum of all lane times in the objective, breaking ties between
  // placements of equal T/bls in favour of less traffic.
  double tie_break = 1e-3;
  // Rounded policies predicted within this share of the fastest count as equally fast;
  // among them the one keeping the least on disk is chosen.
  double near_tie = 0.02;
  // A policy whose KV cache spans more tiers is kept only when it is predicted at
  // least this much faster than the best one with the cache on fewer tiers.
  double split_cache_gain = 0.05;
  // Guardrails (policy/guardrails.h): FlexGen-shaped policies priced beside the LP's
  // plans. The LP's plan is taken only when predicted more than this share faster than
  // the best guardrail that fits; negative: its plan class's error band (plan_class.h),
  // so that a plan wins only where the model can tell it apart.
  bool guardrails = true;
  double guardrail_margin = -1;
};

struct SearchResult {
  runtime::Policy policy;
  Prediction prediction;      // of the rounded, executable policy
  runtime::MemoryPlan memory;  // its exact peak bytes per tier
  Fractions lp_fractions{};    // the LP's fractional answer for the chosen candidate
  double lp_throughput = 0;    // and its throughput before rounding
  int lp_solved = 0;           // candidates whose LP was feasible
  int exact_checked = 0;       // rounded policies checked with plan_memory
  double seconds = 0;          // wall time of the search
  // How the policy was chosen: "LP" (predicted at least the margin faster than every
  // guardrail) or "guardrail"; the best of each side's predicted total throughput over
  // the job, its last block partly empty where the blocks do not divide it (0: none
  // fitted), and how many guardrails fitted.
  std::string chosen_by;
  double lp_best_throughput = 0, guardrail_best_throughput = 0;
  double guardrail_margin = 0;  // the SearchOptions::guardrail_margin applied
  int guardrails_fitted = 0;
  bool guardrails_priced = false;  // false: off (--no-guardrails) or compression required
};

// Throws tiergen::InfeasibleError when no placement fits the budgets.
SearchResult search_policy(const model::Spec& spec, const runtime::Workload& workload,
                           const runtime::Budgets& budgets, const HardwareProfile& hw,
                           const SearchOptions& options = {});

}  // namespace tiergen::policy
