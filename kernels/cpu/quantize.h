#pragma once
// Group-wise asymmetric quantization (FlexGen section 5) of row-major matrices.
//
// Format (the runtime, the CUDA kernels and files on disk rely on it):
// - a matrix [rows, cols]; groups of `group_size` contiguous elements along cols; the
//   last group of a row is partial when cols % group_size != 0 and is stored as if it
//   were full (its padding levels are 0 and do not influence min/max);
// - per group an fp16 min and an fp16 scale (uint16_t IEEE half bit patterns), in two
//   arrays [rows, groups_per_row]; q = round((x - min) / scale) clamped to
//   [0, 2^bits - 1], x' = min + q * scale;
// - bits 4: two levels per byte, element 2i in the LOW nibble, 2i+1 in the HIGH nibble;
//   bits 8: one byte per element; packed bytes per row = groups_per_row*group_size*bits/8.
// - min is rounded down and scale up to fp16 (scale then stepped up until
//   min + (2^bits - 1)*scale >= max) and quantization uses those stored values, so each
//   element comes back within scale/2 of its original (up to the fp32 rounding of
//   min + q*scale and of the output type). A constant group has scale 0 and levels 0.
// - Inputs must be finite and within +-65504 (the fp16 range of the metadata); other
//   values make quantize() throw tiergen::Error naming the row and column.
//
// Kernels here take raw pointers and never LibTorch types.
#include <cstdint>

namespace tiergen::kernels {

// Element types of uncompressed tensors; F16 and BF16 are uint16_t bit patterns.
enum class ElemType { F32, F16, BF16 };

constexpr int64_t elem_size(ElemType type) { return type == ElemType::F32 ? 4 : 2; }
const char* elem_type_name(ElemType type);

struct QuantFormat {
  int bits = 4;         // 4 or 8
  int group_size = 64;  // > 0; even when bits == 4
};

// Throws tiergen::Error unless bits is 4 or 8 and group_size is valid for it.
void check_quant_format(QuantFormat format);

struct QuantizedLayout {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t groups_per_row = 0;
  int64_t packed_bytes_per_row = 0;

  int64_t packed_bytes() const { return rows * packed_bytes_per_row; }
  // Entries in each of the mins and scales arrays.
  int64_t meta_elems() const { return rows * groups_per_row; }
  // Packed levels plus both fp16 metadata arrays.
  int64_t total_bytes() const { return packed_bytes() + 2 * meta_elems() * int64_t(sizeof(uint16_t)); }
};

QuantizedLayout quantized_layout(int64_t rows, int64_t cols, QuantFormat format);

// Dense forms: src/dst hold rows*cols elements of `type`; packed, mins and scales are
// sized as quantized_layout() says. Parallel over rows (OpenMP).
void quantize(const void* src, ElemType type, int64_t rows, int64_t cols, QuantFormat format,
              uint8_t* packed, uint16_t* mins, uint16_t* scales);
void dequantize(const uint8_t* packed, const uint16_t* mins, const uint16_t* scales, int64_t rows,
                int64_t cols, QuantFormat format, void* dst, ElemType type);

// Strided forms, for rows scattered in a larger buffer (e.g. one new token's K rows
// written into a KV cache whose sequences are max_len rows apart). Strides count
// elements for src/dst, bytes for packed, entries for mins/scales (the same stride
// for both), from the start of one row to the start of the next.
struct QuantizedRows {
  uint8_t* packed;
  uint16_t* mins;
  uint16_t* scales;
  int64_t packed_row_stride;
  int64_t meta_row_stride;
};
struct ConstQuantizedRows {
  const uint8_t* packed;
  const uint16_t* mins;
  const uint16_t* scales;
  int64_t packed_row_stride;
  int64_t meta_row_stride;
};

void quantize_strided(const void* src, ElemType type, int64_t src_row_stride, int64_t rows,
                      int64_t cols, QuantFormat format, const QuantizedRows& dst);
void dequantize_strided(const ConstQuantizedRows& src, int64_t rows, int64_t cols,
                        QuantFormat format, void* dst, ElemType type, int64_t dst_row_stride);

}  // namespace tiergen::kernels
