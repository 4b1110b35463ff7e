#pragma once
// Weights at their homes, and their loading to the compute device layer by layer.
// Each tensor of a FlexGen layer gets a home tier by FlexGen's rule (placement.h); a
// tied head's matrix is the embedding's token table's home itself.
// Disk-homed tensors whose checkpoint bytes are already in the compute dtype are read
// straight from the safetensors file at their offset; others are written once to
// the offload file.
#include <memory>
#include <vector>

#include "tiergen/model/layer_weights.h"
#include "tiergen/runtime/compressed_tensor.h"
#include "tiergen/model/weight_source.h"
#include "tiergen/runtime/device.h"
#include "tiergen/runtime/device_event.h"
#include "tiergen/runtime/split_tensor.h"
#include "tiergen/runtime/stage.h"
#include "tiergen/runtime/tiers.h"

namespace tiergen::runtime {

// A layer's weights on the compute device plus the staging they occupy.
struct LoadedLayer {
  model::LayerWeights weights;
  DeviceEvent ready;  // the compute stream waits on it before the first use
  std::vector<Reservation> staging;
  // The device tensors the load allocated (copies, dequantized weights), on the
  // loader's stream when a loader ran it: the compute stream marks them as its own
  // (DeviceContext::used_on_current_stream) before it reads them.
  std::vector<at::Tensor> allocated;
};

class WeightStore {
 public:
  // `quantized_in_place`: compressed weights reach the (CPU) compute as their quantized
  // parts (model::QuantizedWeight); otherwise each load dequantizes them to a dense copy.
  // Only the weight layers of `stage` are placed (a pipeline stage reads its own);
  // by default, all of them.
  WeightStore(const model::Spec& spec, const Policy& policy, const model::WeightSource& source, Tiers& tiers,
              const DeviceContext& device, bool quantized_in_place, const StageLayers& stage = {});
  // Brings weight layer `index` (0 = embedding, 1..L decoder, L+1 head; within the
  // stage) to the device for a prefill or a decode step. Weights used at home in that
  // phase (runtime::weight_multiplied_at_home: those the policy multiplies there, and
  // the embedding's tables in decode) stay on the host instead: their home tensor
  // itself (cpu), a host copy read from disk (in decode, a disk table's row reader), or
  // their quantized parts; model::linear multiplies them there and model::lookup_rows
  // looks them up.
  std::shared_ptr<LoadedLayer> load(int64_t index, bool prefill) const;
  // Whether load(index, prefill) moves and converts nothing: every tensor is used where
  // it lives (resident on the compute device, multiplied at a cpu home, or a disk table
  // whose rows the lookup reads), none is read from disk by the load, copied or
  // dequantized. Such a load only gathers references.
  bool moves_nothing(int64_t index, bool prefill) const;
  // Whether load(index, true) and load(index, false) bring the same tensors the same way,
  // so that a layer loaded for one phase serves the other. Not for the embedding off the
  // gpu (decode looks its tables up at home) nor where CPU weight compute is one phase's.
  bool loads_alike(int64_t index) const;

 private:
  struct Home {
    model::TensorSpec spec;
    Tier tier = Tier::Gpu;
    at::Tensor resident;  // gpu or cpu home, dense
    bool compressed = false;
    CompressedTensor quantized;  // gpu or cpu home when compressed ([out, in], grouped along in)
    DiskExtent extent;           // disk home (compressed: packed, mins, scales back to back)
    Reservation reservation;
    // Multiplied where it lives (host) instead of loaded to the device, per phase.
    bool at_home_in_prefill = false, at_home_in_decode = false;
    bool lookup_table = false;  // the embedding's (model::WeightLayer::is_lookup_table)
  };
  struct Layer {
    std::string prefix;
    std::vector<Home> tensors;
  };

  // How load() brings a tensor to the computation in a phase.
  enum class LoadPath {
    AtHome,     // used where it lives: its dense home, a host copy read from disk, or a row reader
    Quantized,  // its quantized parts, multiplied in place (read from disk when they live there)
    ToDevice,   // a dense copy on the compute device (the gpu home itself when it is one)
  };
  LoadPath load_path(const Home& home, bool prefill) const;
  // Whether a load hands the computation a reader of the rows it looks up instead of the
  // table: a disk-homed table in decode, which needs one row per sequence of it.
  static bool reads_rows(const Home& home, bool prefill);
  model::TableRows disk_table_rows(const Home& home) const;
  const Layer& layer_at(int64_t index) const;

  Home make_home(const model::WeightLayer& layer, const model::TensorSpec& tensor, Tier tier,
                 const model::WeightSource& source);
  static Home share_home(const Home& owner, const model::TensorSpec& tensor);
  at::Tensor read_disk(const Home& home, std::vector<Reservation>& staging) const;
  CompressedTensor read_disk_compressed(const Home& home, std::vector<Reservation>& staging) const;
  at::Tensor load_tensor(const Home& home, LoadedLayer& loaded) const;
  model::QuantizedWeight load_quantized(const Home& home, LoadedLayer& loaded) const;
  at::Tensor load_on_host(const Home& home, LoadedLayer& loaded) const;
  // CPU homes are page-locked (at their exact size) with pin_weight on a GPU.
  bool pin_cpu_homes() const;
  bool reads_in_host_memory(Tier tier) const;
  at::Tensor cpu_home_copy(const at::Tensor& host) const;
  uint64_t cpu_home_bytes(const model::WeightLayer& layer, const model::TensorSpec& tensor) const;

  Tiers& tiers_;
  DeviceContext device_;
  CompressionConfig compression_;
  bool quantized_in_place_ = false;
  bool pin_weight_;
  int64_t first_layer_ = 0;
  std::vector<Layer> layers_;
};

}  // namespace tiergen::runtime
