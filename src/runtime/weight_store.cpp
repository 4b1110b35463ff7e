#include "tiergen/runtime/weight_store.h"

#include <spdlog/spdlog.h>

#include "tiergen/common/error.h"
#include "tiergen/common/huge_pages.h"
#include "tiergen/model/safetensors.h"

namespace tiergen::runtime {

namespace {

bool same_dtype(model::DType file_dtype, at::ScalarType dtype) {
  return (file_dtype == model::DType::F32 && dtype == at::kFloat) ||
         (file_dtype == model::DType::F16 && dtype == at::kHalf) ||
         (file_dtype == model::DType::BF16 && dtype == at::kBFloat16);
}

}  // namespace

WeightStore::WeightStore(const model::Spec& spec, const Policy& policy, const model::WeightSource& source,
                         Tiers& tiers, const DeviceContext& device, bool quantized_in_place, const StageLayers& stage)
    : tiers_(tiers), device_(device), compression_(policy.compress_weight), pin_weight_(policy.pin_weight) {
  TG_CHECK(!quantized_in_place || device.compute.is_cpu(), "internal: quantized weights are used in place on the CPU only");
  quantized_in_place_ = quantized_in_place;
  const auto weight_layers = spec.weight_layers();
  const StageLayers layers = stage.end == 0 ? StageLayers::whole(spec) : stage;
  first_layer_ = layers.first;
  const auto stage_homes = place_stage_weights(weight_layers, policy, layers);
  for (auto i = static_cast<size_t>(layers.first); i < static_cast<size_t>(layers.end); ++i) {
    const auto& homes = stage_homes[i - static_cast<size_t>(layers.first)];
    Layer layer{model::layer_prefix(spec, static_cast<int64_t>(i)), {}};
    for (size_t t = 0; t < homes.size(); ++t) {
      const model::TensorSpec& tensor = weight_layers[i].tensors[t];
      const Tier tier = homes[t].tier;
      Home home = homes[t].has_own_home()
                      ? make_home(weight_layers[i], tensor, tier, source)
                      : share_home(layer_at(homes[t].shared_layer).tensors[homes[t].shared_tensor], tensor);
      const auto index = static_cast<int64_t>(i);
      home.at_home_in_prefill = weight_multiplied_at_home(spec, index, weight_layers[i], tensor, tier, policy, true);
      home.at_home_in_decode = weight_multiplied_at_home(spec, index, weight_layers[i], tensor, tier, policy, false);
      home.lookup_table = weight_layers[i].is_lookup_table(tensor);
      layer.tensors.push_back(std::move(home));
    }
    layers_.push_back(std::move(layer));
  }
}

// The owner's storage under this tensor's name: same tier, same bytes, no reservation
// of its own (the owner's counts them once).
WeightStore::Home WeightStore::share_home(const Home& owner, const model::TensorSpec& tensor) {
  TG_CHECK(!owner.compressed && owner.spec.shape == tensor.shape, "internal: {} cannot share the home of {}",
           tensor.name, owner.spec.name);
  Home home;
  home.spec = tensor;
  home.tier = owner.tier;
  home.resident = owner.resident;
  home.extent = owner.extent;
  return home;
}

WeightStore::Home WeightStore::make_home(const model::WeightLayer& layer, const model::TensorSpec& tensor, Tier tier,
                                         const model::WeightSource& source) {
  Home home;
  home.spec = tensor;
  home.tier = tier;
  home.compressed = weight_is_compressed(layer, tensor, compression_);
  const uint64_t bytes = weight_stored_bytes(layer, tensor, device_.dtype_bytes(), compression_);
  const std::string what = "weight " + tensor.name;
  if (tier == Tier::Disk && !home.compressed) {
    const model::TensorInfo* file = source.file_tensor(tensor);
    if (file && same_dtype(file->dtype, device_.dtype)) {
      // Read in place from the checkpoint: no second copy of the model on disk.
      home.extent = DiskExtent{tiers_.disk_tier().open_checkpoint_file(file->file), file->file_offset, file->nbytes};
      return home;
    }
  }
  if (tier == Tier::Disk) {
    home.extent = tiers_.disk_tier().allocate(bytes, what);
  } else {
    home.reservation = tiers_.account(tier).reserve(tier == Tier::Cpu ? cpu_home_bytes(layer, tensor) : bytes, what);
  }

  if (!home.compressed && reads_in_host_memory(tier)) {
    home.resident = empty_on_huge_pages(tensor.shape, device_.dtype);
    source.read_into(tensor, home.resident);
    return home;
  }
  const at::Tensor dense = source.read(tensor, device_.dtype);
  if (home.compressed) {
    // Quantized once, on the host, as [out, in] grouped along in: the layout the CPU's
    // in-place product reads, and the GPU dequantizes straight into W.
    home.quantized = compress(dense.contiguous(), compression_);
    if (tier == Tier::Disk) {
      uint64_t offset = 0;
      for (const at::Tensor* part : {&home.quantized.packed, &home.quantized.mins, &home.quantized.scales}) {
        tiers_.disk_tier().write(home.extent, offset, part->data_ptr(), part->nbytes());
        offset += part->nbytes();
      }
      home.quantized.packed = home.quantized.mins = home.quantized.scales = at::Tensor();
    } else if (tier == Tier::Gpu) {
      home.quantized = home.quantized.to(device_.compute);
    } else {
      for (at::Tensor* part : {&home.quantized.packed, &home.quantized.mins, &home.quantized.scales}) {
        *part = cpu_home_copy(*part);
      }
    }
    return home;
  }
  if (tier == Tier::Disk) {
    const at::Tensor host = dense.contiguous();
    tiers_.disk_tier().write(home.extent, 0, host.data_ptr(), bytes);
  } else {
    home.resident = tier == Tier::Gpu ? dense.to(device_.compute) : cpu_home_copy(dense);
  }
  return home;
}

bool WeightStore::pin_cpu_homes() const { return device_.pin_host && pin_weight_; }

// Dense homes that stay in plain host memory and are read there whole at every token (by
// the CPU's products, or by the stand-in's "gpu"): on huge pages. Pinned homes are the
// driver's registered pages; disk homes and streamed copies are not long-lived here.
// Compressed homes stay on small pages: 4-bit decode with the packed part on huge pages
// ran 0.90-1.01x (TinyLlama, 2-core Zen 5 guest, 12 interleaved pairs), where fp32 and
// bf16 dense homes ran at medians of 1.06x and 1.04x (bench/RESULTS.md).
bool WeightStore::reads_in_host_memory(Tier tier) const {
  return (tier == Tier::Gpu && device_.compute.is_cpu()) || (tier == Tier::Cpu && !pin_cpu_homes());
}

at::Tensor WeightStore::cpu_home_copy(const at::Tensor& host) const {
  if (!pin_cpu_homes()) return host;
  at::Tensor home = device_.host_home(host.sizes(), host.scalar_type(), /*pinned=*/true);
  home.copy_(host);
  return home;
}

uint64_t WeightStore::cpu_home_bytes(const model::WeightLayer& layer, const model::TensorSpec& tensor) const {
  const uint64_t stored = weight_stored_bytes(layer, tensor, device_.dtype_bytes(), compression_);
  if (!pin_cpu_homes()) return stored;
  if (!weight_is_compressed(layer, tensor, compression_)) return device_.host_home_bytes(stored, true);
  // Three page-locked parts, each rounded to whole pages.
  const auto l = kernels::quantized_layout(tensor.shape[0], tensor.shape[1], {compression_.bits, compression_.group_size});
  const uint64_t meta = static_cast<uint64_t>(l.rows * l.groups_per_row) * 2;
  return device_.host_home_bytes(static_cast<uint64_t>(l.rows * l.packed_bytes_per_row), true) +
         2 * device_.host_home_bytes(meta, true);
}

at::Tensor WeightStore::read_disk(const Home& home, std::vector<Reservation>& staging) const {
  staging.push_back(tiers_.cpu.reserve(home.extent.bytes, "disk weight staging"));
  at::Tensor host = at::empty(home.spec.shape, device_.host_options());
  tiers_.disk_tier().read(home.extent, 0, host.data_ptr(), home.extent.bytes);
  return host;
}

CompressedTensor WeightStore::read_disk_compressed(const Home& home, std::vector<Reservation>& staging) const {
  staging.push_back(tiers_.cpu.reserve(home.extent.bytes, "disk weight staging"));
  // Shapes of the three parts follow from the [out, in] matrix and the format.
  const auto layout = kernels::quantized_layout(home.spec.shape[0], home.spec.shape[1],
                                                {compression_.bits, compression_.group_size});
  CompressedTensor c;
  c.rows = layout.rows;
  c.cols = layout.cols;
  c.config = compression_;
  const auto opts = device_.host_options();
  c.packed = at::empty({c.rows, layout.packed_bytes_per_row}, opts.dtype(at::kByte));
  c.mins = at::empty({c.rows, layout.groups_per_row}, opts.dtype(at::kShort));
  c.scales = at::empty({c.rows, layout.groups_per_row}, opts.dtype(at::kShort));
  uint64_t offset = 0;
  for (at::Tensor* part : {&c.packed, &c.mins, &c.scales}) {
    tiers_.disk_tier().read(home.extent, offset, part->data_ptr(), part->nbytes());
    offset += part->nbytes();
  }
  return c;
}

at::Tensor WeightStore::load_tensor(const Home& home, LoadedLayer& loaded) const {
  const uint64_t dense_bytes = static_cast<uint64_t>(home.spec.numel()) * device_.dtype_bytes();
  std::vector<Reservation> disk_staging;
  if (home.compressed) {
    CompressedTensor on_device = home.quantized;
    if (home.tier != Tier::Gpu) {
      const CompressedTensor host = home.tier == Tier::Cpu ? home.quantized : read_disk_compressed(home, disk_staging);
      loaded.staging.push_back(tiers_.gpu.reserve(host.nbytes(), "weight load " + home.spec.name));
      on_device.packed = device_.to_compute_in_chunks(host.packed);
      on_device.mins = device_.to_compute(host.mins);
      on_device.scales = device_.to_compute(host.scales);
    }
    loaded.staging.push_back(tiers_.gpu.reserve(dense_bytes, "weight dequantize " + home.spec.name));
    const at::Tensor dense = at::empty({on_device.rows, on_device.cols}, device_.compute_options());
    // Queued after the copies on this stream.
    device_.enqueue([on_device, dense] { decompress_into(on_device, dense); });
    loaded.allocated.push_back(dense);
    return dense;
  }
  if (home.tier == Tier::Gpu) return home.resident;
  const at::Tensor host = home.tier == Tier::Cpu ? home.resident : read_disk(home, disk_staging);
  loaded.staging.push_back(tiers_.gpu.reserve(dense_bytes, "weight load " + home.spec.name));
  const at::Tensor copy = device_.to_compute_in_chunks(host);
  loaded.allocated.push_back(copy);
  return copy;
}

// CPU compute: the quantized parts as they are (read from disk when they live there),
// multiplied in place by model::quantized_linear_product; no dense copy, no staging
// for one.
model::QuantizedWeight WeightStore::load_quantized(const Home& home, LoadedLayer& loaded) const {
  const CompressedTensor c = home.tier == Tier::Disk ? read_disk_compressed(home, loaded.staging) : home.quantized;
  model::QuantizedWeight q;
  q.packed = c.packed;
  q.mins = c.mins;
  q.scales = c.scales;
  q.rows = c.rows;
  q.cols = c.cols;
  q.bits = c.config.bits;
  q.group_size = c.config.group_size;
  return q;
}

// A dense weight multiplied at home: the cpu home itself, or a host copy of the disk
// home that lives (with its cpu staging) as long as the loaded layer.
at::Tensor WeightStore::load_on_host(const Home& home, LoadedLayer& loaded) const {
  return home.tier == Tier::Cpu ? home.resident : read_disk(home, loaded.staging);
}

WeightStore::LoadPath WeightStore::load_path(const Home& home, bool prefill) const {
  if (prefill ? home.at_home_in_prefill : home.at_home_in_decode) {
    return home.compressed ? LoadPath::Quantized : LoadPath::AtHome;
  }
  return home.compressed && quantized_in_place_ ? LoadPath::Quantized : LoadPath::ToDevice;
}

const WeightStore::Layer& WeightStore::layer_at(int64_t index) const {
  const int64_t local = index - first_layer_;
  TG_CHECK(local >= 0 && local < static_cast<int64_t>(layers_.size()), "internal: weight layer {} is not in this stage",
           index);
  return layers_[static_cast<size_t>(local)];
}

bool WeightStore::reads_rows(const Home& home, bool prefill) {
  return !prefill && home.lookup_table && home.at_home_in_decode && home.tier == Tier::Disk;
}

// Each row read at its offset in the table's extent (dense, in the compute dtype), as the
// computation asks: the loaded layer holds no copy of the table.
model::TableRows WeightStore::disk_table_rows(const Home& home) const {
  const DiskTier* disk = &tiers_.disk_tier();
  return [disk, extent = home.extent, name = home.spec.name, rows = home.spec.shape[0], width = home.spec.shape[1],
          options = device_.host_options()](const at::Tensor& ids) {
    at::Tensor out = at::empty({ids.numel(), width}, options);
    const auto row_bytes = static_cast<uint64_t>(width * out.element_size());
    const int64_t* id = ids.data_ptr<int64_t>();
    auto* dst = static_cast<char*>(out.data_ptr());
    for (int64_t i = 0; i < ids.numel(); ++i) {
      TG_CHECK(id[i] >= 0 && id[i] < rows, "{}: row {} looked up, but the table has {} rows", name, id[i], rows);
      disk->read(extent, static_cast<uint64_t>(id[i]) * row_bytes, dst + i * row_bytes, row_bytes);
    }
    return out;
  };
}

bool WeightStore::moves_nothing(int64_t index, bool prefill) const {
  for (const Home& home : layer_at(index).tensors) {
    // A dense copy on the device is the gpu home itself only for a dense gpu home; a
    // compressed one is dequantized at every load. A table read by rows is read as the
    // computation looks it up.
    const bool moves = load_path(home, prefill) == LoadPath::ToDevice
                           ? home.compressed || home.tier != Tier::Gpu
                           : home.tier == Tier::Disk && !reads_rows(home, prefill);
    if (moves) return false;
  }
  return true;
}

bool WeightStore::loads_alike(int64_t index) const {
  for (const Home& home : layer_at(index).tensors) {
    // (A table read by rows serves a prompt too, but row by row: not alike.)
    if (load_path(home, true) != load_path(home, false) || reads_rows(home, false) != reads_rows(home, true)) {
      return false;
    }
  }
  return true;
}

std::shared_ptr<LoadedLayer> WeightStore::load(int64_t index, bool prefill) const {
  const Layer& layer = layer_at(index);
  auto loaded = std::make_shared<LoadedLayer>();
  loaded->weights = model::LayerWeights(layer.prefix);
  for (const Home& home : layer.tensors) {
    switch (load_path(home, prefill)) {
      case LoadPath::AtHome:
        if (reads_rows(home, prefill)) {
          loaded->weights.set_table_rows(home.spec.name, disk_table_rows(home));
        } else {
          loaded->weights.set(home.spec.name, load_on_host(home, *loaded));
        }
        break;
      case LoadPath::Quantized:
        loaded->weights.set_quantized(home.spec.name, load_quantized(home, *loaded));
        break;
      case LoadPath::ToDevice:
        loaded->weights.set(home.spec.name, load_tensor(home, *loaded));
        break;
    }
  }
  loaded->ready = DeviceEvent::record(device_);
  return loaded;
}

}  // namespace tiergen::runtime
