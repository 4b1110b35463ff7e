#include "policy/plan_class.h"

namespace tiergen::policy {

PlanClass plan_class(const runtime::Policy& p) {
  if (p.w_disk_percent() > 0 || p.cache_disk_percent() > 0 || p.act_disk_percent() > 0) return PlanClass::Disk;
  if (p.cpu_weight_compute_prefill || p.cpu_weight_compute_decode) return PlanClass::CpuWeightCompute;
  if (p.num_gpu_batches == 1 && p.act_gpu_percent < 100) return PlanClass::OneBatchHostActivations;
  if (p.w_gpu_percent >= 100 && p.cache_gpu_percent >= 100 && p.act_gpu_percent >= 100) return PlanClass::AllGpu;
  if (p.cpu_cache_compute && p.cache_gpu_percent < 100 && p.num_gpu_batches >= 2) return PlanClass::CpuAttentionBatches;
  return PlanClass::LinkBound;
}

const char* plan_class_name(PlanClass c) {
  switch (c) {
    case PlanClass::AllGpu: return "all-gpu";
    case PlanClass::CpuAttentionBatches: return "cpu-attention, 2+ gpu batches";
    case PlanClass::OneBatchHostActivations: return "one gpu batch, host activations";
    case PlanClass::CpuWeightCompute: return "cpu weight compute";
    case PlanClass::Disk: return "disk";
    case PlanClass::LinkBound: return "link-bound";
  }
  return "?";
}

double plan_class_band(PlanClass c) {
  switch (c) {
    case PlanClass::LinkBound: return 0.10;
    case PlanClass::AllGpu:
    case PlanClass::CpuAttentionBatches: return 0.15;
    case PlanClass::OneBatchHostActivations:
    case PlanClass::CpuWeightCompute: return 0.25;
    case PlanClass::Disk: return 0.30;
  }
  return 0.30;
}

}  // namespace tiergen::policy
