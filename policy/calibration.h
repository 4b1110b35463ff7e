// Calibration of a hardware profile against measured runs: the rates that price the
// decode's largest terms are rescaled until the cost model predicts what the runs'
// per-task seconds were (`tiergen profile --calibrate-from RECORD...`).
//
// A profile's probes time one operation alone; a run times it among the others: the
// weight copies beside CPU attention's DRAM reads, CPU attention with its staging and
// synchronisation, the GPU's decode products at the run's row counts. The GPU runs kept
// in bench/gpu-evidence (2026-11-27, H100) showed all three off in ways that cancel in
// the total: weight loads 1.3x slower predicted than measured, CPU attention 1.3-1.8x
// faster, decode products 1.5-4x slower. A plan search over such a profile prices big
// batches wrong in two directions at once; calibration makes each term right.
//
// Three terms, each fitted on the runs where the task is priced by that rate alone:
//   weight link     LoadWeight in decode          -> bandwidth.cpu_to_gpu
//   cpu attention   CpuAttention in decode        -> cpu.attention_bandwidth (and the
//                   attention costs beside the bytes, cpu.attention_call_seconds and _task_seconds)
//   decode products Compute minus CpuAttention in decode (the runtime times CPU
//                   attention inside the layer's compute) -> gpu_flops.mm_decode and
//                   bmm_decode (a GPU host only: the stand-in's products are CPU rates)
//   cpu products    the same seconds on the CPU stand-in -> cpu.product_rates,
//                   cpu.gemv_bandwidth, cpu.matmul_flops, the short rows' rates, the
//                   cost per call and its gpu_flops decode rates
//                   (those seconds also hold the attention over its gpu tier, which the
//                   engine's CPU kernel runs and cpu.attention_* prices: this rule leaves
//                   those alone, so the product rates take up that term's error too)
// Each factor is the runs' summed predicted over summed measured seconds; the fit
// repeats until the factors settle, since a rate also moves the thread shares and
// max() terms around it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "policy/hardware_profile.h"
#include "tiergen/model/spec.h"
#include "tiergen/runtime/placement.h"
#include "tiergen/runtime/policy.h"

namespace tiergen::policy {

// One measured run: what ran and the decode seconds of the tasks calibration reads,
// summed over the run (every measured repetition, every block, every step: the decoder
// layers' and the embedding's and head's, as the runtime times them).
struct CalibrationRun {
  std::string source;  // the record's file, for messages
  model::Spec spec;
  runtime::Policy policy;
  runtime::Workload workload;
  int dtype_bytes = 2;           // the run's compute dtype, in bytes
  std::string dtype = "float16";  // and by name: its CPU products are priced in it
  double decode_steps = 0;  // a block's decode steps, over the run: blocks x reps x (gen - 1)
  double weight_load_seconds = 0;
  double cpu_attention_seconds = 0;
  double compute_seconds = 0;  // the steps' compute spans (layers, embedding, head), CPU attention inside
};

// A `tiergen bench --json` record (one with per-task seconds: run with a profile).
// Throws with the file named when the record lacks what calibration reads.
CalibrationRun calibration_run_from_record(const nlohmann::json& record, const std::string& source);

struct CalibrationTerm {
  std::string name;    // "weight link", "cpu attention", "decode products", "cpu products"
  std::string fields;  // the profile fields it scales
  int runs = 0;        // runs that priced it; 0: not fitted (factor 1)
  double measured_seconds = 0;
  double predicted_before = 0;  // under the base profile
  double predicted_after = 0;   // under the calibrated one
  double factor = 1;            // calibrated rate / base rate
  bool identifiable = true;     // false: the rate did not move these runs' prediction (left as it was)
  bool applies = true;          // false: not a term of this kind of profile (GPU host or CPU stand-in)
};

struct Calibration {
  HardwareProfile profile;
  std::vector<CalibrationTerm> terms;
  bool settled = true;  // every fitted term within 0.01% of its runs after the last round
};

Calibration calibrate(const HardwareProfile& base, const std::vector<CalibrationRun>& runs);

// The fit as a table: each term's runs, seconds before/after against measured, factor.
std::string calibration_table(const Calibration& calibration);

}  // namespace tiergen::policy
