// Front end of the group-wise quantizer: argument checks, the OpenMP loop over rows,
// the portable row kernels, and the choice of the AVX2 row kernels when available.
#include "kernels/cpu/quantize.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/elements.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/quant_group.h"
#include "kernels/cpu/quantize_rows.h"
#include "tiergen/common/error.h"

namespace tiergen::kernels {
namespace {

// Below this many elements the OpenMP fork costs more than the work.
constexpr int64_t kParallelMinElems = 1 << 15;

void check_shape(const char* what, int64_t rows, int64_t cols) {
  TG_CHECK(rows >= 0 && cols >= 0, "{}: negative shape [{}, {}]", what, rows, cols);
}

}  // namespace

const char* elem_type_name(ElemType type) {
  switch (type) {
    case ElemType::F32: return "float32";
    case ElemType::F16: return "float16";
    case ElemType::BF16: return "bfloat16";
  }
  return "?";
}

void check_quant_format(QuantFormat format) {
  TG_CHECK(format.bits == 4 || format.bits == 8,
           "quantization: bits must be 4 or 8, got {}", format.bits);
  TG_CHECK(format.group_size > 0, "quantization: group size must be positive, got {}",
           format.group_size);
  TG_CHECK(format.bits == 8 || format.group_size % 2 == 0,
           "quantization: 4-bit groups pack two values per byte, so the group size must be "
           "even, got {}", format.group_size);
}

QuantizedLayout quantized_layout(int64_t rows, int64_t cols, QuantFormat format) {
  check_quant_format(format);
  check_shape("quantized_layout", rows, cols);
  QuantizedLayout layout;
  layout.rows = rows;
  layout.cols = cols;
  layout.groups_per_row = (cols + format.group_size - 1) / format.group_size;
  layout.packed_bytes_per_row = layout.groups_per_row * format.group_size * format.bits / 8;
  return layout;
}

namespace detail {

int64_t quantize_row(const float* x, int64_t cols, QuantFormat format, uint8_t* packed,
                     uint16_t* mins, uint16_t* scales, uint8_t* levels) {
  const int g = format.group_size;
  const int max_level = (1 << format.bits) - 1;
  const int64_t group_bytes = int64_t(g) * format.bits / 8;
  for (int64_t k = 0, j0 = 0; j0 < cols; ++k, j0 += g) {
    const float* xg = x + j0;
    const int n = int(std::min<int64_t>(g, cols - j0));
    float lo = xg[0], hi = xg[0];
    for (int i = 0; i < n; ++i) {
      if (!(std::fabs(xg[i]) <= kHalfMax)) return j0 + i;
      lo = std::min(lo, xg[i]);
      hi = std::max(hi, xg[i]);
    }
    const quant::GroupParams p = quant::group_params(lo, hi, max_level);
    mins[k] = p.min_bits;
    scales[k] = p.scale_bits;
    for (int i = 0; i < g; ++i) {
      levels[i] = i < n ? uint8_t(quant::quantize_value(xg[i], p.min, p.scale, max_level)) : 0;
    }
    pack_levels(levels, g, format.bits, packed + k * group_bytes);
  }
  return -1;
}

void dequantize_row(const uint8_t* packed, const uint16_t* mins, const uint16_t* scales,
                    int64_t cols, QuantFormat format, void* dst, ElemType type) {
  const int g = format.group_size;
  const int64_t group_bytes = int64_t(g) * format.bits / 8;
  for (int64_t k = 0, j0 = 0; j0 < cols; ++k, j0 += g) {
    const float lo = half_to_float(mins[k]);
    const float scale = half_to_float(scales[k]);
    const int n = int(std::min<int64_t>(g, cols - j0));
    const uint8_t* pg = packed + k * group_bytes;
    for (int i = 0; i < n; ++i) {
      const float v = quant::dequantize_value(unpack_level(pg, i, format.bits), lo, scale);
      store_element(dst, type, j0 + i, v);
    }
  }
}

void row_to_float(const void* src, ElemType type, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = load_element(src, type, i);
}

}  // namespace detail

void quantize_strided(const void* src, ElemType type, int64_t src_row_stride, int64_t rows,
                      int64_t cols, QuantFormat format, const QuantizedRows& dst) {
  const QuantizedLayout layout = quantized_layout(rows, cols, format);
  if (rows == 0 || cols == 0) return;
  TG_CHECK(src && dst.packed && dst.mins && dst.scales, "quantize: null pointer argument");
  TG_CHECK(src_row_stride >= cols, "quantize: source row stride {} < cols {}", src_row_stride, cols);
  TG_CHECK(dst.packed_row_stride >= layout.packed_bytes_per_row && dst.meta_row_stride >= layout.groups_per_row,
           "quantize: destination row strides ({} bytes, {} groups) smaller than a row ({} bytes, {} groups)",
           dst.packed_row_stride, dst.meta_row_stride, layout.packed_bytes_per_row, layout.groups_per_row);

#if defined(__x86_64__)
  const bool simd = use_avx2_kernels();
#endif
  const int64_t esize = elem_size(type);
  int64_t bad_row = -1, bad_col = -1;
#pragma omp parallel if (rows * cols >= kParallelMinElems)
  {
    std::vector<float> row_buf(type == ElemType::F32 ? 0 : cols);
    std::vector<uint8_t> levels(format.group_size);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const void* s = static_cast<const char*>(src) + r * src_row_stride * esize;
      const float* x = static_cast<const float*>(s);
      uint8_t* packed = dst.packed + r * dst.packed_row_stride;
      uint16_t* mins = dst.mins + r * dst.meta_row_stride;
      uint16_t* scales = dst.scales + r * dst.meta_row_stride;
      int64_t c;
#if defined(__x86_64__)
      if (simd) {
        if (type != ElemType::F32) x = (detail::row_to_float_avx2(s, type, cols, row_buf.data()), row_buf.data());
        c = detail::quantize_row_avx2(x, cols, format, packed, mins, scales, levels.data());
      } else
#endif
      {
        if (type != ElemType::F32) x = (detail::row_to_float(s, type, cols, row_buf.data()), row_buf.data());
        c = detail::quantize_row(x, cols, format, packed, mins, scales, levels.data());
      }
      if (c >= 0) {
#pragma omp critical(tiergen_quantize_error)
        if (bad_row < 0 || r < bad_row) {
          bad_row = r;
          bad_col = c;
        }
      }
    }
  }
  if (bad_row >= 0) {
    const void* s = static_cast<const char*>(src) + bad_row * src_row_stride * esize;
    TG_THROW("quantize: {} value {} at row {}, column {}: group-wise quantization needs finite "
             "values within the fp16 range +-65504 (its min and scale are stored as fp16)",
             elem_type_name(type), load_element(s, type, bad_col), bad_row, bad_col);
  }
}

void dequantize_strided(const ConstQuantizedRows& src, int64_t rows, int64_t cols,
                        QuantFormat format, void* dst, ElemType type, int64_t dst_row_stride) {
  const QuantizedLayout layout = quantized_layout(rows, cols, format);
  if (rows == 0 || cols == 0) return;
  TG_CHECK(src.packed && src.mins && src.scales && dst, "dequantize: null pointer argument");
  TG_CHECK(dst_row_stride >= cols, "dequantize: destination row stride {} < cols {}", dst_row_stride, cols);
  TG_CHECK(src.packed_row_stride >= layout.packed_bytes_per_row && src.meta_row_stride >= layout.groups_per_row,
           "dequantize: source row strides ({} bytes, {} groups) smaller than a row ({} bytes, {} groups)",
           src.packed_row_stride, src.meta_row_stride, layout.packed_bytes_per_row, layout.groups_per_row);
#if defined(__x86_64__)
  const bool simd = use_avx2_kernels();
  const bool avx512 = simd && use_avx512_bf16_kernels() && detail::dequantize_row_avx512_bf16_supports(format, type);
#endif
  const int64_t esize = elem_size(type);
// Called from inside a parallel region (a thread's own tile, model::quantized_linear_product),
// it stays on the calling thread.
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMinElems && !omp_in_parallel())
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* packed = src.packed + r * src.packed_row_stride;
    const uint16_t* mins = src.mins + r * src.meta_row_stride;
    const uint16_t* scales = src.scales + r * src.meta_row_stride;
    void* d = static_cast<char*>(dst) + r * dst_row_stride * esize;
#if defined(__x86_64__)
    if (avx512) {
      detail::dequantize_row_avx512_bf16(packed, mins, scales, cols, format, d, type);
      continue;
    }
    if (simd) {
      detail::dequantize_row_avx2(packed, mins, scales, cols, format, d, type);
      continue;
    }
#endif
    detail::dequantize_row(packed, mins, scales, cols, format, d, type);
  }
}

void quantize(const void* src, ElemType type, int64_t rows, int64_t cols, QuantFormat format,
              uint8_t* packed, uint16_t* mins, uint16_t* scales) {
  const QuantizedLayout layout = quantized_layout(rows, cols, format);
  quantize_strided(src, type, cols, rows, cols, format,
                   QuantizedRows{packed, mins, scales, layout.packed_bytes_per_row, layout.groups_per_row});
}

void dequantize(const uint8_t* packed, const uint16_t* mins, const uint16_t* scales, int64_t rows,
                int64_t cols, QuantFormat format, void* dst, ElemType type) {
  const QuantizedLayout layout = quantized_layout(rows, cols, format);
  dequantize_strided(ConstQuantizedRows{packed, mins, scales, layout.packed_bytes_per_row, layout.groups_per_row},
                     rows, cols, format, dst, type, cols);
}

}  // namespace tiergen::kernels
