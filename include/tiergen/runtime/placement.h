#pragma once
// Placement and byte accounting: which tier each weight tensor, KV-cache slice and
// activation slice lives on, and how many bytes every tier needs at its peak.
// This is the single source of truth for memory: the runtime allocates exactly what
// plan_memory() counts (its tiers refuse anything beyond), and the policy search
// checks its rounded policies with it. Plain C++ (no LibTorch) so policy/ can use it.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tiergen/model/spec.h"
#include "tiergen/runtime/policy.h"
#include "tiergen/runtime/stage.h"

namespace tiergen::runtime {

enum class Tier { Gpu = 0, Cpu = 1, Disk = 2 };
constexpr int kNumTiers = 3;
std::string tier_name(Tier tier);

struct TierBytes {
  std::array<uint64_t, kNumTiers> bytes{};
  uint64_t& operator[](Tier t) { return bytes[static_cast<int>(t)]; }
  uint64_t operator[](Tier t) const { return bytes[static_cast<int>(t)]; }
  TierBytes& operator+=(const TierBytes& other);
};

struct Budgets {
  uint64_t gpu = 0, cpu = 0, disk = 0;
  uint64_t of(Tier t) const { return t == Tier::Gpu ? gpu : t == Tier::Cpu ? cpu : disk; }
};

// The batch shape a policy runs: every sequence padded to prompt_len, gen_len new tokens.
// num_sequences is the size of the whole job (what a plan may batch together); 0 when
// unknown, and the byte accounting never depends on it.
struct Workload {
  int64_t prompt_len = 0;
  int64_t gen_len = 0;
  int64_t num_sequences = 0;
};

// FlexGen's rule (init_weight_list): within one layer, a tensor goes to the tier whose
// cumulative percentage range (disk, then cpu, then gpu) holds the midpoint of the
// tensor's cumulative byte range.
Tier weight_home(double mid_percent, const Policy& policy);
std::vector<Tier> place_layer_weights(const model::WeightLayer& layer, const Policy& policy);

// Whether `tensor` of `layer` is a tied head's matrix kept as the token table itself:
// it reads the table (TensorSpec::source_name) and is not compressed (a compressed head
// is a quantized copy of its own).
bool weight_is_tied_table(const model::WeightLayer& layer, const model::TensorSpec& tensor,
                          const CompressionConfig& compression);

// Where one weight tensor lives.
struct WeightHome {
  Tier tier = Tier::Gpu;
  // Another tensor's home that this one is (a tied head's matrix is the embedding's
  // token table): that tensor's weight layer (model-wide index) and its index in the
  // layer; layer -1 when the tensor has a home of its own.
  int64_t shared_layer = -1;
  size_t shared_tensor = 0;
  bool has_own_home() const { return shared_layer < 0; }
};

// Homes of the weights of `stage` ([layer - stage.first][tensor]; `layers` is the
// model's spec.weight_layers()): each layer by FlexGen's rule (place_layer_weights),
// except that a tied head's uncompressed matrix, where the stage holds the embedding
// too, keeps one home with the token table, on the higher of the two tiers the rule
// gives them (gpu over cpu over disk: no tier holds more than it would with two copies).
// `groups` > 1: a whole model standing for one stage of a pipeline (policy/pipeline.h),
// whose real stages hold one end or the other, never both: nothing is shared.
std::vector<std::vector<WeightHome>> place_stage_weights(const std::vector<model::WeightLayer>& layers,
                                                         const Policy& policy, const StageLayers& stage,
                                                         int64_t groups = 1);

// Bytes of a [rows, cols] matrix quantized in groups along cols (packed values plus an
// fp16 min and scale per group; a partial last group is padded to a full one).
uint64_t quantized_bytes(int64_t rows, int64_t cols, const CompressionConfig& compression);

// Whether a weight tensor is stored compressed under `compression`: 2-D tensors of the
// decoder layers and the head (embeddings are looked up by row and stay dense; 1-D
// biases and norms are tiny, as in FlexGen).
bool weight_is_compressed(const model::WeightLayer& layer, const model::TensorSpec& tensor,
                          const CompressionConfig& compression);

// Whether decoder layer `decoder_index` (0-based, of `num_decoder_layers`) is among the
// Policy::cpu_weight_compute_layer_percent of layers that multiply at home: spread
// evenly, so that loaded layers alternate with them.
bool decoder_layer_multiplies_at_home(const Policy& policy, int64_t decoder_index, int64_t num_decoder_layers);

// Whether `tensor` of weight layer `layer_index` (`layer`, at home on `home`) is used
// where it lives in this phase rather than copied to the compute device: in decode the
// embedding's tables always (a step looks up one row per sequence, so only those rows
// cross); otherwise, under Policy::cpu_weight_compute_*, the matrices and tables, on
// cpu or disk, of the chosen decoder layers and of the embedding and head. They reach
// the compute only through model::linear and model::lookup_rows.
bool weight_multiplied_at_home(const model::Spec& spec, int64_t layer_index, const model::WeightLayer& layer,
                               const model::TensorSpec& tensor, Tier home, const Policy& policy, bool prefill);

// Bytes a weight occupies at home. Compressed weights are grouped along the output
// dimension: the [out, in] matrix is stored transposed as [in, out], groups along out.
uint64_t weight_stored_bytes(const model::WeightLayer& layer, const model::TensorSpec& tensor,
                             int dtype_bytes, const CompressionConfig& compression);

// Split of `units` (e.g. batch x heads rows) across tiers by percentages, gpu first,
// then cpu, disk taking the rest; sums to units exactly.
std::array<int64_t, kNumTiers> split_units(int64_t units, double gpu_percent, double cpu_percent);

struct MemoryPlan {
  TierBytes weights;      // homes of all weights
  TierBytes kv_cache;     // homes of the KV cache of one block, all layers
  TierBytes activations;  // homes of the hidden states of one block
  TierBytes working;      // staging and compute buffers (double-buffered loads, etc.)
  TierBytes total() const;
  // Names the first tier over budget and by how much; empty when it fits.
  std::string over_budget(const Budgets& budgets) const;
};

// Bound of one layer's compute temporaries for one gpu batch, plus every gpu batch's
// decode attention masks (part of working[gpu]).
uint64_t compute_scratch_bytes(const model::Spec& spec, const Policy& policy, const Workload& workload,
                               int dtype_bytes);

// What one process holds: the weight layers of its pipeline stage (all of them for a
// single process), and how many blocks are in flight at once (a pipeline stage runs
// one per stage, each with its own KV cache and activations).
struct StageShape {
  StageLayers layers;  // end == 0: the whole model
  int64_t groups = 1;
};

// Peak bytes per tier for running `workload` with `policy`; dtype_bytes is the
// compute dtype's size (2 for fp16/bf16, 4 for fp32).
MemoryPlan plan_memory(const model::Spec& spec, const Policy& policy, const Workload& workload,
                       int dtype_bytes, const StageShape& stage = {});

}  // namespace tiergen::runtime
