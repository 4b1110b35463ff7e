#pragma once
// Plan classes: policies the cost model predicts about equally well, with the error
// band measured runs allow it (bench/gpu-evidence/, tests/test_policy_evidence_replay).
// The search takes the LP's plan over the best guardrail only when it wins by more than
// its class's band, and `tiergen policy` prints the class and band beside a prediction.
#include "tiergen/runtime/policy.h"

namespace tiergen::policy {

enum class PlanClass {
  AllGpu,                    // weights, KV cache and activations on the GPU
  CpuAttentionBatches,       // CPU attention with 2+ gpu batches
  OneBatchHostActivations,   // one gpu batch, activations off the GPU
  CpuWeightCompute,          // host weights multiplied where they live
  Disk,                      // anything on disk
  LinkBound,                 // the rest: weights or cache streamed over the link
};

PlanClass plan_class(const runtime::Policy& policy);
const char* plan_class_name(PlanClass plan_class);
// The relative error band of the class's predictions: 0.10 link-bound; 0.15 all-GPU
// and CPU attention with 2+ gpu batches; 0.25 one gpu batch with host activations and
// CPU weight compute; 0.30 disk.
double plan_class_band(PlanClass plan_class);

}  // namespace tiergen::policy
