#pragma once
// HardwareProfile: the constants of the cost model for one machine (FlexGen's Table 7
// plus LM-Offload's compression and CPU terms). Stored as JSON in configs/hw/;
// `tiergen profile` measures one. Units: bandwidths in bytes/s, compute rates in
// FLOP/s, capacities in bytes.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "policy/product_row_lengths.h"

namespace tiergen::policy {

// Products over compressed host weights read in place (model::quantized_linear_product
// up to its in-place row limit): (rows, bytes of stored weight per second), and (rows,
// seconds) each product call costs beside its bytes (the in-place kernel sets up per
// call: on a 2-core Emerald Rapids guest 50-120 us at one row, against 13 for a dense
// bf16 call); empty where not timed (the dense products' call cost then stands in).
struct QuantizedProductRates {
  int bits = 4;
  int group_size = 64;
  std::vector<std::pair<int64_t, double>> rates;
  std::vector<std::pair<int64_t, double>> call_seconds;
};
bool operator==(const QuantizedProductRates& a, const QuantizedProductRates& b);

// Decode attention as a host standing in for the GPU runs it over a share of the cache it
// loaded from its cpu or disk tier: model::attend (LibTorch's batched products and
// softmax) over units of one sequence's kv head with its query heads
// (runtime::KvCache::decode_attention), in one dtype, at every core. Priced as its K and
// V bytes at `kv_bandwidth` plus a cost per call, per unit, per position (one unit's key)
// and per score (one query head at one position). Priced as its FLOPs at one batched
// product's rate, it took 0.2x to 5x the price on a 2-core Xeon guest, by shape and
// dtype: a call costs hundreds of microseconds there, short units their dispatch,
// grouped heads their scores.
struct LoadedCacheAttention {
  double kv_bandwidth = 0;  // bytes of K and V per second; 0: not timed
  double call_seconds = 0;
  double unit_seconds = 0;
  double position_seconds = 0;
  double score_seconds = 0;
  bool timed() const { return kv_bandwidth > 0; }
  // Seconds of `calls` calls over `units` units, `positions` keys of those units,
  // `scores` scores and `kv_bytes` of K and V in all.
  double seconds(double calls, double units, double positions, double scores, double kv_bytes) const {
    return calls * call_seconds + units * unit_seconds + positions * position_seconds + scores * score_seconds +
           kv_bytes / kv_bandwidth;
  }
  // Every part `factor` times as fast (calibration).
  void speed_up(double factor) {
    kv_bandwidth *= factor;
    call_seconds /= factor;
    unit_seconds /= factor;
    position_seconds /= factor;
    score_seconds /= factor;
  }
};
bool operator==(const LoadedCacheAttention& a, const LoadedCacheAttention& b);

// The CPU's products over host weights of one dtype, as `tiergen profile` times them
// through the runtime's product: the fields HardwareProfile prices CPU products with
// (cpu_product_rates, cpu_matmul_flops, cpu_gemv_bandwidth, cpu_small_matmul_max_rows),
// kept per dtype, and the kernel path they took on the CPU that timed them.
struct CpuProductTable {
  std::string dtype;        // "float32", "float16" or "bfloat16"
  std::string kernel_path;  // model::linear_product_paths: "small_matmul (amx) at every row count"
  std::vector<std::pair<int64_t, double>> rates;  // (rows, bytes of weight per second), ascending rows
  double matmul_flops = 0;                        // the many-row rate
  double gemv_bandwidth = 0;                      // the few-row rate (4 rows)
  int64_t small_matmul_max_rows = 0;              // 0: not measured
  // Compressed weights with activations of this dtype, multiplied in place (4 and 8 bits).
  std::vector<QuantizedProductRates> quantized;
  // The kernel level (kernels::cpu_isa_name) and kernels::kCpuProductKernelsRevision the
  // table was timed at; "" and 0 in tables that predate them.
  std::string kernel_level;
  int kernels_revision = 0;
  // (rows, seconds): what one product call of that many rows costs beside its bytes at
  // the rates above, ascending rows. The rates are of one product over a weight larger
  // than the caches; a model's layer makes several calls over matrices of a few MB. Timed
  // over matrices of 1024 rows of short_row_length elements against one product over the
  // same rows (at the many-row count, against the many-row product), through the
  // runtime's product, so it includes the call's dispatch, which the schedule's
  // step_seconds (timed on layers that do almost no work) counts once more: a few us per
  // call. Empty where not timed: products are then priced by their bytes alone, and a
  // measured table without it is stale (stale_cpu_products).
  std::vector<std::pair<int64_t, double>> call_seconds;
  // The row length (elements of one W row) `rates` were timed at; 0 in tables that
  // predate it (the profile's 4096).
  int64_t row_length = 0;
  // The same products over rows of `short_row_length` elements (the same bytes, more
  // rows; product_row_lengths.h), at the row counts of `rates`, and the calls above
  // timed over matrices of rows that long: a product is priced at its own row length
  // between the two (HardwareProfile::cpu_product_seconds). Empty where not timed:
  // every row length is then priced at `rates`, and a measured table without it is
  // stale (stale_cpu_products).
  std::vector<std::pair<int64_t, double>> short_row_rates;
  int64_t short_row_length = 0;
  // Where the host stands in for the GPU: its decode attention over a loaded cache in
  // this dtype (not timed on a CUDA host, nor in tables that predate it: that attention
  // is then priced as its FLOPs at the bmm decode rate).
  LoadedCacheAttention loaded_cache_attention;
};
bool operator==(const CpuProductTable& a, const CpuProductTable& b);

// Why `table` does not price this process's CPU products: timed at another kernel
// level than the one in use (TIERGEN_CPU_ISA, another CPU) or by other kernels (another
// revision; a table with a kernel path and no revision is revision 1), or without what a
// table now holds (the cost per call, the short rows); "" when it does, or when the
// table records neither a level nor a kernel path (hand-written).
std::string stale_cpu_products(const CpuProductTable& table);

struct HardwareProfile {
  std::string name;
  std::string source;      // where the numbers come from, which ones are estimates
  std::string path;        // file it was loaded from ("" when built in code)
  // The "gpu" tier is host memory (--device cpu): its copies to and from the cpu tier
  // are memcpys by the cores that compute (cost_model.h prices them on the compute stream).
  bool gpu_is_host = false;

  // Links (bytes/s). FlexGen fits separate rates for cache and hidden-state copies.
  double cpu_to_gpu = 0;
  double cpu_to_gpu_cache = 0;  // KV cache loads (many head-sized slices)
  double gpu_to_cpu_cache = 0;
  double gpu_to_cpu_hidden = 0;
  double disk_to_cpu = 0;
  double disk_to_cpu_cache = 0;  // KV cache reads (many sequential slices per layer)
  double cpu_to_disk_cache_prefill = 0;
  double cpu_to_disk_hidden_prefill = 0;
  double cpu_to_disk_decode = 0;
  // Device memory bandwidth: each gpu batch reads the layer's dense weights once, so
  // small batches are bounded by it rather than by FLOPs (LM-Offload's gpu_mem_bdw).
  double gpu_memory_bandwidth = 0;

  // Compute device (FLOP/s): matmul and batched matmul, prefill- and decode-shaped.
  double mm_flops_prefill = 0;
  double mm_flops_decode = 0;
  double bmm_flops_prefill = 0;
  double bmm_flops_decode = 0;

  // CPU. Decode attention over a CPU-resident KV cache is bounded by memory bandwidth,
  // so its rate is bytes of (dense) KV cache processed per second.
  double cpu_memory_bandwidth = 0;   // bytes/s, memcpy
  double cpu_attention_bandwidth = 0;  // bytes of KV cache per second, all threads
  // Optional (0: not measured; bytes alone are priced): what decode attention costs
  // beside its bytes, at every core. Per call (one layer's gpu batch as the runtime
  // makes it: its views of the cache's homes, its output, the kernel's threads started
  // and joined) and per kernel task (one sequence's kv head with its query heads: handed
  // to a thread, its scores' softmax set up, its output written). Short contexts are
  // mostly these: on a 2-core Zen 4 the runs' attention took 2-7x its bytes' time at
  // contexts of 8-40 positions.
  double cpu_attention_call_seconds = 0;
  double cpu_attention_task_seconds = 0;
  int cpu_threads = 1;
  // (threads, speedup over one thread) of the attention operators, ascending threads.
  std::vector<std::pair<int, double>> cpu_thread_scaling;
  double io_bandwidth_per_thread = 0;  // bytes/s one load/store worker moves
  // Optional (0: not measured, or free): bytes read from the disk tier per second of
  // compute time the reads take from the cores computing beside them (a buffered read
  // copies on a core; a compute team short of a core waits at its barriers). A host
  // standing in for the GPU charges its cores this for every disk read the schedule
  // overlaps with compute (cost_model.h).
  double disk_read_core_bandwidth = 0;
  // Optional (0: not measured): the CPU's own matmuls over host-resident weights in the
  // compute dtype, for computing a layer where its weights live. GEMM FLOP/s with many
  // rows (prefill), and bytes of weights a few-row product (decode) reads per second.
  double cpu_matmul_flops = 0;
  double cpu_gemv_bandwidth = 0;
  // Optional (empty: not measured): (rows, bytes of weight per second) of one product
  // of that many rows, ascending rows, as `tiergen profile` measures it with the
  // runtime's own product (model::linear_product) in the dtype host weights live in,
  // over a weight larger than the CPU caches. The two rates above price a product as
  // max(FLOPs at the many-row rate, bytes at the few-row rate); a product of a few
  // dozen rows can be slower than both (another code path, a dtype the CPU library
  // widens first), which only a measurement at that row count shows.
  std::vector<std::pair<int64_t, double>> cpu_product_rates;
  // Optional: the dtype of those products' weights ("float32", "float16" or "bfloat16";
  // "" when not recorded), and the small-row limit for it measured in the same run: the
  // most rows at which the runtime's small-row kernel beat the GEMM at every row count
  // timed above its default limit, or the default when it lost at the first (kernels::
  // small_matmul_max_rows; 0: not measured, as where the default has no limit). The
  // search writes it into its plans (runtime::Policy::small_matmul), priced with it.
  std::string cpu_product_dtype;
  int64_t cpu_small_matmul_max_rows = 0;
  // Every dtype the profile timed, one table each (a profile from before tables: the
  // one above, when it names its dtype). The fields above are the table the cost model
  // prices with: with_cpu_products_of() puts the job's dtype there.
  std::vector<CpuProductTable> cpu_product_tables;
  // The in-place products over compressed weights of the priced dtype (its table's
  // `quantized`; not a field of the file outside the tables). Empty: estimated from the
  // dense rates (cpu_product_seconds of the stored bytes).
  std::vector<QuantizedProductRates> cpu_quantized_product_rates;
  // The priced dtype's cost per product call (its table's `call_seconds`; not a field of
  // the file outside the tables).
  std::vector<std::pair<int64_t, double>> cpu_call_seconds;
  // The priced dtype's row lengths (its table's `row_length`, `short_row_rates` and
  // `short_row_length`; not fields of the file outside the tables).
  int64_t cpu_product_row_length = 0;
  std::vector<std::pair<int64_t, double>> cpu_short_row_rates;
  int64_t cpu_short_row_length = 0;
  // The priced dtype's decode attention over a loaded cache on a host standing in for
  // the GPU (its table's `loaded_cache_attention`; not a field of the file outside the
  // tables).
  LoadedCacheAttention cpu_loaded_cache_attention;
  // Seconds of one in-place product of `rows` rows over `stored_bytes` of weights
  // compressed to `bits`, from cpu_quantized_product_rates (interpolated in rows; beyond
  // the largest count timed, at its rate), or nullopt when that format was not timed.
  std::optional<double> cpu_quantized_product_seconds(int bits, double rows, double stored_bytes) const;
  // Seconds one in-place product call of `bits` at `rows` costs beside its bytes, as the
  // profile timed it (interpolated in rows, the last count's beyond it); nullopt where
  // it did not (older profiles: cpu_call_seconds_at, the dense calls', stands in).
  std::optional<double> cpu_quantized_call_seconds_at(int bits, double rows) const;

  // Optional (0: not measured): the link between consecutive pipeline stages, as
  // `tiergen profile --link` measures it over the job's transport (its slowest hop).
  double stage_link_bandwidth = 0;  // bytes/s
  double stage_link_latency = 0;    // seconds per message

  // Optional (0: not known): seconds each step of the schedule (one weight layer for one
  // gpu batch, runtime/block_schedule.h) costs beyond its work: launching its operators,
  // handing tasks to the workers and synchronising with them. Fitted from measured runs.
  double step_seconds = 0;

  // Group-wise (de)quantization rates, bytes of dense fp16 data per second.
  double gpu_quantize = 0;
  double gpu_dequantize = 0;
  double cpu_quantize = 0;
  double cpu_dequantize = 0;
  // Optional (0: not measured; the dense copy's rate then prices those products): bf16
  // tiles dequantized into cache, as a layer load's first prefill product of a compressed
  // weight makes them (model::for_each_dequantized_tile), bytes of dense 16-bit data per
  // second.
  double cpu_dequantize_tiles = 0;

  // Default capacities (bytes); --gpu-mem/--cpu-mem/--disk-mem override them.
  uint64_t gpu_memory = 0;
  uint64_t cpu_memory = 0;
  uint64_t disk_memory = 0;

  // Speedup of the attention operators at `threads` (interpolated, 1 when unknown).
  double thread_speedup(int threads) const;
  // Whether the CPU matmul rates were measured (or given): the search considers
  // computing layers on the CPU only then. A profile with cpu_product_rates alone is
  // enough; the many-row bound beyond its row counts and compressed weights' in-place
  // products then use the estimates of cpu_matmul_rate() and cpu_gemv_rate().
  bool prices_cpu_matmuls() const {
    return (cpu_matmul_flops > 0 && cpu_gemv_bandwidth > 0) || !cpu_product_rates.empty();
  }
  // The rates a prediction uses: the measured ones, else estimates (see the .cpp).
  double cpu_matmul_rate() const;
  double cpu_gemv_rate() const;
  // Seconds of one CPU product of `rows` rows over `weight_bytes` of dense host weights
  // doing `flops`: from cpu_product_rates where measured (interpolated between row
  // counts; beyond the largest, never faster than there nor than the many-row rate),
  // else max(flops / cpu_matmul_rate(), weight_bytes / cpu_gemv_rate()); the weights
  // in `calls` product calls (a layer's matrices), each costing cpu_call_seconds beside.
  // `row_lengths`: the products' rows, each share priced at its own length, linear in
  // log(row length) between the main rates' and cpu_short_row_rates' (at those rates
  // beyond them) where the short rows were timed at that row count; empty, or without
  // short rates: all at the main rates.
  double cpu_product_seconds(double rows, double weight_bytes, double flops, double calls = 0,
                             const ProductRowLengths& row_lengths = {}) const;
  // What `row_lengths` cost per byte at `rows` rows over the main rates' length, as the
  // dense products price them above (beyond the last row count timed, at that count; 1
  // without short rows).
  double cpu_row_length_factor(double rows, const ProductRowLengths& row_lengths) const;
  // cpu_call_seconds at `rows` (interpolated; beyond the last count, its value), 0 when
  // not timed.
  double cpu_call_seconds_at(double rows) const;
  // Seconds of one product of `rows` rows on the compute device over `weight_bytes` of
  // dense weights doing `flops` at `flops_rate`: never faster than reading the weights
  // (the roofline of decode's few rows). A host standing in for the GPU multiplies with
  // the same kernels over the same memory as a CPU weight-compute product, so it is
  // priced as one at every row count (cpu_product_seconds: prefill's many rows at the
  // many-row rate the profile timed through the runtime's product, not LibTorch's GEMM
  // rate `flops_rate`, which the batch-invariant kernels do not reach: 3.9x apart on a
  // 2-core Xeon with AMX); without the table, its few-row rate, not its memcpy rate,
  // gpu_memory_bandwidth, which would price the same product differently.
  // `calls` and `row_lengths` as for cpu_product_seconds (on the stand-in).
  double device_product_seconds(double rows, double weight_bytes, double flops, double flops_rate,
                                double calls = 0, const ProductRowLengths& row_lengths = {}) const;
  // Throws tiergen::Error naming the first field that is missing or not positive.
  void validate(const std::string& where) const;

  // The table of `dtype`, or nullptr when the profile did not time it.
  const CpuProductTable* cpu_product_table(const std::string& dtype) const;
  // Whether the profile timed its CPU products per dtype (a measured profile) rather
  // than giving rates for no dtype in particular (a hand-written one, where the rates,
  // when present, are estimates and price every dtype alike).
  bool times_cpu_products_per_dtype() const { return !cpu_product_tables.empty(); }
  // A copy that prices CPU products in `dtype`: its table in the fields above; where the
  // profile timed other dtypes only, those fields cleared, so that nothing is priced on
  // a path the run will not take (CPU weight compute is then not planned, and a stand-in's
  // products fall back on its LibTorch matmul rates); a profile without tables unchanged.
  HardwareProfile with_cpu_products_of(const std::string& dtype) const;
  // Puts `table` in the fields CPU products are priced with, as it is.
  void price_cpu_products_with(const CpuProductTable& table);
  // Adds (or replaces) `table`, in the order float32, float16, bfloat16.
  void add_cpu_product_table(const CpuProductTable& table);
};

nlohmann::json profile_to_json(const HardwareProfile& profile);
// `source` (a file path) goes into errors together with the field name.
HardwareProfile profile_from_json(const nlohmann::json& json, const std::string& source);
HardwareProfile load_profile(const std::string& path);
void save_profile(const HardwareProfile& profile, const std::string& path);

// The profiles of configs/hw/, compiled into the binary (so an installed or copied
// executable has them): by file stem, e.g. "t4-flexgen". Their path is "built-in:NAME".
std::vector<std::string> builtin_profile_names();
std::optional<HardwareProfile> builtin_profile(const std::string& name);
// The built-in profile used when nothing else is given (FlexGen's T4 machine).
constexpr const char* kDefaultBuiltinProfile = "t4-flexgen";

// Where `tiergen profile --cache` (and `generate --policy auto` on a host without a
// profile) keeps this host's measured profile: $XDG_CACHE_HOME/tiergen/hw-profile.json,
// else ~/.cache/tiergen/hw-profile.json; "" when neither variable is set.
std::string cached_profile_path();

enum class ProfileOrigin {
  Option,       // --hw FILE or --hw NAME of a built-in profile
  Environment,  // $TIERGEN_HW_PROFILE
  HostCache,    // this host's measured profile in the cache directory
  BuiltIn,      // the built-in default: describes FlexGen's machine, not this one
};
const char* profile_origin_name(ProfileOrigin origin);

struct ResolvedProfile {
  HardwareProfile profile;
  ProfileOrigin origin = ProfileOrigin::BuiltIn;
  // Whether the numbers were measured on (or chosen by the user for) this machine.
  bool describes_this_host() const { return origin != ProfileOrigin::BuiltIn; }
};

// --hw (a file or a built-in name), else $TIERGEN_HW_PROFILE, else this host's cached
// profile, else the built-in default. Errors in what the user named are thrown; an
// unreadable cache file is skipped with a warning.
ResolvedProfile resolve_profile_with_origin(const std::string& hw_option);
HardwareProfile resolve_profile(const std::string& hw_option);

}  // namespace tiergen::policy
