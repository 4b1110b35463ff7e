#include "policy/cost_model.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <nlohmann/json.hpp>

#include "kernels/cpu/quantized_matmul.h"
#include "kernels/cpu/small_matmul.h"
#include "tiergen/common/kernel_elem_type.h"
#include "tiergen/model/linear.h"
#include "tiergen/common/error.h"
#include "tiergen/common/torch_compat.h"

namespace tiergen::policy {

const char* var_name(int var) {
  static const char* names[] = {"wg", "wc", "wn", "cg", "cc", "cn", "hg", "hc", "hn"};
  return var >= 0 && var < kNumVars ? names[var] : "?";
}

const char* lane_name(Lane lane) {
  static const char* names[] = {"cpu_to_gpu", "gpu_to_cpu", "disk_to_cpu", "cpu_to_disk", "compute"};
  return names[static_cast<int>(lane)];
}

const char* task_name(Task task) {
  static const char* names[] = {"weight_load",      "cache_load", "cache_store", "activation_load",
                                "activation_store", "compute",    "cpu_attention", "dequantize", "quantize"};
  return names[static_cast<int>(task)];
}

const char* bound_name(Bound bound) {
  static const char* names[] = {"weight_loader", "cache_loader", "storer",     "compute",   "link_to_gpu",
                                "link_from_gpu", "disk_read",    "disk_write", "host_cores", "queues_in_turn"};
  return names[static_cast<int>(bound)];
}

void PhaseModel::add(Lane lane, Task task, runtime::Task runs_as, const Linear& seconds) {
  namespace schedule = runtime::schedule;
  const bool on_compute_path = schedule::on_compute_path(runs_as, batches);
  const schedule::Queue queue = on_compute_path ? schedule::Queue::Compute : schedule::queue_of(runs_as, batches);
  queues[static_cast<int>(queue)] += seconds;
  lanes[static_cast<int>(lane)] += seconds;
  tasks[static_cast<int>(task)] += seconds;
  // A host standing in for the GPU computes, (de)quantizes and copies between its tiers
  // on the same cores: their sum bounds the layer whichever queues run them.
  if (gpu_is_host && (queue == schedule::Queue::Compute || (lane != Lane::DiskToCpu && lane != Lane::CpuToDisk))) {
    host_cores += seconds;
  } else if (gpu_is_host && lane == Lane::DiskToCpu) {
    // A disk read beside compute runs on the disk's time, but takes the cores some of it
    // (a buffered read copies on a core, and the compute team waits for the core it lost).
    host_cores += seconds * (task == Task::CacheLoad ? disk_cache_read_core_share : disk_read_core_share);
  }
  if (queue == schedule::Queue::Compute && lane == Lane::CpuToGpu) inline_to_gpu += seconds;
}

namespace {
bool is_zero(const Linear& l) {
  if (l.constant != 0) return false;
  for (double c : l.coef) {
    if (c != 0) return false;
  }
  return true;
}
}  // namespace

std::vector<PhaseBound> phase_bounds(const PhaseModel& phase) {
  namespace schedule = runtime::schedule;
  std::vector<PhaseBound> bounds;
  const double steps = double(phase.steps);
  for (int q = 0; q < schedule::kNumQueues; ++q) {
    const auto queue = static_cast<schedule::Queue>(q);
    const auto bound = static_cast<Bound>(q);  // the queues lead Bound, in the same order
    static_assert(static_cast<int>(Bound::WeightLoader) == static_cast<int>(schedule::Queue::WeightLoader) &&
                  static_cast<int>(Bound::CacheLoader) == static_cast<int>(schedule::Queue::CacheLoader) &&
                  static_cast<int>(Bound::Storer) == static_cast<int>(schedule::Queue::Storer) &&
                  static_cast<int>(Bound::Compute) == static_cast<int>(schedule::Queue::Compute));
    if (schedule::await_of(queue) == schedule::Await::NextLayer) {
      // A step whose compute copies over the weights' link waits for their copies, and
      // still has its own work after them.
      bounds.push_back({bound, false, phase.queues[q]});
      if (!phase.gpu_is_host && schedule::inline_copies_wait_for_weights() && !is_zero(phase.inline_to_gpu)) {
        bounds.push_back({bound, false, phase.queues[q], 1.0, phase.inline_to_gpu});
      }
      continue;
    }
    Linear per_step = phase.queues[q] / steps;
    if (queue == schedule::Queue::Compute) per_step += Linear::of(phase.step_fixed);
    bounds.push_back({bound, true, per_step});
  }
  bounds.push_back({Bound::Compute, false, Linear{}, steps});  // the steps one after another
  if (phase.gpu_is_host) {
    bounds.push_back({Bound::HostCores, false, phase.host_cores + Linear::of(steps * phase.step_fixed)});
  } else {
    bounds.push_back({Bound::LinkToGpu, false, phase.lanes[static_cast<int>(Lane::CpuToGpu)]});
    bounds.push_back({Bound::LinkFromGpu, false, phase.lanes[static_cast<int>(Lane::GpuToCpu)]});
  }
  bounds.push_back({Bound::DiskRead, false, phase.lanes[static_cast<int>(Lane::DiskToCpu)]});
  bounds.push_back({Bound::DiskWrite, false, phase.lanes[static_cast<int>(Lane::CpuToDisk)]});
  if (!phase.queues_concurrent) {
    // Overlap off: every queue's work in turn, and each step's fixed cost.
    Linear in_turn = Linear::of(steps * phase.step_fixed);
    for (int q = 0; q < schedule::kNumQueues; ++q) in_turn += phase.queues[q];
    bounds.push_back({Bound::InTurn, false, in_turn});
  }
  return bounds;
}

namespace {

using RT = runtime::Task;  // what the runtime runs a priced piece of work as

// Everything a phase builder needs, with FlexGen's symbols.
struct Terms {
  const ModelSizes& sizes;
  const runtime::Policy& policy;
  const HardwareProfile& hw;
  double s, n, bls;
  double w;        // one decoder layer's weights at home (compressed or not)
  double hidden;   // bytes of one token's hidden state
  double kv;       // dense KV bytes of one token, one layer
  double kv_home;  // KV bytes of one token, one layer, as stored
  bool prefill = false;  // the phase whose terms these are
};

// A phase of `weight_layers` weight layers, each one step per gpu batch.
PhaseModel empty_phase(const Terms& t, int64_t weight_layers) {
  PhaseModel phase;
  phase.batches = t.policy.num_gpu_batches;
  phase.steps = runtime::schedule::steps_per_token(weight_layers, t.policy.num_gpu_batches);
  phase.step_fixed = t.hw.step_seconds;
  phase.gpu_is_host = t.hw.gpu_is_host;
  phase.queues_concurrent = runtime::schedule::queues_run_concurrently(t.policy.overlap);
  if (t.hw.disk_read_core_bandwidth > 0) {
    phase.disk_read_core_share = t.hw.disk_to_cpu / t.hw.disk_read_core_bandwidth;
    phase.disk_cache_read_core_share = t.hw.disk_to_cpu_cache / t.hw.disk_read_core_bandwidth;
  }
  return phase;
}

// One weight layer's products on the CPU over its weights at home, one of `rows` rows
// doing `flops` per gpu batch: `stored` bytes as they live, `dense` their dense bytes,
// `compressed_dense` the dense bytes of the part stored compressed, in `calls` product
// calls per gpu batch (its matrices: dense products pay each call's cost beside their
// bytes, HardwareProfile::cpu_product_seconds), at their row lengths. Compressed weights
// are multiplied in place (their stored bytes read at the rate timed for as many rows)
// or dequantized once per layer load, as the runtime chooses for the phase
// (model::quantized_product_in_place: by the phase while CPU products are batch-
// invariant, else by the rows). Dequantized, a load's first product of up to 256 rows
// multiplies tiles dequantized into cache (model::multiplies_in_dequantized_tiles), at
// the rate the profile timed for those (HardwareProfile::cpu_dequantize_tiles); a
// second product (the load's next gpu batch) makes the dense copy the later ones share,
// its writes to memory at cpu_dequantize. The products themselves are priced as the
// dense ones are.
double cpu_products_at_home(const Terms& t, double rows, double flops, double stored, double dense,
                            double compressed_dense, double calls, const ProductRowLengths& row_lengths) {
  const double gpu_batches = double(t.policy.num_gpu_batches);
  if (!t.policy.compress_weight.enabled) {
    return gpu_batches * t.hw.cpu_product_seconds(rows, stored, flops, calls, row_lengths);
  }
  // bf16 activations: the dtype whose products the profile prices (cpu_product_dtype).
  const bool bf16_activations = t.hw.cpu_product_dtype == "bfloat16";
  const runtime::CompressionConfig& c = t.policy.compress_weight;
  const model::ProductPhase phase = t.prefill ? model::ProductPhase::Prefill : model::ProductPhase::Decode;
  const int64_t whole_rows = static_cast<int64_t>(std::ceil(rows));
  if (model::quantized_product_in_place(phase, whole_rows, bf16_activations, c.bits, c.group_size)) {
    // As the profile timed these products, else estimated from the dense rates; each
    // call's cost beside the bytes as the profile timed the in-place calls, else as the
    // dense products' calls pay it.
    // Timed over rows of the main length only: at the layer's row lengths they cost what
    // the dense products do there (HardwareProfile::cpu_row_length_factor).
    const double factor = t.hw.cpu_row_length_factor(rows, row_lengths);
    const std::optional<double> timed = t.hw.cpu_quantized_product_seconds(c.bits, rows, stored);
    const double by_bytes = timed ? *timed * factor
                                  : std::max(flops / t.hw.cpu_matmul_rate(), stored / t.hw.cpu_gemv_rate() * factor);
    const double per_call = t.hw.cpu_quantized_call_seconds_at(c.bits, rows).value_or(t.hw.cpu_call_seconds_at(rows));
    return gpu_batches * (by_bytes + calls * per_call);
  }
  const double copy = compressed_dense / t.hw.cpu_dequantize;
  // (A profile that names no dtype or timed no tiles prices the copy alone, as before
  // tiles.) Under the small-row limit the plan's run will apply: the profile's.
  bool tiles = false;
  if (t.hw.cpu_dequantize_tiles > 0 && !t.hw.cpu_product_dtype.empty()) {
    const at::ScalarType dtype = compat::parse_dtype(t.hw.cpu_product_dtype);
    const int64_t limit = kernels::small_matmul_max_rows_under(kernel_elem_type(dtype), t.hw.cpu_small_matmul_max_rows);
    tiles = model::multiplies_in_dequantized_tiles(dtype, whole_rows, limit);
  }
  if (!tiles) return copy + gpu_batches * t.hw.cpu_product_seconds(rows, dense, flops, calls, row_lengths);
  // Tiles were timed in 16 bits: priced per element (an fp32 model's are twice the bytes,
  // written to cache all the same).
  const double in_tiles = compressed_dense / t.sizes.dtype_bytes() * 2 / t.hw.cpu_dequantize_tiles;
  const double dequantize = in_tiles + (gpu_batches > 1 ? copy : 0.0);
  return dequantize + gpu_batches * t.hw.cpu_product_seconds(rows, dense, flops, calls, row_lengths);
}

// The layer's matmuls for the whole block on the CPU, over weights as they live at
// home: one product of gpu_batch_size x `tokens` rows per gpu batch (cpu_products_at_home).
double cpu_matmul_seconds(const Terms& t, double tokens) {
  const double gpu_batches = double(t.policy.num_gpu_batches);
  const double rows = double(t.policy.gpu_batch_size) * tokens;
  const double flops = t.bls * tokens * t.sizes.linear_flops_per_token() / gpu_batches;
  return cpu_products_at_home(t, rows, flops, t.w, t.sizes.layer_weight_dense_bytes(),
                              t.sizes.layer_compressed_dense_bytes(t.policy.compress_weight),
                              t.sizes.linear_products(), t.sizes.layer_row_lengths());
}

// The layer's matmuls for the whole block, one product of gpu_batch_size x `tokens`
// rows per gpu batch on the compute device (HardwareProfile::device_product_seconds):
// FLOPs over the matmul rate, never faster than reading the dense weights once per gpu
// batch (the roofline of the small batches of decode). A host standing in for the GPU
// keeps compressed weights compressed wherever they live and multiplies them as it does
// at home (cpu_matmul_seconds): in place or dequantized, as the runtime picks for the
// phase (model::quantized_product_in_place).
double linear_seconds(const Terms& t, double tokens_per_sequence, double flops_rate) {
  if (t.hw.gpu_is_host && t.policy.compress_weight.enabled) return cpu_matmul_seconds(t, tokens_per_sequence);
  const double gpu_batches = double(t.policy.num_gpu_batches);
  const double rows = double(t.policy.gpu_batch_size) * tokens_per_sequence;
  const double flops = t.bls * tokens_per_sequence * t.sizes.linear_flops_per_token() / gpu_batches;
  return gpu_batches * t.hw.device_product_seconds(rows, t.sizes.layer_weight_dense_bytes(), flops, flops_rate,
                                                   t.sizes.linear_products(), t.sizes.layer_row_lengths());
}

// Activations crossing between the compute device and the host for work done at home
// (`to_host` bytes down, `to_device` back): none where the host stands in for the GPU,
// whose weights at home and compute are one device (model::linear and lookup_rows move
// nothing there).
double host_crossing_seconds(const Terms& t, double to_host, double to_device) {
  if (t.hw.gpu_is_host) return 0;
  return to_host / t.hw.gpu_to_cpu_hidden + to_device / t.hw.cpu_to_gpu;
}

// The share of the layers whose host-resident weights are multiplied at home in this
// phase (Policy::cpu_weight_compute_*). The model is of an average layer: with those
// layers spread evenly and the next layer's weights loaded during this layer's compute,
// a mix of loaded and at-home layers overlaps the link with the CPU.
double at_home_share(const runtime::Policy& policy, bool prefill) {
  return policy.cpu_weight_compute(prefill) ? policy.cpu_weight_compute_layer_percent / 100.0 : 0.0;
}

// `bytes` of weights stream from their homes to the gpu every layer, in prefill and
// decode alike, on the weight loader; compressed ones are dequantized on the gpu as
// they arrive (LM-Offload eq. 4, 16; `dense`: their dense bytes). Weights multiplied
// at home (the `at_home` share of the layers) are still read from disk, but neither
// cross the link nor are dequantized on the gpu.
void add_weight_terms(const Terms& t, double bytes, double dense, double at_home, PhaseModel& phase) {
  phase.add(Lane::CpuToGpu, Task::WeightLoad, RT::LoadWeight,
            Linear::sum((1 - at_home) * bytes / t.hw.cpu_to_gpu, {kWc, kWn}));
  phase.add(Lane::DiskToCpu, Task::WeightLoad, RT::LoadWeight, Linear::sum(bytes / t.hw.disk_to_cpu, {kWn}));
  // (A host standing in for the GPU keeps them compressed: its products dequantize.)
  if (t.policy.compress_weight.enabled && !t.hw.gpu_is_host) {
    const double seconds = dense / t.hw.gpu_dequantize;
    phase.add(Lane::Compute, Task::Dequantize, RT::LoadWeight,
              Linear::sum(seconds, {kWg}) + Linear::sum((1 - at_home) * seconds, {kWc, kWn}));
  }
}

// The layer's matmuls of `tokens` per sequence: on the gpu, or, for the weights
// multiplied at home (wc + wn, in the `at_home` share of the layers), on the CPU
// (cpu_matmul_seconds); every matrix's input goes to the host and its output comes
// back, inside the compute step (host_crossing_seconds).
void add_matmul_terms(const Terms& t, double tokens, double gpu_flops_rate, double at_home, PhaseModel& phase) {
  const double on_gpu = linear_seconds(t, tokens, gpu_flops_rate);
  if (at_home <= 0) {
    phase.add(Lane::Compute, Task::Compute, RT::Compute, Linear::of(on_gpu));
    return;
  }
  phase.add(Lane::Compute, Task::Compute, RT::Compute,
            Linear::sum(on_gpu, {kWg}) + Linear::sum((1 - at_home) * on_gpu, {kWc, kWn}));
  const double on_cpu = cpu_matmul_seconds(t, tokens);
  const double crossing = host_crossing_seconds(t, t.bls * tokens * t.sizes.linear_input_bytes_per_token(),
                                                t.bls * tokens * t.sizes.linear_output_bytes_per_token());
  phase.add(Lane::Compute, Task::Compute, RT::Compute, Linear::sum(at_home * (on_cpu + crossing), {kWc, kWn}));
}

// Hidden states of `tokens` per sequence leave the gpu after a layer and come back
// for the next one unless they live on the gpu (A.3 hidden_ctog, hidden_gtoc, ...).
// With one gpu batch the schedule cannot load them ahead: the store and the load lie
// on the compute queue's path (block_schedule.h).
void add_activation_terms(const Terms& t, double tokens, double cpu_to_disk, PhaseModel& phase) {
  const double bytes = tokens * t.hidden * t.bls;
  phase.add(Lane::CpuToGpu, Task::ActivationLoad, RT::LoadHidden, Linear::sum(bytes / t.hw.cpu_to_gpu, {kHc, kHn}));
  phase.add(Lane::DiskToCpu, Task::ActivationLoad, RT::LoadHidden, Linear::sum(bytes / t.hw.disk_to_cpu, {kHn}));
  phase.add(Lane::GpuToCpu, Task::ActivationStore, RT::StoreHidden,
            Linear::sum(bytes / t.hw.gpu_to_cpu_hidden, {kHc, kHn}));
  phase.add(Lane::CpuToDisk, Task::ActivationStore, RT::StoreHidden, Linear::sum(bytes / cpu_to_disk, {kHn}));
}

PhaseModel build_prefill(const Terms& t) {
  PhaseModel phase = empty_phase(t, 1);
  const double at_home = at_home_share(t.policy, true);
  add_weight_terms(t, t.w, t.sizes.layer_compressed_dense_bytes(t.policy.compress_weight), at_home, phase);
  add_activation_terms(t, t.s, t.hw.cpu_to_disk_hidden_prefill, phase);
  // The prompt's KV cache (FlexGen counts s + 1 positions) goes to its homes.
  const double cache = t.bls * (t.s + 1) * t.kv_home;
  phase.add(Lane::GpuToCpu, Task::CacheStore, RT::StoreCache, Linear::sum(cache / t.hw.gpu_to_cpu_cache, {kCc, kCn}));
  phase.add(Lane::CpuToDisk, Task::CacheStore, RT::StoreCache,
            Linear::sum(cache / t.hw.cpu_to_disk_cache_prefill, {kCn}));
  // Prefill's s×s attention is on the gpu; its matmuls where the policy puts them.
  const double attention = t.bls * t.s * t.sizes.attention_flops(t.s);
  phase.add(Lane::Compute, Task::Compute, RT::Compute, Linear::of(attention / t.hw.bmm_flops_prefill));
  add_matmul_terms(t, t.s, t.hw.mm_flops_prefill, at_home, phase);
  // LM-Offload eq. 5: the prefilled cache is quantized on the gpu, not overlapped.
  if (t.policy.compress_cache.enabled) {
    phase.serial += Linear::of(t.bls * t.s * t.kv / t.hw.gpu_quantize);
    phase.tasks[static_cast<int>(Task::Quantize)] += Linear::of(t.bls * t.s * t.kv / t.hw.gpu_quantize);
  }
  return phase;
}

// Seconds of the engine's CPU attention kernel (kernels/cpu/attention.h) over `dense`
// bytes of K and V of the block's sequences: the bytes at the profile's rate, and beside
// them, as the profile timed them, a task per sequence and kv head, spread over the
// threads like the bytes, and a call per gpu batch. The profile's rate is at every core;
// a policy whose thread search gave the kernel fewer intra-op threads runs it at that
// many (the search itself plans at all cores).
double cpu_attention_kernel_seconds(const Terms& t, double dense) {
  const int threads = t.policy.threads.compute_intra_op;
  const double thread_share =
      threads > 0 && threads < t.hw.cpu_threads ? t.hw.thread_speedup(threads) / t.hw.thread_speedup(t.hw.cpu_threads) : 1.0;
  const double rate = t.hw.cpu_attention_bandwidth * thread_share;
  const double tasks = t.bls * double(t.sizes.num_kv_heads());
  const double calls = double(t.policy.num_gpu_batches);
  return dense / rate + tasks * t.hw.cpu_attention_task_seconds / thread_share +
         calls * t.hw.cpu_attention_call_seconds;
}

// Decode attention over the gpu tier of a host standing in for the GPU. The runtime
// attends that tier with the engine's CPU attention kernel, in place
// (runtime::KvCache::decode_attention), as it attends a cache at home: its bytes and
// calls (cpu_attention_kernel_seconds) and, for a compressed cache, the dequantization
// fused into it, as add_cpu_attention_terms prices them. LibTorch's bmm rate, which the
// profile times on the host (6.8 GFLOP/s on a 2-core Zen 5 guest), priced a TinyLlama
// layer at 16 sequences and 144 positions at 2.76 ms, and its bf16 decode at 0.65x of
// the measured speed.
void add_stand_in_gpu_tier_attention(const Terms& t, double context, PhaseModel& phase) {
  const double dense = t.bls * context * t.kv;
  phase.add(Lane::Compute, Task::Compute, RT::Compute, Linear::sum(cpu_attention_kernel_seconds(t, dense), {kCg}));
  if (t.policy.compress_cache.enabled) {
    phase.add(Lane::Compute, Task::Dequantize, RT::Compute, Linear::sum(dense / t.hw.cpu_dequantize, {kCg}));
  }
}

// Seconds of decode attention over the whole cache as LibTorch's batched products: a
// GPU's, its FLOPs at the profile's batched-product rate; and the stand-in's over the
// share it loads from its cpu and disk tiers (add_gpu_attention_terms), as the profile
// timed that attention in the job's dtype where it did (LoadedCacheAttention: its units,
// positions, scores and bytes, and a call per gpu batch), since priced as FLOPs it took
// 0.2x to 5x the price by shape and dtype. The call is charged by the loaded share, as
// add_cpu_attention_terms charges its calls: a part of a call short for a cache split
// between the gpu tier and the others, a call short for one split over cpu and disk.
double decode_attention_products_seconds(const Terms& t, double context) {
  const LoadedCacheAttention& loaded = t.hw.cpu_loaded_cache_attention;
  if (t.hw.gpu_is_host && loaded.timed()) {
    const double units = t.bls * double(t.sizes.num_kv_heads());
    return loaded.seconds(double(t.policy.num_gpu_batches), units, units * context,
                          t.bls * double(t.sizes.num_heads()) * context, t.bls * context * t.kv);
  }
  return t.bls * t.sizes.attention_flops(context) / t.hw.bmm_flops_decode;
}

// Decode attention where the KV cache lives on cpu/disk, computed on the cpu: no KV
// moves over PCIe, only q/k/v of the new token go down and the output comes back, all
// on the compute queue (the schedule runs CPU attention with its copies there).
void add_cpu_attention_terms(const Terms& t, double context, PhaseModel& phase) {
  const double dense = t.bls * context * t.kv;
  // Charged by the share of the cache off the gpu, as the LP's terms are linear in the
  // shares: right for a cache wholly off the gpu or wholly on it (no call: the flag does
  // nothing there), a part of a call short for a cache split between them (on the
  // stand-in, whose gpu tier the same kernel attends in a call of its own, a call short),
  // and a call short for one split over cpu and disk (a kernel call per tier).
  phase.add(Lane::Compute, Task::CpuAttention, RT::CpuAttention,
            Linear::sum(cpu_attention_kernel_seconds(t, dense), {kCc, kCn}));
  if (t.policy.compress_cache.enabled) {
    phase.add(Lane::Compute, Task::Dequantize, RT::CpuAttention, Linear::sum(dense / t.hw.cpu_dequantize, {kCc, kCn}));
    phase.add(Lane::Compute, Task::Quantize, RT::CpuAttention, Linear::sum(t.bls * t.kv / t.hw.cpu_quantize, {kCc, kCn}));
  }
  // q and the new k and v go down, the output comes back. On a host standing in for the
  // GPU in fp32 only k and v move (into the cache's rows): q and the output are already
  // where the fp32 kernel reads and writes them (KvCache::cpu_kernel_attention's copies
  // do nothing there). In 16 bits they are converted to and from fp32 there instead, a
  // pass over the same bytes, priced as the crossing.
  const bool q_and_output_stay = t.hw.gpu_is_host && t.sizes.dtype_bytes() == 4;
  const double down = t.bls * (q_and_output_stay ? t.sizes.kv_bytes_per_token() : t.sizes.qkv_bytes_per_token());
  const double back = q_and_output_stay ? 0.0 : t.bls * t.hidden / t.hw.cpu_to_gpu;
  phase.add(Lane::GpuToCpu, Task::CacheStore, RT::CpuAttention, Linear::sum(down / t.hw.gpu_to_cpu_hidden, {kCc, kCn}));
  phase.add(Lane::CpuToGpu, Task::ActivationLoad, RT::CpuAttention, Linear::sum(back, {kCc, kCn}));
  phase.add(Lane::DiskToCpu, Task::CacheLoad, RT::LoadCache,
            Linear::sum(t.bls * context * t.kv_home / t.hw.disk_to_cpu_cache, {kCn}));
  phase.add(Lane::CpuToDisk, Task::CacheStore, RT::StoreCache, Linear::sum(t.bls * t.kv_home / t.hw.cpu_to_disk_decode, {kCn}));
  // The gpu-resident part of the cache is attended on the gpu.
  if (t.hw.gpu_is_host) {
    add_stand_in_gpu_tier_attention(t, context, phase);
  } else {
    phase.add(Lane::Compute, Task::Compute, RT::Compute,
              Linear::sum(decode_attention_products_seconds(t, context), {kCg}));
  }
}

// Decode attention on the gpu: the offloaded cache is loaded (A.3 cache_dtoc, plus
// cpu→gpu), the new token's KV stored back; with compression the whole cache is
// dequantized per load (eq. 6, 24) and the new KV quantized per store (eq. 7, 19–23),
// on the loader's and the storer's streams.
void add_gpu_attention_terms(const Terms& t, double context, PhaseModel& phase) {
  const double old_cache = t.bls * context * t.kv_home;
  phase.add(Lane::CpuToGpu, Task::CacheLoad, RT::LoadCache, Linear::sum(old_cache / t.hw.cpu_to_gpu_cache, {kCc, kCn}));
  phase.add(Lane::DiskToCpu, Task::CacheLoad, RT::LoadCache, Linear::sum(old_cache / t.hw.disk_to_cpu_cache, {kCn}));
  const double new_cache = t.bls * t.kv_home;
  phase.add(Lane::GpuToCpu, Task::CacheStore, RT::StoreCache, Linear::sum(new_cache / t.hw.gpu_to_cpu_cache, {kCc, kCn}));
  phase.add(Lane::CpuToDisk, Task::CacheStore, RT::StoreCache, Linear::sum(new_cache / t.hw.cpu_to_disk_decode, {kCn}));
  if (t.policy.compress_cache.enabled) {
    phase.add(Lane::Compute, Task::Quantize, RT::StoreCache, Linear::of(t.bls * t.kv / t.hw.gpu_quantize));
  }
  if (!t.hw.gpu_is_host) {
    if (t.policy.compress_cache.enabled) {
      phase.add(Lane::Compute, Task::Dequantize, RT::LoadCache, Linear::of(t.bls * context * t.kv / t.hw.gpu_dequantize));
    }
    phase.add(Lane::Compute, Task::Compute, RT::Compute, Linear::of(decode_attention_products_seconds(t, context)));
    return;
  }
  // The stand-in attends its own gpu tier with the CPU kernel, and the share it loads
  // from its cpu and disk tiers (dequantized as it arrives) with LibTorch's products.
  add_stand_in_gpu_tier_attention(t, context, phase);
  if (t.policy.compress_cache.enabled) {
    phase.add(Lane::Compute, Task::Dequantize, RT::LoadCache,
              Linear::sum(t.bls * context * t.kv / t.hw.gpu_dequantize, {kCc, kCn}));
  }
  phase.add(Lane::Compute, Task::Compute, RT::Compute,
            Linear::sum(decode_attention_products_seconds(t, context), {kCc, kCn}));
}

PhaseModel build_decode(const Terms& t) {
  PhaseModel phase = empty_phase(t, 1);
  const double at_home = at_home_share(t.policy, false);
  add_weight_terms(t, t.w, t.sizes.layer_compressed_dense_bytes(t.policy.compress_weight), at_home, phase);
  add_activation_terms(t, 1, t.hw.cpu_to_disk_decode, phase);
  const double context = t.s + t.n / 2;  // average context over the decode steps
  if (t.policy.cpu_cache_compute) {
    add_cpu_attention_terms(t, context, phase);
  } else {
    add_gpu_attention_terms(t, context, phase);
  }
  add_matmul_terms(t, 1, t.hw.mm_flops_decode, at_home, phase);
  return phase;
}

// The embedding and the head of one token: two weight layers the runtime loads (the
// embedding's tables in prefill only) and steps through like the decoder layers (placed
// by the same fractions), the head's product over each sequence's last position, and
// the hidden state's one more trip (stored after the embedding, loaded before the head:
// L+1 of each per token).
PhaseModel build_edges(const Terms& t, bool prefill) {
  PhaseModel phase = empty_phase(t, 2);
  const runtime::CompressionConfig& compress = t.policy.compress_weight;
  // Where the runtime uses them at home (runtime::weight_multiplied_at_home), their host
  // part never crosses: the embedding's tables in every decode step, and, with CPU
  // weight compute in this phase at any share of the decoder layers, the whole
  // embedding and head.
  const double at_home = at_home_share(t.policy, prefill) > 0 ? 1.0 : 0.0;
  const double tables_at_home = prefill ? at_home : 1.0;
  const double tables = t.sizes.embedding_table_bytes();
  add_weight_terms(t, t.sizes.edge_weight_bytes(compress) - tables, t.sizes.edge_compressed_dense_bytes(compress),
                   at_home, phase);
  add_activation_terms(t, prefill ? t.s : 1,
                       prefill ? t.hw.cpu_to_disk_hidden_prefill : t.hw.cpu_to_disk_decode, phase);
  // The rows looked up at home go to the device, every position's. A decode step reads
  // only its rows of a table on disk, as the compute queue looks them up.
  const double positions = prefill ? t.s : 1;
  const double rows_bytes = t.bls * positions * t.sizes.embedding_output_bytes_per_token();
  Linear compute = Linear::sum(tables_at_home * host_crossing_seconds(t, 0, rows_bytes), {kWc, kWn});
  if (prefill) {
    add_weight_terms(t, tables, 0, tables_at_home, phase);
  } else {
    compute += Linear::sum(rows_bytes / t.hw.disk_to_cpu, {kWn});
  }
  const double rows = double(t.policy.gpu_batch_size);
  const double flops = rows * t.sizes.head_flops_per_token();
  // The stand-in multiplies a compressed head as it would at home (linear_seconds).
  const double on_device =
      t.hw.gpu_is_host && compress.enabled
          ? cpu_products_at_home(t, rows, flops, t.sizes.head_weight_bytes(compress), t.sizes.head_dense_bytes(),
                                 t.sizes.head_compressed_dense_bytes(compress), t.sizes.head_products(),
                                 t.sizes.head_row_lengths())
          : double(t.policy.num_gpu_batches) *
                t.hw.device_product_seconds(rows, t.sizes.head_dense_bytes(), flops, t.hw.mm_flops_decode,
                                            t.sizes.head_products(), t.sizes.head_row_lengths());
  if (at_home <= 0) {
    phase.add(Lane::Compute, Task::Compute, RT::Compute, compute + Linear::of(on_device));
    return phase;
  }
  // The head's product at home: its input goes to the host and the logits come back.
  const double on_cpu =
      cpu_products_at_home(t, rows, flops, t.sizes.head_weight_bytes(compress), t.sizes.head_dense_bytes(),
                           t.sizes.head_compressed_dense_bytes(compress), t.sizes.head_products(),
                           t.sizes.head_row_lengths());
  const double crossing = host_crossing_seconds(t, t.bls * t.sizes.hidden_bytes_per_token(),
                                                t.bls * t.sizes.logits_bytes_per_token());
  phase.add(Lane::Compute, Task::Compute, RT::Compute,
            compute + Linear::sum(on_device, {kWg}) + Linear::sum(on_cpu + crossing, {kWc, kWn}));
  return phase;
}

PhaseTimes evaluate_phase(const PhaseModel& phase, const Fractions& p) {
  PhaseTimes times;
  const std::vector<PhaseBound> bounds = phase_bounds(phase);
  double step = 0;
  Bound step_bound = Bound::Compute;
  for (const PhaseBound& b : bounds) {
    if (b.per_step && b.seconds.at(p) > step) {
      step = b.seconds.at(p);
      step_bound = b.bound;
    }
  }
  double layer = 0;
  for (const PhaseBound& b : bounds) {
    if (b.per_step || (b.applies_where && b.applies_where->at(p) <= 0)) continue;
    const double seconds = b.seconds.at(p) + b.steps_after * step;
    if (seconds > layer) {
      layer = seconds;
      // The steps one after another (the one whole-layer compute bound) are as long as
      // their busiest queue.
      times.bottleneck = b.bound == Bound::Compute ? step_bound : b.bound;
    }
  }
  times.layer_seconds = phase.serial.at(p) + layer;
  times.fixed_seconds = double(phase.steps) * phase.step_fixed;
  for (int i = 0; i < kNumLanes; ++i) times.lanes[i] = phase.lanes[i].at(p);
  for (int i = 0; i < runtime::schedule::kNumQueues; ++i) times.queues[i] = phase.queues[i].at(p);
  for (int i = 0; i < kNumTasks; ++i) times.tasks[i] = phase.tasks[i].at(p);
  return times;
}

nlohmann::json phase_to_json(const PhaseTimes& t) {
  nlohmann::json lanes, tasks, queues;
  for (int i = 0; i < kNumLanes; ++i) lanes[lane_name(static_cast<Lane>(i))] = t.lanes[i];
  for (int i = 0; i < runtime::schedule::kNumQueues; ++i) {
    queues[runtime::schedule::queue_name(static_cast<runtime::schedule::Queue>(i))] = t.queues[i];
  }
  for (int i = 0; i < kNumTasks; ++i) tasks[task_name(static_cast<Task>(i))] = t.tasks[i];
  return {{"layer_seconds", t.layer_seconds}, {"bottleneck", bound_name(t.bottleneck)},
          {"fixed_seconds", t.fixed_seconds}, {"lanes", lanes}, {"queues", queues}, {"tasks", tasks}};
}

}  // namespace

CostModel build_cost_model(const ModelSizes& sizes, const runtime::Policy& policy,
                           const runtime::Workload& workload, const HardwareProfile& hw) {
  TG_CHECK(workload.prompt_len >= 1 && workload.gen_len >= 1, "cost model: prompt and generation lengths must be positive");
  const Terms t{sizes,
                policy,
                hw,
                double(workload.prompt_len),
                double(workload.gen_len),
                double(policy.block_size()),
                sizes.layer_weight_bytes(policy.compress_weight),
                sizes.hidden_bytes_per_token(),
                sizes.kv_bytes_per_token(),
                sizes.kv_stored_bytes_per_token(policy.compress_cache)};
  Terms prefill_terms = t;
  prefill_terms.prefill = true;
  CostModel model;
  model.prefill = build_prefill(prefill_terms);
  model.decode = build_decode(t);
  model.prefill_edges = build_edges(prefill_terms, true);
  model.decode_edges = build_edges(t, false);
  model.num_layers = sizes.num_layers();
  model.prompt_len = workload.prompt_len;
  model.gen_len = workload.gen_len;
  model.block_size = policy.block_size();
  model.num_gpu_batches = policy.num_gpu_batches;
  if (policy.compress_weight.enabled) {  // LM-Offload eq. 3: once, at load, on the cpu
    model.init_seconds =
        double(sizes.num_layers()) * sizes.layer_compressed_dense_bytes(policy.compress_weight) / hw.cpu_quantize;
  }
  return model;
}

Prediction evaluate(const CostModel& model, const Fractions& p) {
  Prediction r;
  r.prefill = evaluate_phase(model.prefill, p);
  r.decode = evaluate_phase(model.decode, p);
  r.prefill_edges = evaluate_phase(model.prefill_edges, p);
  r.decode_edges = evaluate_phase(model.decode_edges, p);
  const double l = double(model.num_layers), n = double(model.gen_len), N = double(model.block_size);
  r.prefill_seconds = r.prefill.layer_seconds * l + r.prefill_edges.layer_seconds;
  r.decode_seconds = (r.decode.layer_seconds * l + r.decode_edges.layer_seconds) * (n - 1);
  r.total_seconds = r.prefill_seconds + r.decode_seconds;
  r.init_seconds = model.init_seconds;
  r.prefill_throughput = r.prefill_seconds > 0 ? N * double(model.prompt_len) / r.prefill_seconds : 0;
  r.decode_throughput = r.decode_seconds > 0 ? N * (n - 1) / r.decode_seconds : 0;
  r.total_throughput = r.total_seconds > 0 ? N * n / r.total_seconds : 0;
  return r;
}

Fractions effective_fractions(const ModelSizes& sizes, const runtime::Policy& policy) {
  Fractions p{};
  const auto& layer = sizes.decoder_layer();
  const auto homes = runtime::place_layer_weights(layer, policy);
  std::array<double, runtime::kNumTiers> weight{};
  double total = 0;
  for (size_t i = 0; i < layer.tensors.size(); ++i) {
    const double bytes = double(runtime::weight_stored_bytes(layer, layer.tensors[i], sizes.dtype_bytes(),
                                                             policy.compress_weight));
    weight[static_cast<int>(homes[i])] += bytes;
    total += bytes;
  }
  const int64_t cache_units = policy.gpu_batch_size * sizes.num_kv_heads();
  const auto cache = runtime::split_units(cache_units, policy.cache_gpu_percent, policy.cache_cpu_percent);
  const auto act = runtime::split_units(policy.gpu_batch_size, policy.act_gpu_percent, policy.act_cpu_percent);
  for (int tier = 0; tier < runtime::kNumTiers; ++tier) {
    p[kWg + tier] = weight[tier] / total;
    p[kCg + tier] = double(cache[tier]) / double(cache_units);
    p[kHg + tier] = double(act[tier]) / double(policy.gpu_batch_size);
  }
  return p;
}

Prediction predict(const model::Spec& spec, const runtime::Policy& policy, const runtime::Workload& workload,
                   const HardwareProfile& hw, int dtype_bytes) {
  policy.validate();
  const ModelSizes sizes(spec, dtype_bytes);
  return evaluate(build_cost_model(sizes, policy, workload, hw), effective_fractions(sizes, policy));
}

double task_seconds(const Prediction& prediction, Task task, bool prefill, int64_t num_layers, double steps) {
  const PhaseTimes& layer = prefill ? prediction.prefill : prediction.decode;
  const PhaseTimes& edges = prefill ? prediction.prefill_edges : prediction.decode_edges;
  const auto t = static_cast<size_t>(task);
  return (layer.tasks[t] * double(num_layers) + edges.tasks[t]) * steps;
}

double job_total_throughput(const Prediction& prediction, int64_t block_size, int64_t num_sequences) {
  if (num_sequences <= 0 || block_size <= 0) return prediction.total_throughput;
  const int64_t blocks = (num_sequences + block_size - 1) / block_size;
  return prediction.total_throughput * double(num_sequences) / double(blocks * block_size);
}

nlohmann::json prediction_to_json(const Prediction& r) {
  return {{"prefill_layer", phase_to_json(r.prefill)},
          {"decode_layer", phase_to_json(r.decode)},
          {"prefill_embedding_and_head", phase_to_json(r.prefill_edges)},
          {"decode_embedding_and_head", phase_to_json(r.decode_edges)},
          {"prefill_seconds", r.prefill_seconds},
          {"decode_seconds", r.decode_seconds},
          {"total_seconds", r.total_seconds},
          {"init_seconds", r.init_seconds},
          {"throughput",
           {{"prefill", r.prefill_throughput}, {"decode", r.decode_throughput}, {"total", r.total_throughput}}},
          {"units", "seconds; tokens/s"}};
}

}  // namespace tiergen::policy
