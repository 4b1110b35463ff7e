// quantized_matmul(): argument checks, x prepared once (padded groups, their sums),
// the kernel choice, and the split of output columns between OpenMP threads.
#include "kernels/cpu/quantized_matmul.h"

#include <algorithm>
#include <atomic>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/column_chunks.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/quantize_rows.h"
#include "kernels/cpu/quantized_matmul_impl.h"
#include "tiergen/common/error.h"

namespace tiergen::kernels {
namespace detail {

namespace {

float x_value(const QuantizedMatmulArgs& a, int64_t offset) {
  return a.x ? a.x[offset] : bf16_to_float(a.x_bf16[offset]);
}

}  // namespace

PreparedX prepare_x(const QuantizedMatmulArgs& a, int64_t x_row_stride, bool split_nibbles, bool as_bf16) {
  const int64_t g = a.format.group_size;
  PreparedX p;
  p.groups = (a.k + g - 1) / g;
  p.row_len = p.groups * g;
  if (as_bf16) {
    p.values_bf16.assign(size_t(a.rows * p.row_len), 0);
  } else {
    p.values.assign(size_t(a.rows * p.row_len), 0.0f);
  }
  p.group_sums.assign(size_t(a.rows * p.groups), 0.0f);
  // Group by group: a division per element cost as much as a small product's kernel.
  for (int64_t m = 0; m < a.rows; ++m) {
    for (int64_t group = 0; group < p.groups; ++group) {
      const int64_t first = group * g, count = std::min(g, a.k - first), slots = m * p.row_len + first;
      const int64_t x_offset = m * x_row_stride + first;
      float sum = 0.0f;
      for (int64_t in_group = 0; in_group < count; ++in_group) {
        const int64_t slot = slots + (split_nibbles ? (in_group % 2) * (g / 2) + in_group / 2 : in_group);
        const float value = x_value(a, x_offset + in_group);
        if (as_bf16) {
          p.values_bf16[size_t(slot)] = a.x_bf16[x_offset + in_group];
        } else {
          p.values[size_t(slot)] = value;
        }
        sum += value;
      }
      p.group_sums[size_t(m * p.groups + group)] = sum;
    }
  }
  return p;
}

void quantized_matmul_columns_portable(const QuantizedMatmulArgs& a, const PreparedX& x, int64_t y_row_stride,
                                       int64_t j0, int64_t j1) {
  const QuantizedLayout l = quantized_layout(a.n, a.k, a.format);
  const int64_t g = a.format.group_size, group_bytes = g * a.format.bits / 8;
  for (int64_t j = j0; j < j1; ++j) {
    for (int64_t m = 0; m < a.rows; ++m) {
      const float* xr = x.values.data() + m * x.row_len;
      float sum = 0.0f;
      for (int64_t group = 0; group < l.groups_per_row; ++group) {
        const uint8_t* bytes = a.packed + j * l.packed_bytes_per_row + group * group_bytes;
        float dot = 0.0f;
        for (int64_t i = 0; i < g; ++i) dot += float(unpack_level(bytes, i, a.format.bits)) * xr[group * g + i];
        const int64_t meta = j * l.groups_per_row + group;
        sum += half_to_float(a.scales[meta]) * dot +
               half_to_float(a.mins[meta]) * x.group_sums[size_t(m * x.groups + group)];
      }
      if (a.bias) sum += a.bias[j];
      a.y[m * y_row_stride + j] = sum;
    }
  }
}

}  // namespace detail

namespace {

#if defined(__x86_64__)
// The matrix's last n % 16 W rows, which no AMX tile covers, on the vector kernel for
// the format, at every row count alike: 4 bits, AVX-512 BF16 with the same x; 8 bits,
// AVX2 (or portable) with x as fp32.
void amx_tail_columns(const QuantizedMatmulArgs& a, const detail::PreparedX& x, int64_t x_stride, int64_t y_stride,
                      int64_t j0) {
  if (a.format.bits == 4) return detail::quantized_matmul_columns_avx512_bf16(a, x, y_stride, j0, a.n);
  const detail::PreparedX fp32 = detail::prepare_x(a, x_stride, false);
  if (use_avx2_kernels() && detail::quantized_matmul_avx2_supports(a.format)) {
    return detail::quantized_matmul_columns_avx2(a, fp32, y_stride, j0, a.n, quantized_matmul_shared_levels());
  }
  detail::quantized_matmul_columns_portable(a, fp32, y_stride, j0, a.n);
}
#endif

}  // namespace

int64_t quantized_in_place_max_rows(bool bf16_activations, QuantFormat format) {
#if defined(__x86_64__)
  if (bf16_activations && use_amx_kernels() && detail::quantized_matmul_amx_supports(format)) {
    return 4 * kQuantizedInPlaceMaxRows;
  }
  if (bf16_activations && use_avx512_bf16_kernels() && detail::quantized_matmul_avx512_bf16_supports(format)) {
    return 2 * kQuantizedInPlaceMaxRows;
  }
#endif
  return kQuantizedInPlaceMaxRows;
}

namespace {

std::atomic<bool>& shared_levels_setting() {
  static std::atomic<bool> on{true};
  return on;
}

}  // namespace

bool quantized_matmul_shared_levels() { return shared_levels_setting().load(std::memory_order_relaxed); }

void set_quantized_matmul_shared_levels(bool on) { shared_levels_setting().store(on); }

void quantized_matmul(const QuantizedMatmulArgs& a) {
  check_quant_format(a.format);
  TG_CHECK(a.rows >= 0 && a.k > 0 && a.n >= 0, "quantized_matmul: bad shape rows={} k={} n={}", a.rows, a.k, a.n);
  TG_CHECK((a.x == nullptr) != (a.x_bf16 == nullptr), "quantized_matmul: give x in exactly one of fp32 and bf16");
  TG_CHECK(a.packed && a.mins && a.scales && a.y, "quantized_matmul: null packed, mins, scales or y");
  const int64_t x_stride = a.x_row_stride ? a.x_row_stride : a.k;
  const int64_t y_stride = a.y_row_stride ? a.y_row_stride : a.n;
  TG_CHECK(x_stride >= a.k && y_stride >= a.n,
           "quantized_matmul: row strides (x {}, y {}) below the row lengths (k {}, n {})", x_stride, y_stride, a.k,
           a.n);
  if (a.rows == 0 || a.n == 0) return;
  enum class Kernel { kPortable, kAvx2, kAvx512Bf16, kAmx };
  Kernel kernel = Kernel::kPortable;
#if defined(__x86_64__)
  if (a.x_bf16 && use_amx_kernels() && detail::quantized_matmul_amx_supports(a.format)) {
    kernel = Kernel::kAmx;
  } else if (a.x_bf16 && use_avx512_bf16_kernels() && detail::quantized_matmul_avx512_bf16_supports(a.format)) {
    kernel = Kernel::kAvx512Bf16;
  } else if (use_avx2_kernels() && detail::quantized_matmul_avx2_supports(a.format)) {
    kernel = Kernel::kAvx2;
  }
#endif
  // The portable kernel reads levels in stored order; the SIMD ones read a 4-bit
  // group's low nibbles (even elements) and then its high nibbles (odd elements).
  const bool split_nibbles = kernel != Kernel::kPortable && a.format.bits == 4;
  const bool bf16_x = kernel == Kernel::kAvx512Bf16 || kernel == Kernel::kAmx;
  const detail::PreparedX x = detail::prepare_x(a, x_stride, split_nibbles, bf16_x);
#if defined(__x86_64__)
  if (kernel == Kernel::kAmx) {
    // One call per thread: the tile configuration is loaded once, not per chunk.
    const int64_t tiled = a.n / detail::amx::kTileRows * detail::amx::kTileRows;
    const detail::AmxX ax = detail::prepare_x_for_quantized_amx(a, x);
    detail::for_each_thread_columns(tiled, a.k, a.num_threads, [&](int64_t j0, int64_t j1) {
      detail::quantized_matmul_columns_amx(a, x, ax, y_stride, j0, j1);
    });
    if (tiled < a.n) amx_tail_columns(a, x, x_stride, y_stride, tiled);
    return;
  }
  if (kernel == Kernel::kAvx512Bf16) {
    // One call per thread, as for AMX: the level table and the scales' buffer are set
    // up once per thread rather than once per 16 columns.
    detail::for_each_thread_columns(a.n, a.k, a.num_threads, [&](int64_t j0, int64_t j1) {
      detail::quantized_matmul_columns_avx512_bf16(a, x, y_stride, j0, j1);
    });
    return;
  }
#endif
  const bool shared_levels = quantized_matmul_shared_levels();  // read once, outside the threads
  detail::for_each_column_chunk(a.n, a.k, a.num_threads, [&](int64_t j0, int64_t j1) {
    switch (kernel) {
#if defined(__x86_64__)
      case Kernel::kAvx2:
        return detail::quantized_matmul_columns_avx2(a, x, y_stride, j0, j1, shared_levels);
#endif
      default:
        return detail::quantized_matmul_columns_portable(a, x, y_stride, j0, j1);
    }
  });
}

}  // namespace tiergen::kernels
