// bf16 weights multiplied in fp32 on a CPU without native bf16 products: LibTorch's
// bf16 GEMM there is a scalar fallback (prefill of a TinyLlama-shaped layer at 0.49
// tok/s against fp32's 17 on an AVX2 EPYC), while its fp32 GEMM runs at full speed. A
// tile of the weight's rows at a time is widened to fp32 and multiplied by the
// activations in fp32: the widening touches each weight element once, the GEMM does
// rows x more work on it, so for the many-row products routed here (prefill, large
// decode batches) the product runs at fp32 speed while the weight stays 16-bit at home.
#include <algorithm>
#include <vector>

#include "tiergen/common/error.h"
#include "tiergen/model/linear.h"

namespace tiergen::model {

namespace {

// fp32 bytes of one widened weight tile: small enough to stay in a last-level cache
// beside the activations, large enough that each GEMM call amortises its packing.
constexpr int64_t kWidenedTileBytes = int64_t{4} << 20;

}  // namespace

int64_t widened_tile_rows(int64_t in_features) {
  return std::max<int64_t>(1, kWidenedTileBytes / (std::max<int64_t>(1, in_features) * 4));
}

at::Tensor widened_linear_product(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  TG_CHECK(x.is_cpu() && weight.is_cpu() && weight.dim() == 2, "internal: a widened product runs on CPU matrices");
  const int64_t k = weight.size(1), n = weight.size(0);
  TG_CHECK(x.size(-1) == k, "internal: x has {} features, the weight {} inputs", x.size(-1), k);
  const at::Tensor rows = x.reshape({-1, k}).to(at::kFloat).contiguous();
  at::Tensor out = at::empty({rows.size(0), n}, rows.options());
  const int64_t tile = widened_tile_rows(k);
  for (int64_t first = 0; first < n; first += tile) {
    const int64_t count = std::min(tile, n - first);
    const at::Tensor widened = weight.narrow(0, first, count).to(at::kFloat);
    out.narrow(1, first, count).copy_(at::mm(rows, widened.t()));
  }
  if (bias.defined()) out.add_(bias.to(at::kFloat));
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = n;
  return out.to(x.scalar_type()).view(shape);
}

}  // namespace tiergen::model
