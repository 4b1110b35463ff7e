#pragma once
// x W^T + b for a weight W [out, in], the product behind every projection of the
// models. On the CPU a product with few rows (decode: one row per sequence) goes to
// kernels/cpu/small_matmul, which reads W in place instead of repacking it as a GEMM
// does on every call; everything else is at::linear.
#include <ATen/ATen.h>

#include "tiergen/model/layer_weights.h"

namespace tiergen::model {

// bias may be undefined. The result has x's dtype and leading dimensions.
at::Tensor linear_product(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

// True when linear_product() would use the small-row CPU kernel for these operands.
bool uses_small_matmul(const at::Tensor& x, const at::Tensor& weight);

// The same product with W held quantized (host, CPU compute). Up to 8 rows of x (decode)
// W is read in place by kernels/cpu/quantized_matmul, with no dense copy; with more
// rows a dense copy of W in x's dtype is made (converting the levels once instead of
// once per row) and kept in weight.dense for the other gpu batches of the same layer
// load. The result has x's dtype.
at::Tensor quantized_linear_product(const at::Tensor& x, const QuantizedWeight& weight, const at::Tensor& bias = {});

}  // namespace tiergen::model
