#pragma once
// y = x W^T (+ bias) with W held group-wise quantized (kernels/cpu/quantize.h: W [n, k]
// row-major, groups along k) and multiplied in place: the 4- or 8-bit levels are read
// and converted in registers, never expanded into a dense copy of W, so a decode step
// reads a quarter (8-bit) or an eighth (4-bit) of the bytes of fp32 weights, plus the
// metadata. With min_g and scale_g of group g,
//   y[m][j] = sum_g ( scale_g * sum_{i in g} q_i x_i  +  min_g * sum_{i in g} x_i ),
// which is the product with the dequantized values min_g + q_i * scale_g up to fp32
// rounding (the dense path rounds each dequantized value first). fp32 accumulation;
// each element's order depends only on k and the format, never on the number of rows
// or threads. Kernels here take raw pointers and never LibTorch types.
// Kernels, picked per call at run time: with bf16 x, AMX for 4 and 8 bits (nibbles
// looked up as bf16 into A tiles, tdpbf16ps) where the CPU has it, else AVX-512 BF16 for
// 4 bits (the same lookups, vdpbf16ps); else AVX2/FMA (from 8 rows of x on, with a
// tile's levels converted once for a block of rows, in the same arithmetic as for one
// row), else portable C++. The choice depends on the CPU and the format, never on the
// number of rows, so a row's result does not either.
#include <cstdint>

#include "kernels/cpu/quantize.h"

namespace tiergen::kernels {

struct QuantizedMatmulArgs {
  // x [rows, k]: exactly one of fp32 and bf16 (a bf16 model's activations, which the
  // AVX-512 BF16 kernel multiplies as they are and the others widen exactly).
  const float* x = nullptr;
  const uint16_t* x_bf16 = nullptr;
  int64_t rows = 0;
  int64_t k = 0;
  int64_t x_row_stride = 0;  // elements between rows of x; 0 means k
  // W [n, k] as quantize() lays it out for a [n, k] matrix in `format`.
  const uint8_t* packed = nullptr;
  const uint16_t* mins = nullptr;
  const uint16_t* scales = nullptr;
  QuantFormat format;
  int64_t n = 0;
  const float* bias = nullptr;  // [n] fp32, or nullptr
  float* y = nullptr;           // [rows, n] fp32
  int64_t y_row_stride = 0;     // floats between rows of y; 0 means n
  int num_threads = 0;          // OpenMP threads; 0 = the OpenMP default
};

// Throws tiergen::Error on inconsistent arguments.
void quantized_matmul(const QuantizedMatmulArgs& args);

// The AVX2 kernel's levels converted once for a block of rows (from 8 rows of x on), on
// by default. It never changes a result's bits; off is for benchmarks and tests that
// show both.
bool quantized_matmul_shared_levels();
void set_quantized_matmul_shared_levels(bool on);

// Rows of x up to which a product reads the quantized weight in place when the rows
// decide (--cpu-gemm runs, and products of no known phase: model::
// quantized_product_in_place); beyond them a dense copy of the weight is cheaper (the
// in-place kernel converts W's levels once per row, a dense product once per call;
// measured on TinyLlama-1.1B shapes, bench/quantized_decode.sh).
constexpr int64_t kQuantizedInPlaceMaxRows = 8;
// The limit model::quantized_linear_product applies: with bf16 activations, twice as
// many rows where the AVX-512 BF16 kernel runs (one level lookup serves four rows of x;
// at 16 rows it beats the dense copy, bench_matmul) and four times as many where the AMX
// kernel does (one lookup serves 16 rows; 4 bits at 32 rows 8.4 ms against 16.1 for the
// dense copy on a TinyLlama layer, at 64 rows 18.8 against 18.1); else
// kQuantizedInPlaceMaxRows.
int64_t quantized_in_place_max_rows(bool bf16_activations, QuantFormat format);

}  // namespace tiergen::kernels
