#include "tiergen/runtime/weight_store.h"

#include <spdlog/spdlog.h>

#include "tiergen/common/error.h"
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
                         Tiers& tiers, const DeviceContext& device)
    : tiers_(tiers), device_(device) {
  const auto weight_layers = spec.weight_layers();
  for (size_t i = 0; i < weight_layers.size(); ++i) {
    const auto homes = place_layer_weights(weight_layers[i], policy);
    Layer layer{model::layer_prefix(spec, static_cast<int64_t>(i)), {}};
    for (size_t t = 0; t < homes.size(); ++t) {
      layer.tensors.push_back(make_home(weight_layers[i].tensors[t], homes[t], source));
    }
    layers_.push_back(std::move(layer));
  }
}

WeightStore::Home WeightStore::make_home(const model::TensorSpec& tensor, Tier tier,
                                         const model::WeightSource& source) {
  Home home;
  home.spec = tensor;
  home.tier = tier;
  const uint64_t bytes = static_cast<uint64_t>(tensor.numel()) * device_.dtype_bytes();
  if (tier == Tier::Disk) {
    const model::TensorInfo* file = source.file_tensor(tensor);
    if (file && same_dtype(file->dtype, device_.dtype)) {
      // Read in place from the checkpoint: no second copy of the model on disk.
      home.extent = DiskExtent{tiers_.disk_tier().open_checkpoint_file(file->file), file->file_offset, file->nbytes};
      return home;
    }
    home.extent = tiers_.disk_tier().allocate(bytes, "weight " + tensor.name);
    const at::Tensor host = source.read(tensor, device_.dtype).contiguous();
    tiers_.disk_tier().write(home.extent, 0, host.data_ptr(), bytes);
    return home;
  }
  home.reservation = tiers_.account(tier).reserve(bytes, "weight " + tensor.name);
  const at::Tensor host = source.read(tensor, device_.dtype);
  home.resident = tier == Tier::Gpu ? host.to(device_.compute)
                                    : (device_.pin_host ? host.pin_memory() : host);
  return home;
}

at::Tensor WeightStore::read_disk(const Home& home, std::vector<Reservation>& staging) const {
  staging.push_back(tiers_.cpu.reserve(home.extent.bytes, "disk weight staging"));
  at::Tensor host = at::empty(home.spec.shape, device_.host_options());
  tiers_.disk_tier().read(home.extent, 0, host.data_ptr(), home.extent.bytes);
  return host;
}

std::shared_ptr<LoadedLayer> WeightStore::load(int64_t index) const {
  TG_CHECK(index >= 0 && index < num_layers(), "internal: weight layer {} out of range", index);
  const Layer& layer = layers_[static_cast<size_t>(index)];
  auto loaded = std::make_shared<LoadedLayer>();
  loaded->weights = model::LayerWeights(layer.prefix);
  for (const Home& home : layer.tensors) {
    if (home.tier == Tier::Gpu) {
      loaded->weights.set(home.spec.name, home.resident);
      continue;
    }
    std::vector<Reservation> disk_staging;
    const at::Tensor host = home.tier == Tier::Cpu ? home.resident : read_disk(home, disk_staging);
    loaded->staging.push_back(tiers_.gpu.reserve(static_cast<uint64_t>(home.spec.numel()) * device_.dtype_bytes(),
                                                 "weight load " + home.spec.name));
    loaded->weights.set(home.spec.name, device_.to_compute(host));
  }
  device_.synchronize();
  return loaded;
}

}  // namespace tiergen::runtime
