// small_matmul(): argument checks, x in the form the chosen kernel reads (portable,
// AVX2, AVX-512 for fp32 x, AVX-512 BF16 or AMX), and the kernel run over column chunks
// (column_chunks.h).
#include "kernels/cpu/small_matmul.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/column_chunks.h"
#include "kernels/cpu/elements.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/small_matmul_impl.h"
#include "tiergen/common/error.h"

namespace tiergen::kernels {
namespace {

// Crossover with OpenBLAS sgemm / oneDNN brgemm measured by bench/bench_matmul.cpp on
// an AVX-512 host (bench/RESULTS.md): the packed GEMMs catch up at about 32 rows.
constexpr int64_t kDefaultMaxRows = 16;

// TIERGEN_SMALL_MATMUL_MAX_ROWS overrides the defaults (0 turns the kernel off), so
// whole runs can be compared with and without it; unset, the setting is -1 (the
// defaults).
int64_t initial_max_rows() {
  const char* env = std::getenv("TIERGEN_SMALL_MATMUL_MAX_ROWS");
  if (!env || !*env) return -1;
  char* end = nullptr;
  const long long v = std::strtoll(env, &end, 10);
  TG_CHECK(*end == '\0' && v >= 0, "TIERGEN_SMALL_MATMUL_MAX_ROWS must be a row count >= 0, got '{}'", env);
  return v;
}

std::atomic<int64_t>& max_rows_setting() {
  static std::atomic<int64_t> rows{initial_max_rows()};
  return rows;
}

// A 0/1 switch from the environment, `unset` when absent or empty.
bool switch_from_env(const char* name, bool unset) {
  const char* env = std::getenv(name);
  if (!env || !*env) return unset;
  const std::string v = env;
  TG_CHECK(v == "0" || v == "1", "{} must be 0 or 1, got '{}'", name, v);
  return v == "1";
}

// TIERGEN_SMALL_MATMUL_BLOCKING=0 turns the cache blocking off, so whole runs can be
// compared with and without it (the results are the same bits either way).
std::atomic<bool>& blocking() {
  static std::atomic<bool> on{switch_from_env("TIERGEN_SMALL_MATMUL_BLOCKING", true)};
  return on;
}

// TIERGEN_SMALL_MATMUL_ONE_ROW_SEQUENTIAL=0 or 1 overrides this CPU's default, so whole
// runs can be compared in either form on any host (the same bits either way).
std::atomic<bool>& one_row_sequential() {
  static std::atomic<bool> on{switch_from_env("TIERGEN_SMALL_MATMUL_ONE_ROW_SEQUENTIAL", cpu_is_amd_zen5_or_later())};
  return on;
}

std::atomic<bool>& every_row_count() {
  static std::atomic<bool> on{true};
  return on;
}

// Per ElemType (F32, F16, BF16, its values in order): a measured limit, or kNotMeasured.
constexpr int64_t kNotMeasured = -1;
constexpr size_t kElemTypes = static_cast<size_t>(ElemType::BF16) + 1;
std::array<std::atomic<int64_t>, kElemTypes>& measured_max_rows() {
  static std::array<std::atomic<int64_t>, kElemTypes> rows{kNotMeasured, kNotMeasured, kNotMeasured};
  return rows;
}

float weight_at(const SmallMatmulArgs& a, int64_t row, int64_t p) { return load_element(a.w, a.w_type, row * a.k + p); }

enum class Kernel { Portable, Avx2, Avx512F32, Avx512Bf16, Amx };

Kernel pick_kernel(ElemType x_type, ElemType w_type) {
#if defined(__x86_64__)
  // AMX falls back on the AVX-512 BF16 kernel for a last chunk of few W rows.
  if (x_type == ElemType::BF16 && w_type == ElemType::BF16 && use_avx512_bf16_kernels()) {
    return use_amx_kernels() ? Kernel::Amx : Kernel::Avx512Bf16;
  }
  // fp32 x: the AVX2 kernel's sums, sixteen lanes at a time, where AVX-512 is in use.
  if (x_type == ElemType::F32 && use_avx512_bf16_kernels() && use_avx2_kernels()) return Kernel::Avx512F32;
  if (use_avx2_kernels()) return Kernel::Avx2;
#endif
  (void)x_type;
  (void)w_type;
  return Kernel::Portable;
}

// One row (decode at batch 1) reads W at memory speed on either fp32 kernel, and the
// AVX2 one, whose bits the AVX-512 kernel repeats, ran faster: TinyLlama fp32 decode at
// batch 1 went 45.5 -> 41.8 tok/s on AVX-512 (2-core Zen 5 guest, interleaved runs).
Kernel pick_kernel(const SmallMatmulArgs& a) {
  const Kernel kernel = pick_kernel(a.x_type, a.w_type);
  return kernel == Kernel::Avx512F32 && a.rows == 1 ? Kernel::Avx2 : kernel;
}

std::vector<float> bf16_rows_to_f32(const SmallMatmulArgs& a, int64_t row_stride) {
  std::vector<float> out(size_t(a.rows * a.k));
  const auto* x = static_cast<const uint16_t*>(a.x);
  for (int64_t m = 0; m < a.rows; ++m)
    for (int64_t p = 0; p < a.k; ++p) out[size_t(m * a.k + p)] = bf16_to_float(x[m * row_stride + p]);
  return out;
}

}  // namespace

namespace detail {

void small_matmul_columns_portable(const SmallMatmulArgs& a, const SmallMatmulShape& s, int64_t j0, int64_t j1) {
  for (int64_t j = j0; j < j1; ++j) {
    for (int64_t m = 0; m < a.rows; ++m) {
      const float* x = s.x_f32 + m * s.x_row_stride;
      float sum = 0.0f;
      for (int64_t p = 0; p < a.k; ++p) sum += weight_at(a, j, p) * x[p];
      if (a.bias) sum += a.bias[j];
      a.y[m * s.y_row_stride + j] = sum;
    }
  }
}

std::vector<float> x_rows_in_pairs(const float* x, int64_t rows, int64_t k, int64_t x_row_stride) {
  const int64_t k8 = k / 8 * 8, pairs = (rows + 1) / 2;
  std::vector<float> out(size_t(pairs * 2 * k8), 0.0f);
  for (int64_t m = 0; m < rows; ++m) {
    float* pair = out.data() + (m / 2) * 2 * k8 + (m % 2) * 8;
    for (int64_t p = 0; p < k8; p += 8) std::copy_n(x + m * x_row_stride + p, 8, pair + 2 * p);
  }
  return out;
}

}  // namespace detail

// What SmallMatmulX holds: the kernel chosen for x, x as that kernel reads it (with the
// copies it needs), and what identifies x, so that a call over another x is refused.
struct SmallMatmulX::State {
  Kernel kernel = Kernel::Portable;
  detail::SmallMatmulShape shape;  // its x fields and x_row_stride
  std::vector<float> x_scratch, x_pairs;
  std::vector<uint16_t> x_tiles;
  const void* x = nullptr;
  ElemType x_type = ElemType::F32, w_type = ElemType::F32;
  int64_t rows = 0, k = 0, x_row_stride = 0;
};

SmallMatmulX::SmallMatmulX(const SmallMatmulArgs& a) : state_(std::make_unique<State>()) {
  TG_CHECK(a.rows >= 0 && a.k > 0, "small_matmul: bad shape rows={} k={}", a.rows, a.k);
  TG_CHECK(a.x, "small_matmul: null x");
  TG_CHECK(a.x_type == ElemType::F32 || (a.x_type == ElemType::BF16 && a.w_type == ElemType::BF16),
           "small_matmul: x of type {} needs {} weights, got {}", elem_type_name(a.x_type),
           elem_type_name(ElemType::BF16), elem_type_name(a.w_type));
  State& st = *state_;
  st.x = a.x, st.x_type = a.x_type, st.w_type = a.w_type, st.rows = a.rows, st.k = a.k;
  st.x_row_stride = a.x_row_stride;
  detail::SmallMatmulShape& s = st.shape;
  s.x_row_stride = a.x_row_stride ? a.x_row_stride : a.k;
  TG_CHECK(s.x_row_stride >= a.k, "small_matmul: x's row stride {} below its row length k {}", s.x_row_stride, a.k);
  st.kernel = pick_kernel(a);
  if (a.rows == 0) return;
  if (a.x_type == ElemType::F32) {
    s.x_f32 = static_cast<const float*>(a.x);
  } else if (st.kernel == Kernel::Avx512Bf16 || st.kernel == Kernel::Amx) {
    s.x_bf16 = static_cast<const uint16_t*>(a.x);
#if defined(__x86_64__)
    if (st.kernel == Kernel::Amx) {
      st.x_tiles = detail::amx::pack_rows(s.x_bf16, a.rows, a.k, s.x_row_stride);
      s.x_amx = st.x_tiles.data();
    }
#endif
  } else {
    st.x_scratch = bf16_rows_to_f32(a, s.x_row_stride);
    s.x_f32 = st.x_scratch.data();
    s.x_row_stride = a.k;
  }
  if (st.kernel == Kernel::Avx512F32) {
    st.x_pairs = detail::x_rows_in_pairs(s.x_f32, a.rows, a.k, s.x_row_stride);
    s.x_pairs = st.x_pairs.data();
  }
}

SmallMatmulX::~SmallMatmulX() = default;
SmallMatmulX::SmallMatmulX(SmallMatmulX&&) noexcept = default;
SmallMatmulX& SmallMatmulX::operator=(SmallMatmulX&&) noexcept = default;

void small_matmul(const SmallMatmulArgs& a, const SmallMatmulX& x) {
  TG_CHECK(x.state_, "small_matmul: x was moved from");
  const SmallMatmulX::State& st = *x.state_;
  TG_CHECK(a.x == st.x && a.x_type == st.x_type && a.w_type == st.w_type && a.rows == st.rows && a.k == st.k &&
               a.x_row_stride == st.x_row_stride,
           "small_matmul: x was prepared for another product (rows {} k {}, got rows {} k {})", st.rows, st.k,
           a.rows, a.k);
  TG_CHECK(a.n >= 0, "small_matmul: bad shape n={}", a.n);
  TG_CHECK(a.w && a.y, "small_matmul: null w or y");
  detail::SmallMatmulShape s = st.shape;
  s.y_row_stride = a.y_row_stride ? a.y_row_stride : a.n;
  TG_CHECK(s.y_row_stride >= a.n, "small_matmul: y's row stride {} below its row length n {}", s.y_row_stride, a.n);
  if (a.rows == 0 || a.n == 0) return;
  s.blocking = small_matmul_blocking();
  s.one_row_sequential = small_matmul_one_row_sequential();
  const Kernel kernel = st.kernel;
#if defined(__x86_64__)
  if (kernel == Kernel::Amx) {
    detail::for_each_thread_columns(a.n, a.k, a.num_threads,
                                    [&](int64_t j0, int64_t j1) { detail::small_matmul_columns_amx(a, s, j0, j1); });
    return;
  }
  if (kernel == Kernel::Avx512F32 && detail::widens_w(a)) return detail::small_matmul_over_widened_w(a, s);
#endif
  detail::for_each_column_chunk(a.n, a.k, a.num_threads, [&](int64_t j0, int64_t j1) {
    switch (kernel) {
#if defined(__x86_64__)
      case Kernel::Avx512Bf16: return detail::small_matmul_columns_avx512_bf16(a, s, j0, j1);
      case Kernel::Avx512F32: return detail::small_matmul_columns_avx512_f32(a, s, j0, j1);
      case Kernel::Avx2: return detail::small_matmul_columns_avx2(a, s, j0, j1);
#endif
      default: return detail::small_matmul_columns_portable(a, s, j0, j1);
    }
  });
}

void small_matmul(const SmallMatmulArgs& a) {
  TG_CHECK(a.n >= 0, "small_matmul: bad shape rows={} k={} n={}", a.rows, a.k, a.n);
  TG_CHECK(a.x && a.w && a.y, "small_matmul: null x, w or y");
  small_matmul(a, SmallMatmulX(a));  // every check before an empty product returns
}

const char* small_matmul_kernel_name(ElemType x_type, ElemType w_type) {
  switch (pick_kernel(x_type, w_type)) {
    case Kernel::Amx: return "amx";
    case Kernel::Avx512Bf16: return "avx512-bf16";
    case Kernel::Avx512F32: return "avx512-f32";
    case Kernel::Avx2: return "avx2";
    case Kernel::Portable: return "portable";
  }
  return "portable";
}

int64_t small_matmul_max_rows(ElemType w_type) {
  const int64_t setting = small_matmul_max_rows_setting();
  if (setting >= 0) return setting;
  if (small_matmul_for_every_row_count()) return std::numeric_limits<int64_t>::max();
  const int64_t measured = measured_max_rows()[static_cast<size_t>(w_type)].load(std::memory_order_relaxed);
  return measured != kNotMeasured ? measured : default_small_matmul_max_rows(w_type);
}

int64_t default_small_matmul_max_rows(ElemType w_type) {
  // The AVX2/F16C kernel, not the portable one, is what beats LibTorch's fallback.
  if (w_type == ElemType::F16 && use_avx2_kernels() && !cpu_has_native_fp16_products()) {
    return std::numeric_limits<int64_t>::max();
  }
  return kDefaultMaxRows;
}

int64_t small_matmul_max_rows_under(ElemType w_type, int64_t measured_rows) {
  const int64_t setting = small_matmul_max_rows_setting();
  if (setting >= 0) return setting;
  const int64_t every_row = std::numeric_limits<int64_t>::max();
  if (small_matmul_for_every_row_count()) return every_row;
  const int64_t default_rows = default_small_matmul_max_rows(w_type);
  return measured_rows > 0 && default_rows != every_row ? measured_rows : default_rows;
}

void set_measured_small_matmul_max_rows(ElemType w_type, int64_t rows) {
  TG_CHECK(rows >= 0, "internal: a measured small-row limit of {} rows", rows);
  measured_max_rows()[static_cast<size_t>(w_type)].store(rows);
}

void clear_measured_small_matmul_max_rows() {
  for (auto& rows : measured_max_rows()) rows.store(kNotMeasured);
}

int64_t small_matmul_max_rows_setting() { return max_rows_setting().load(std::memory_order_relaxed); }

void set_small_matmul_max_rows(int64_t rows) { max_rows_setting().store(std::max<int64_t>(rows, -1)); }

bool small_matmul_blocking() { return blocking().load(std::memory_order_relaxed); }

void set_small_matmul_blocking(bool on) { blocking().store(on); }

bool small_matmul_one_row_sequential() { return one_row_sequential().load(std::memory_order_relaxed); }

void set_small_matmul_one_row_sequential(bool on) { one_row_sequential().store(on); }

bool small_matmul_for_every_row_count() { return every_row_count().load(std::memory_order_relaxed); }

void set_small_matmul_for_every_row_count(bool on) { every_row_count().store(on); }

}  // namespace tiergen::kernels
