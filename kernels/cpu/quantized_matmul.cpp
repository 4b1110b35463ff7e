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

// One row of x (from `offset`) into its prepared slots, group by group: for 4 bits on
// the SIMD paths a group's even elements first, then its odd ones. Slots past k stay
// zero. Written as pairs, without an index computed per element: that took as long as
// a 256-row product's weights at k = 2048.
template <class Slot, class Value>
void copy_groups(int64_t k, int64_t g, bool split_nibbles, const Value& value, Slot* out) {
  if (!split_nibbles) {
    for (int64_t i = 0; i < k; ++i) out[i] = value(i);
    return;
  }
  const int64_t half = g / 2;
  for (int64_t first = 0; first < k; first += g) {
    const int64_t count = std::min(g, k - first), pairs = count / 2;
    for (int64_t i = 0; i < pairs; ++i) {
      out[first + i] = value(first + 2 * i);
      out[first + half + i] = value(first + 2 * i + 1);
    }
    if (count % 2) out[first + pairs] = value(first + count - 1);
  }
}

// Each group's sum of one row of x, added element by element in k's order (the min
// terms' bits depend on it). Groups are independent chains of additions: kSumLanes of
// them advance side by side, so the adds' latency overlaps (one group at a time, the
// sums of a 2048-wide row took about as long as a 256-row product's weights).
constexpr int64_t kSumLanes = 8;

template <class Value>
void sum_groups(int64_t k, int64_t g, const Value& value, float* sums) {
  const int64_t full = k / g;
  int64_t group = 0;
  for (; group + kSumLanes <= full; group += kSumLanes) {
    float lane[kSumLanes] = {};
    for (int64_t i = 0; i < g; ++i) {
#pragma GCC unroll 8
      for (int64_t l = 0; l < kSumLanes; ++l) lane[l] += value((group + l) * g + i);
    }
    for (int64_t l = 0; l < kSumLanes; ++l) sums[group + l] = lane[l];
  }
  for (; group * g < k; ++group) {
    const int64_t first = group * g, count = std::min(g, k - first);
    float sum = 0.0f;
    for (int64_t i = 0; i < count; ++i) sum += value(first + i);
    sums[group] = sum;
  }
}

// Calls f with x's row at `offset` as a function of the element index returning floats.
template <class F>
void with_x_row(const QuantizedMatmulArgs& a, int64_t offset, const F& f) {
  if (a.x) {
    const float* x = a.x + offset;
    f([x](int64_t i) { return x[i]; });
  } else {
    const uint16_t* x = a.x_bf16 + offset;
    f([x](int64_t i) { return bf16_to_float(x[i]); });
  }
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
  for (int64_t m = 0; m < a.rows; ++m) {
    const int64_t offset = m * x_row_stride;
    if (as_bf16) {
      const uint16_t* x = a.x_bf16 + offset;
      copy_groups(a.k, g, split_nibbles, [x](int64_t i) { return x[i]; }, p.values_bf16.data() + m * p.row_len);
    }
    with_x_row(a, offset, [&](const auto& value) {
      if (!as_bf16) copy_groups(a.k, g, split_nibbles, value, p.values.data() + m * p.row_len);
      sum_groups(a.k, g, value, p.group_sums.data() + m * p.groups);
    });
  }
  return p;
}

void tile_x_bf16(PreparedX& x, int64_t rows) {
  const int64_t group_size = x.row_len / x.groups;
  const int64_t tiles = rows / kXTileRows;
  x.tiles_bf16.resize(size_t(tiles * kXTileRows * x.row_len));
  uint16_t* out = x.tiles_bf16.data();
  for (int64_t tile = 0; tile < tiles; ++tile) {
    for (int64_t group = 0; group < x.groups; ++group) {
      for (int64_t row = tile * kXTileRows; row < (tile + 1) * kXTileRows; ++row, out += group_size) {
        std::copy_n(x.values_bf16.data() + row * x.row_len + group * group_size, group_size, out);
      }
    }
  }
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
// the format, at every row count alike: 4 bits, AVX-512 BF16 with the same x (tiled
// here); 8 bits, AVX2 (or portable) with x as fp32.
void amx_tail_columns(const QuantizedMatmulArgs& a, detail::PreparedX& x, int64_t x_stride, int64_t y_stride,
                      int64_t j0) {
  if (a.format.bits == 4) {
    detail::tile_x_bf16(x, a.rows);
    return detail::quantized_matmul_columns_avx512_bf16(a, x, y_stride, j0, a.n);
  }
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
  detail::PreparedX x = detail::prepare_x(a, x_stride, split_nibbles, bf16_x);
  if (kernel == Kernel::kAvx512Bf16) detail::tile_x_bf16(x, a.rows);
#if defined(__x86_64__)
  if (kernel == Kernel::kAmx) {
    // One call per run of columns (column_chunks.h): the tile configuration is loaded
    // once per run, not per chunk.
    const int64_t tiled = a.n / detail::amx::kTileRows * detail::amx::kTileRows;
    const detail::AmxX ax = detail::prepare_x_for_quantized_amx(a, x);
    detail::for_each_thread_columns(tiled, a.k, a.num_threads, [&](int64_t j0, int64_t j1) {
      detail::quantized_matmul_columns_amx(a, x, ax, y_stride, j0, j1);
    });
    if (tiled < a.n) amx_tail_columns(a, x, x_stride, y_stride, tiled);
    return;
  }
  if (kernel == Kernel::kAvx512Bf16) {
    // One call per run of columns, as for AMX: the level table and the scales' buffer
    // are set up once per run rather than once per 16 columns.
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
