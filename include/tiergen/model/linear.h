#pragma once
// x W^T + b for a weight W [out, in], the product behind every projection of the
// models. On the CPU a product with few rows (decode: one row per sequence) goes to
// kernels/cpu/small_matmul, which reads W in place instead of repacking it as a GEMM
// does on every call; bf16 weights on a CPU without native bf16 products are widened
// to fp32 tile by tile (widened_linear_product); everything else is at::linear.
#include <ATen/ATen.h>

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

// The same product with W held quantized (host, CPU compute). Up to 8 rows of x (decode)
// W is read in place by kernels/cpu/quantized_matmul, with no dense copy; with more
// rows a dense copy of W in x's dtype is made (converting the levels once instead of
// once per row) and kept in weight.dense for the other gpu batches of the same layer
// load; a bf16 copy on a CPU without native bf16 products is then multiplied widened
// (widened_linear_product). The result has x's dtype.
at::Tensor quantized_linear_product(const at::Tensor& x, const QuantizedWeight& weight, const at::Tensor& bias = {});

}  // namespace tiergen::model
