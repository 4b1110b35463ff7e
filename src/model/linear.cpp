#include "tiergen/model/linear.h"

#include <ATen/Parallel.h>

#include "kernels/cpu/small_matmul.h"
#include "tiergen/common/kernel_elem_type.h"

namespace tiergen::model {

bool uses_small_matmul(const at::Tensor& x, const at::Tensor& weight) {
  if (!x.is_cpu() || !weight.is_cpu() || weight.dim() != 2 || !weight.is_contiguous()) return false;
  if (!kernel_elem_type_of(weight.scalar_type()) || !kernel_elem_type_of(x.scalar_type())) return false;
  if (x.dim() < 1 || x.size(-1) != weight.size(1) || weight.size(1) == 0) return false;
  return x.numel() / weight.size(1) <= kernels::small_matmul_max_rows();
}

at::Tensor linear_product(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!uses_small_matmul(x, weight)) return at::linear(x, weight, bias);
  const int64_t k = weight.size(1), n = weight.size(0);
  // bf16 activations of a bf16 model go in as they are; anything else as fp32 (a no-op
  // view for fp32 inputs). Accumulation is fp32 either way.
  const bool bf16_pair = x.scalar_type() == at::kBFloat16 && weight.scalar_type() == at::kBFloat16;
  const at::Tensor x2 = x.reshape({-1, k}).to(bf16_pair ? at::kBFloat16 : at::kFloat).contiguous();
  const at::Tensor b = bias.defined() ? bias.to(at::kFloat).contiguous() : at::Tensor();
  at::Tensor y = at::empty({x2.size(0), n}, x2.options().dtype(at::kFloat));
  kernels::SmallMatmulArgs args;
  args.x = x2.data_ptr();
  args.x_type = bf16_pair ? kernels::ElemType::BF16 : kernels::ElemType::F32;
  args.rows = x2.size(0);
  args.k = k;
  args.w = weight.data_ptr();
  args.w_type = kernel_elem_type(weight.scalar_type());
  args.n = n;
  args.bias = b.defined() ? b.data_ptr<float>() : nullptr;
  args.y = y.data_ptr<float>();
  args.num_threads = at::get_num_threads();
  kernels::small_matmul(args);
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = n;
  return y.to(x.scalar_type()).view(shape);
}

}  // namespace tiergen::model
