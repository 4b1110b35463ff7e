#pragma once
// x W^T + b for a weight W [out, in], the product behind every projection of the
// models. On the CPU a product with few rows (decode: one row per sequence) goes to
// kernels/cpu/small_matmul, which reads W in place instead of repacking it as a GEMM
// does on every call; bf16 weights on a CPU without native bf16 products are widened
// to fp32 tile by tile (widened_linear_product); everything else is at::linear.
#include <ATen/ATen.h>

#include <functional>
#include <string>

#include "tiergen/model/layer_weights.h"

namespace tiergen::model {

// bias may be undefined. The result has x's dtype and leading dimensions.
at::Tensor linear_product(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

// True when linear_product() would use the small-row CPU kernel for these operands.
bool uses_small_matmul(const at::Tensor& x, const at::Tensor& weight);

// True when linear_product() would widen the weight to fp32 for these operands: a CPU
// product with a bf16 weight, more rows than small_matmul takes, on a CPU without native
// bf16 products (kernels::cpu_has_native_bf16_products, within TIERGEN_CPU_ISA).
bool uses_widened_product(const at::Tensor& x, const at::Tensor& weight);

// What linear_product() runs on this CPU for a product of `rows` rows whose x and W are
// both `dtype` (the kernel dispatch as it stands: TIERGEN_CPU_ISA, the small-row limit,
// batch invariance): "small_matmul (amx)", "small_matmul (avx2)", "fp32 GEMM over widened
// bf16 tiles", "LibTorch GEMM (bfloat16)". And over every row count at once, e.g.
// "small_matmul (avx2) up to 16 rows, LibTorch GEMM (float32) above", for `tiergen
// profile` to say which path the products it times take.
std::string linear_product_path(at::ScalarType dtype, int64_t rows);
std::string linear_product_paths(at::ScalarType dtype);

// x W^T + b with W's rows widened to fp32 a tile at a time (widened_tile_rows(in) rows,
// 4 MiB of fp32 each) and multiplied by x in fp32 with LibTorch's fp32 GEMM: fp32
// accumulation like the 16-bit GEMM, one rounding to x's dtype at the end. CPU only.
at::Tensor widened_linear_product(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});
int64_t widened_tile_rows(int64_t in_features);

// The same product with W held quantized (host, CPU compute), by one of two kernels:
// in place (kernels/cpu/quantized_matmul reads W's levels, with no dense copy), or
// through W dense in x's dtype (the levels converted once instead of once per row; a
// bf16 copy on a CPU without native bf16 products is then multiplied widened). The
// dense form of a layer load's first such product is dequantized tile by tile into the
// small-row kernel where that kernel reads x as it is (up to 256 rows); a later one (the
// block's other gpu batches) makes a dense copy, kept in weight.dense. Their sums
// differ in the last bits, so the choice never depends on the batch while CPU products
// are batch-invariant (kernels::small_matmul_for_every_row_count, the default): decode
// products go in place and prefill products through the copy, whatever their rows
// (ProductPhaseScope says which a product is). Otherwise, and for products of no known
// phase, up to kernels::quantized_in_place_max_rows rows go in place and more through
// the copy. The result has x's dtype.
at::Tensor quantized_linear_product(const at::Tensor& x, const QuantizedWeight& weight, const at::Tensor& bias = {});

// Which phase of a token the products this thread makes belong to: the one fact about a
// product, besides its operands, that quantized_linear_product chooses by. The runtime
// sets it around each step's compute; Unknown outside any scope.
enum class ProductPhase { Unknown, Prefill, Decode };
ProductPhase product_phase();

// Sets the thread's product phase for a scope, then the previous one again.
class ProductPhaseScope {
 public:
  explicit ProductPhaseScope(ProductPhase phase);
  ~ProductPhaseScope();
  ProductPhaseScope(const ProductPhaseScope&) = delete;
  ProductPhaseScope& operator=(const ProductPhaseScope&) = delete;

 private:
  ProductPhase saved_;
};

// Whether the dense path of quantized_linear_product, for a layer load's first product
// of `rows` rows of x in `dtype`, multiplies tiles of kDequantizedTileRows W rows
// dequantized into a buffer per thread (which stays in cache) instead of a dense copy:
// under the small-row limit in force (kernels::small_matmul_max_rows), or under
// `small_row_limit` (a plan priced before its run sets its limit).
bool multiplies_in_dequantized_tiles(at::ScalarType dtype, int64_t rows);
bool multiplies_in_dequantized_tiles(at::ScalarType dtype, int64_t rows, int64_t small_row_limit);
// The weight dequantized into `dtype` (bf16, fp16 or fp32) kDequantizedTileRows W rows at a
// time, on the compute threads, each into a buffer of its own, which stays in its cache:
// use(tile, first, count) runs on the thread that dequantized rows [first, first + count)
// into `tile`. The first failure is rethrown once every tile is done.
void for_each_dequantized_tile(const QuantizedWeight& weight, at::ScalarType dtype,
                               const std::function<void(const void* tile, int64_t first, int64_t count)>& use);
// W rows per tile there: whole column chunks of the kernels (column_chunks.h), and a
// tile of up to 5632 bf16 inputs (704 KB) stays in a core's L2. On a 2-core Zen 5 guest,
// a TinyLlama layer's seven 4-bit products at 128 bf16 rows took 19.6 ms in tiles of 64
// rows (21.1-21.5 in tiles of 32) against 21.6 ms through whole dense copies.
constexpr int64_t kDequantizedTileRows = 64;

// Whether quantized_linear_product reads W in place for `rows` rows of x in `phase`
// (bf16_activations: x is bf16), as it stands (batch invariance, the in-place limit).
bool quantized_product_in_place(ProductPhase phase, int64_t rows, bool bf16_activations, int bits, int group_size);

}  // namespace tiergen::model
