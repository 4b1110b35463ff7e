#include "tiergen/model/linear.h"

#include <ATen/Parallel.h>
#include <omp.h>

#include <algorithm>
#include <exception>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quantized_matmul.h"
#include "kernels/cpu/small_matmul.h"
#include "tiergen/common/error.h"
#include "tiergen/common/kernel_elem_type.h"
#include "tiergen/common/torch_compat.h"

namespace tiergen::model {

bool uses_small_matmul(const at::Tensor& x, const at::Tensor& weight) {
  if (!x.is_cpu() || !weight.is_cpu() || weight.dim() != 2 || !weight.is_contiguous()) return false;
  const auto w_type = kernel_elem_type_of(weight.scalar_type());
  if (!w_type || !kernel_elem_type_of(x.scalar_type())) return false;
  if (x.dim() < 1 || x.size(-1) != weight.size(1) || weight.size(1) == 0) return false;
  return x.numel() / weight.size(1) <= kernels::small_matmul_max_rows(*w_type);
}

bool uses_widened_product(const at::Tensor& x, const at::Tensor& weight) {
  return x.is_cpu() && weight.is_cpu() && weight.dim() == 2 && weight.scalar_type() == at::kBFloat16 &&
         !kernels::cpu_has_native_bf16_products() && !uses_small_matmul(x, weight);
}

namespace {

// The path above small_matmul's rows: widened on CPUs without native bf16 products (as
// uses_widened_product decides), else LibTorch's GEMM in the dtype.
std::string many_row_path(at::ScalarType dtype) {
  if (dtype == at::kBFloat16 && !kernels::cpu_has_native_bf16_products()) return "fp32 GEMM over widened bf16 tiles";
  return fmt::format("LibTorch GEMM ({})", compat::dtype_name(dtype));
}

std::string small_row_path(at::ScalarType dtype) {
  const kernels::ElemType w_type = kernel_elem_type(dtype);
  const kernels::ElemType x_type = dtype == at::kBFloat16 ? kernels::ElemType::BF16 : kernels::ElemType::F32;
  return fmt::format("small_matmul ({})", kernels::small_matmul_kernel_name(x_type, w_type));
}

// Rows of x per small_matmul() call: W is read once per block, and x's fp32 copy and
// the fp32 result stay a block's (fp16 weights take every row count on CPUs without
// native fp16 products, prefill's thousands of rows included).
constexpr int64_t kRowsPerBlock = 256;

const uint16_t* halves(const at::Tensor& t) { return reinterpret_cast<const uint16_t*>(t.data_ptr<int16_t>()); }

// The weight's dense copy in `dtype`, made once per loaded layer (QuantizedWeight::dense).
const at::Tensor& dense_copy(const QuantizedWeight& weight, at::ScalarType dtype) {
  at::Tensor& dense = *weight.dense;
  if (dense.defined() && dense.scalar_type() == dtype) return dense;
  dense = at::empty({weight.rows, weight.cols}, at::TensorOptions().dtype(dtype));
  kernels::dequantize(weight.packed.data_ptr<uint8_t>(), halves(weight.mins), halves(weight.scales), weight.rows,
                      weight.cols, {weight.bits, weight.group_size}, dense.data_ptr(), kernel_elem_type(dtype));
  return dense;
}

// The type small_matmul() takes x in for activations of `dtype`: bf16 as they are,
// anything else as fp32.
kernels::ElemType x_elem_type(at::ScalarType dtype) {
  return dtype == at::kBFloat16 ? kernels::ElemType::BF16 : kernels::ElemType::F32;
}

// x (rows of it: bf16 as they are, others as fp32) times a compressed weight without
// its dense copy: each tile of W rows (for_each_dequantized_tile) multiplied by every row
// of x where it was dequantized. The bits of linear_product over the dense copy: the same values through
// the same kernel, whose output columns depend on their own W rows only
// (column_chunks.h), never on how W is split. It saves writing the copy and reading it
// back from memory.
at::Tensor dequantized_tiles_product(const at::Tensor& x, const QuantizedWeight& weight, const at::Tensor& bias) {
  const at::ScalarType dtype = x.scalar_type();
  const kernels::ElemType x_type = x_elem_type(dtype);
  // fp16 rows widened to fp32 once (what linear_product does per block of the dense copy).
  const at::Tensor rows = x_type == kernels::ElemType::F32 ? x.reshape({-1, weight.cols}).to(at::kFloat).contiguous()
                                                           : x.reshape({-1, weight.cols}).contiguous();
  const int64_t total = rows.size(0), n = weight.rows;
  const at::Tensor b = bias.defined() ? bias.to(at::kFloat).contiguous() : at::Tensor();
  at::Tensor y = at::empty({total, n}, rows.options().dtype(at::kFloat));
  kernels::SmallMatmulArgs tile;
  tile.x = rows.data_ptr();
  tile.x_type = x_type;
  tile.rows = total;
  tile.k = weight.cols;
  tile.w_type = kernel_elem_type(dtype);
  tile.y_row_stride = n;
  tile.num_threads = 1;  // the tiles are the threads' work
  float* out = y.data_ptr<float>();
  const float* bias_data = b.defined() ? b.data_ptr<float>() : nullptr;
  const kernels::SmallMatmulX prepared(tile);  // x packed or widened once, not once per tile
  for_each_dequantized_tile(weight, dtype, [&](const void* w, int64_t first, int64_t count) {
    kernels::SmallMatmulArgs a = tile;
    a.w = w;
    a.n = count;
    a.bias = bias_data ? bias_data + first : nullptr;
    a.y = out + first;
    kernels::small_matmul(a, prepared);
  });
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = n;
  return (dtype == at::kFloat ? y : y.to(dtype)).view(shape);
}

}  // namespace

void for_each_dequantized_tile(const QuantizedWeight& weight, at::ScalarType dtype,
                               const std::function<void(const void* tile, int64_t first, int64_t count)>& use) {
  const kernels::ElemType type = kernel_elem_type(dtype);
  const int64_t n = weight.rows, k = weight.cols;
  const kernels::QuantFormat format{weight.bits, weight.group_size};
  const kernels::QuantizedLayout layout = kernels::quantized_layout(n, k, format);
  const uint8_t* packed = weight.packed.data_ptr<uint8_t>();
  const uint16_t* mins = halves(weight.mins);
  const uint16_t* scales = halves(weight.scales);
  const int64_t tiles = (n + kDequantizedTileRows - 1) / kDequantizedTileRows;
  const int threads = static_cast<int>(std::min<int64_t>(at::get_num_threads(), tiles));
  // One tile buffer per thread, for this call only (the tiers count no lasting scratch).
  const at::Tensor scratch = at::empty({threads, kDequantizedTileRows * k}, at::TensorOptions().dtype(dtype));
  auto* scratch_bytes = static_cast<uint8_t*>(scratch.data_ptr());
  const size_t tile_bytes = size_t(kDequantizedTileRows * k) * scratch.element_size();
  std::exception_ptr failure;
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (int64_t t = 0; t < tiles; ++t) {
    try {
      void* buffer = scratch_bytes + size_t(omp_get_thread_num()) * tile_bytes;
      const int64_t first = t * kDequantizedTileRows, count = std::min(kDequantizedTileRows, n - first);
      // Inside this parallel region dequantize() runs on the calling thread alone.
      kernels::dequantize(packed + first * layout.packed_bytes_per_row, mins + first * layout.groups_per_row,
                          scales + first * layout.groups_per_row, count, k, format, buffer, type);
      use(buffer, first, count);
    } catch (...) {
#pragma omp critical(dequantized_tiles_failure)
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

// One block of rows (the tiles are dequantized once per block; more rows pay for a dense
// copy once), on the small-row kernel, with x made ready for it once per product
// (kernels::SmallMatmulX: AMX's packed tiles, fp32 row pairs; fp16 activations widened
// to fp32 first, as linear_product widens them) and read by every tile's call.
bool multiplies_in_dequantized_tiles(at::ScalarType dtype, int64_t rows, int64_t small_row_limit) {
  if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf) return false;
  return rows > 0 && rows <= kRowsPerBlock && rows <= small_row_limit;
}

bool multiplies_in_dequantized_tiles(at::ScalarType dtype, int64_t rows) {
  return multiplies_in_dequantized_tiles(dtype, rows, kernels::small_matmul_max_rows(kernel_elem_type(dtype)));
}

std::string linear_product_path(at::ScalarType dtype, int64_t rows) {
  return rows <= kernels::small_matmul_max_rows(kernel_elem_type(dtype)) ? small_row_path(dtype)
                                                                         : many_row_path(dtype);
}

std::string linear_product_paths(at::ScalarType dtype) {
  const int64_t limit = kernels::small_matmul_max_rows(kernel_elem_type(dtype));
  if (limit == std::numeric_limits<int64_t>::max()) return small_row_path(dtype) + " at every row count";
  if (limit == 0) return many_row_path(dtype) + " at every row count";
  return fmt::format("{} up to {} row{}, {} above", small_row_path(dtype), limit, limit == 1 ? "" : "s",
                     many_row_path(dtype));
}

at::Tensor linear_product(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (uses_widened_product(x, weight)) return widened_linear_product(x, weight, bias);
  if (!uses_small_matmul(x, weight)) return at::linear(x, weight, bias);
  const int64_t k = weight.size(1), n = weight.size(0);
  // bf16 activations of a bf16 model go in as they are; anything else as fp32 (a no-op
  // view for fp32 inputs). Accumulation is fp32 either way.
  const bool bf16_pair = x.scalar_type() == at::kBFloat16 && weight.scalar_type() == at::kBFloat16;
  const at::Tensor rows = x.reshape({-1, k});
  const int64_t total = rows.size(0);
  const at::Tensor b = bias.defined() ? bias.to(at::kFloat).contiguous() : at::Tensor();
  // The result in x's dtype; for 16-bit x each block's fp32 sums go through a scratch.
  const bool fp32_out = x.scalar_type() == at::kFloat;
  at::Tensor out = at::empty({total, n}, rows.options());
  const at::Tensor scratch =
      fp32_out ? at::Tensor() : at::empty({std::min(kRowsPerBlock, total), n}, rows.options().dtype(at::kFloat));
  kernels::SmallMatmulArgs args;
  args.x_type = bf16_pair ? kernels::ElemType::BF16 : kernels::ElemType::F32;
  args.k = k;
  args.w = weight.data_ptr();
  args.w_type = kernel_elem_type(weight.scalar_type());
  args.n = n;
  args.bias = b.defined() ? b.data_ptr<float>() : nullptr;
  args.num_threads = at::get_num_threads();
  for (int64_t first = 0; first < total; first += kRowsPerBlock) {
    const int64_t count = std::min(kRowsPerBlock, total - first);
    const at::Tensor block = rows.narrow(0, first, count).to(bf16_pair ? at::kBFloat16 : at::kFloat).contiguous();
    args.x = block.data_ptr();
    args.rows = count;
    args.y = fp32_out ? out.data_ptr<float>() + first * n : scratch.data_ptr<float>();
    kernels::small_matmul(args);
    if (!fp32_out) out.narrow(0, first, count).copy_(scratch.narrow(0, 0, count));
  }
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = n;
  return out.view(shape);
}

namespace {

thread_local ProductPhase this_thread_phase = ProductPhase::Unknown;

}  // namespace

ProductPhase product_phase() { return this_thread_phase; }

ProductPhaseScope::ProductPhaseScope(ProductPhase phase) : saved_(this_thread_phase) { this_thread_phase = phase; }

ProductPhaseScope::~ProductPhaseScope() { this_thread_phase = saved_; }

bool quantized_product_in_place(ProductPhase phase, int64_t rows, bool bf16_activations, int bits, int group_size) {
  if (kernels::small_matmul_for_every_row_count() && phase != ProductPhase::Unknown) {
    return phase == ProductPhase::Decode;
  }
  return rows <= kernels::quantized_in_place_max_rows(bf16_activations, {bits, group_size});
}

at::Tensor quantized_linear_product(const at::Tensor& x, const QuantizedWeight& weight, const at::Tensor& bias) {
  TG_CHECK(x.is_cpu() && weight.packed.is_cpu(), "internal: a quantized weight is multiplied on the CPU only");
  TG_CHECK(x.size(-1) == weight.cols, "internal: x has {} features, the quantized weight {} inputs", x.size(-1),
           weight.cols);
  // The dense path: dequantized tiles for a load's first product where they apply, else
  // one dense copy of this weight per layer load. (A bf16 copy on a CPU without native
  // bf16 products goes on to the widened product: the copy keeps the size
  // runtime::plan_memory counts for it.)
  const int64_t rows = x.numel() / weight.cols;
  if (!quantized_product_in_place(product_phase(), rows, x.scalar_type() == at::kBFloat16, weight.bits,
                                  weight.group_size)) {
    // The load's first such product in tiles; a second one makes the copy the rest share.
    const bool first = (*weight.dense_products)++ == 0;
    if (first && multiplies_in_dequantized_tiles(x.scalar_type(), rows)) {
      return dequantized_tiles_product(x, weight, bias);
    }
    return linear_product(x, dense_copy(weight, x.scalar_type()), bias);
  }
  // bf16 activations go to the kernel as they are (the AVX-512 BF16 kernel multiplies
  // them without widening); others as fp32.
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  const at::Tensor x2 = bf16 ? x.reshape({-1, weight.cols}).contiguous()
                             : x.reshape({-1, weight.cols}).to(at::kFloat).contiguous();
  const at::Tensor b = bias.defined() ? bias.to(at::kFloat).contiguous() : at::Tensor();
  at::Tensor y = at::empty({x2.size(0), weight.rows}, x2.options().dtype(at::kFloat));
  kernels::QuantizedMatmulArgs args;
  if (bf16) {
    args.x_bf16 = reinterpret_cast<const uint16_t*>(x2.data_ptr<at::BFloat16>());
  } else {
    args.x = x2.data_ptr<float>();
  }
  args.rows = x2.size(0);
  args.k = weight.cols;
  args.packed = weight.packed.data_ptr<uint8_t>();
  args.mins = halves(weight.mins);
  args.scales = halves(weight.scales);
  args.format = {weight.bits, weight.group_size};
  args.n = weight.rows;
  args.bias = b.defined() ? b.data_ptr<float>() : nullptr;
  args.y = y.data_ptr<float>();
  args.num_threads = at::get_num_threads();
  kernels::quantized_matmul(args);
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = weight.rows;
  return y.to(x.scalar_type()).view(shape);
}

}  // namespace tiergen::model
