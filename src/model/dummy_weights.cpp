// Dummy weights for throughput runs: deterministic per (seed, tensor name), cheap to
// make for 100+ GB models, and scaled so that many fp16 layers stay finite (all-ones
// weights, as FlexGen uses, overflow).
#include <cmath>
#include <functional>

#include "tiergen/common/strings.h"
#include "tiergen/model/weight_source.h"

namespace tiergen::model {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Half-width of the uniform distribution for a tensor, by its role.
double amplitude(const TensorSpec& t) {
  const std::string& n = t.source_name;
  if (ends_with(n, "layernorm.weight") || ends_with(n, "layer_norm.weight") || ends_with(n, "norm.weight")) return 0;
  if (ends_with(n, ".bias")) return 0.02;
  if (n.find("embed_positions") != std::string::npos) return 0.02;
  if (n.find("embed_tokens") != std::string::npos) return 1.0;
  const double fan_in = t.shape.size() == 2 ? static_cast<double>(t.shape[1]) : 1.0;
  return std::sqrt(3.0 / fan_in);  // unit variance of each output
}

class DummyWeights final : public WeightSource {
 public:
  explicit DummyWeights(uint64_t seed) : seed_(seed) {}

  at::Tensor read(const TensorSpec& tensor, at::ScalarType dtype) const override {
    at::Tensor values = at::empty(tensor.shape, at::TensorOptions().dtype(at::kFloat));
    float* data = values.data_ptr<float>();
    const int64_t n = values.numel();
    const double a = amplitude(tensor);
    const uint64_t base = splitmix64(seed_ ^ std::hash<std::string>{}(tensor.source_name));
    if (a == 0) {
      values.fill_(1.0);
    } else {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) {
        const double unit = static_cast<double>(splitmix64(base + static_cast<uint64_t>(i)) >> 11) * 0x1.0p-53;
        data[i] = static_cast<float>((2 * unit - 1) * a);
      }
    }
    return dtype == at::kFloat ? values : values.to(dtype);
  }

  std::string describe() const override { return "dummy weights (seed " + std::to_string(seed_) + ")"; }

 private:
  uint64_t seed_;
};

}  // namespace

std::unique_ptr<WeightSource> make_dummy_weights(uint64_t seed) { return std::make_unique<DummyWeights>(seed); }

}  // namespace tiergen::model
