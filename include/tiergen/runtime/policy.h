#pragma once
// runtime::Policy: where every kind of tensor lives and how the block schedule runs.
// Field names follow FlexGen's Policy (flexgen/flex_opt.py) so policy files are
// interchangeable; the JSON form uses exactly those names plus our additions.
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace tiergen::runtime {

// Group-wise asymmetric min/max quantization (FlexGen section 5).
struct CompressionConfig {
  bool enabled = false;
  int bits = 4;         // 4 or 8
  int group_size = 64;  // elements per group
};

// Thread counts chosen by LM-Offload's Algorithm 3 (policy search fills these in;
// 0 means "leave the library default").
struct ThreadConfig {
  int compute_intra_op = 0;  // OpenMP/ATen threads for compute and CPU attention
  int compute_inter_op = 0;
  int io_threads = 0;        // load/store workers (disk I/O pool, copies)
};

// The small-row kernel's row limit for CPU products of one weight dtype, as the
// hardware profile a plan was searched on measured it (policy::HardwareProfile::
// cpu_small_matmul_max_rows): the plan was priced with it, so its run uses it, whether
// it runs straight from the search or from the saved policy file. max_rows 0: the
// kernels' defaults (every policy not searched on such a profile).
struct SmallRowLimit {
  std::string dtype;     // "float32", "float16" or "bfloat16"
  int64_t max_rows = 0;  // rows
};

struct Policy {
  int64_t gpu_batch_size = 1;
  int64_t num_gpu_batches = 1;
  // Percentages on gpu and cpu; the disk gets the rest (100 - gpu - cpu).
  double w_gpu_percent = 100, w_cpu_percent = 0;
  double cache_gpu_percent = 100, cache_cpu_percent = 0;
  double act_gpu_percent = 100, act_cpu_percent = 0;
  bool overlap = true;
  bool sep_layer = true;
  bool pin_weight = true;
  bool cpu_cache_compute = false;  // CPU attention where the KV cache lives on cpu/disk
  // In that phase, the matmuls (and embedding lookups) of weights that live on cpu/disk
  // run on the CPU where the weights are, instead of copying the weights to the compute
  // device (only activations cross the link). Same results; placement-invariant.
  bool cpu_weight_compute_prefill = false;
  bool cpu_weight_compute_decode = false;
  // The share of decoder layers that do so, spread evenly over the layers: while one
  // layer's matmuls run on the CPU, the next (loaded) layer's weights cross the link.
  double cpu_weight_compute_layer_percent = 100;
  bool attn_sparsity_enabled = false;  // FlexGen field, accepted, must stay off
  CompressionConfig compress_weight;
  CompressionConfig compress_cache;
  ThreadConfig threads;
  SmallRowLimit small_matmul;

  double w_disk_percent() const { return 100 - w_gpu_percent - w_cpu_percent; }
  double cache_disk_percent() const { return 100 - cache_gpu_percent - cache_cpu_percent; }
  double act_disk_percent() const { return 100 - act_gpu_percent - act_cpu_percent; }
  int64_t block_size() const { return gpu_batch_size * num_gpu_batches; }
  bool cpu_weight_compute(bool prefill) const {
    return prefill ? cpu_weight_compute_prefill : cpu_weight_compute_decode;
  }
  // "off", "prefill", "decode" or "prefill+decode".
  std::string cpu_weight_compute_phases() const;
  // The policy a block of only `sequences` sequences runs with: the fewest gpu batches
  // of at most gpu_batch_size that hold them, batches as even as possible; placement,
  // compression and threads unchanged. Never larger than this policy in either
  // dimension, so it needs no more memory. Itself when the block is full.
  Policy fitted_to(int64_t sequences) const;

  // Whether results are exactly those of an uncompressed run (no lossy option on).
  bool exact() const { return !compress_weight.enabled && !compress_cache.enabled; }
  // One line for the user: "output: exact ..." or "output: LOSSY: ..." naming what changes results.
  std::string exactness() const;

  // Throws tiergen::Error describing the first inconsistent field.
  void validate() const;
  std::string describe() const;  // one line for logs
};

nlohmann::json policy_to_json(const Policy& policy);
// `source` names the file in errors; unknown keys are errors (typos must not pass).
Policy policy_from_json(const nlohmann::json& json, const std::string& source);
Policy policy_from_file(const std::string& path);
// A policy file's JSON (errors name the file): for readers of its other fields too.
nlohmann::json read_policy_file(const std::string& path);

}  // namespace tiergen::runtime
