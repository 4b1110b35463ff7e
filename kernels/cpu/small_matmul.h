#pragma once
// Matrix products with few rows on the CPU: y = x W^T (+ bias), the shape of every
// projection during decode (one row per sequence). A packed GEMM (OpenBLAS sgemm,
// oneDNN brgemm) copies the whole weight matrix into its own layout on every call,
// which at one to a few dozen rows costs more than the product itself; this kernel
// reads W [n, k] row-major in place, once per call, converting F16/BF16 elements to
// fp32 in registers (so 16-bit weights cost half the bytes of fp32 ones) and
// accumulating in fp32.
//
// Every output element y[m][j] is summed in one fixed order that depends only on k and
// the kernel (AVX2, and AVX-512 with fp32 x: eight fp32 lanes over k in steps of
// eight, the lanes added pairwise, then the tail; AVX-512 BF16: sixteen lanes of bf16
// pairs), never on the
// number of rows, the thread count or j's position in a tile, so a sequence's result
// does not depend on which other sequences share its batch.
//
// Kernels here take raw pointers and never LibTorch types.
#include <cstdint>
#include <memory>

#include "kernels/cpu/quantize.h"

namespace tiergen::kernels {

struct SmallMatmulArgs {
  // [rows, k]: F32, or BF16 with BF16 weights (bf16 activations of a bf16 model, used
  // as they are by the AVX-512 BF16 kernel; converted to fp32 for the other kernels).
  const void* x = nullptr;
  ElemType x_type = ElemType::F32;
  int64_t rows = 0;
  int64_t k = 0;
  int64_t x_row_stride = 0;   // elements between rows of x; 0 means k
  const void* w = nullptr;    // [n, k] row-major elements of w_type
  ElemType w_type = ElemType::F32;
  int64_t n = 0;
  const float* bias = nullptr;  // [n] fp32, or nullptr
  float* y = nullptr;         // [rows, n] fp32
  int64_t y_row_stride = 0;   // floats between rows of y; 0 means n
  int num_threads = 0;        // OpenMP threads; 0 = the OpenMP default
};

// Computes y = x W^T (+ bias). Throws tiergen::Error on inconsistent arguments.
void small_matmul(const SmallMatmulArgs& args);

// x made ready once for several small_matmul() calls over parts of one W, each call
// with the same x, rows, k, x row stride and element types (only w, n, bias and y
// change): what the kernel chosen for x copies of it per call (AMX's B tiles, the
// AVX-512 fp32 kernel's row pairs, bf16 rows widened to fp32) is made here, once. Each
// output column's sum is the one a single call over all of W gives when the parts
// start at multiples of 16 W rows (column_chunks.h). model::quantized_linear_product
// multiplies its dequantized tiles this way.
class SmallMatmulX {
 public:
  explicit SmallMatmulX(const SmallMatmulArgs& args);  // reads x, x_type, rows, k, x_row_stride, w_type
  ~SmallMatmulX();
  SmallMatmulX(SmallMatmulX&&) noexcept;
  SmallMatmulX& operator=(SmallMatmulX&&) noexcept;

 private:
  friend void small_matmul(const SmallMatmulArgs& args, const SmallMatmulX& x);
  struct State;
  std::unique_ptr<State> state_;
};
// small_matmul(args) over x prepared for it; refused when `x` was made for another x.
void small_matmul(const SmallMatmulArgs& args, const SmallMatmulX& x);

// The kernel small_matmul() runs for x of `x_type` and weights of `w_type` on this CPU,
// within TIERGEN_CPU_ISA: "amx", "avx512-bf16" (bf16 pairs only), "avx512-f32" (fp32 x
// at the avx512-bf16 level and above: the AVX2 kernel's sums, bit for bit, two per
// register; a single row of x runs the AVX2 kernel itself), "avx2" or "portable".
const char* small_matmul_kernel_name(ElemType x_type, ElemType w_type);

// Batch invariance, the default: callers route products of every row count to
// small_matmul(), whose sums do not depend on the row count, so a row's result does not
// depend on how many rows share its product (a sequence's scores are the same under any
// -b, beside any prompts, and after a resume). Off (tiergen's --cpu-gemm), products above
// small_matmul_max_rows() rows go to a packed GEMM, faster there (fp32 at 256 rows on a
// 2-core AVX2 EPYC: 1.5x) but with last bits that depend on the row count. An explicit
// limit (TIERGEN_SMALL_MATMUL_MAX_ROWS, set_small_matmul_max_rows) holds over both.
bool small_matmul_for_every_row_count();
void set_small_matmul_for_every_row_count(bool on);

// set_small_matmul_for_every_row_count(on) for a scope, then the previous value again.
class SmallMatmulEveryRowCountScope {
 public:
  explicit SmallMatmulEveryRowCountScope(bool on) : saved_(small_matmul_for_every_row_count()) {
    set_small_matmul_for_every_row_count(on);
  }
  ~SmallMatmulEveryRowCountScope() { set_small_matmul_for_every_row_count(saved_); }
  SmallMatmulEveryRowCountScope(const SmallMatmulEveryRowCountScope&) = delete;
  SmallMatmulEveryRowCountScope& operator=(const SmallMatmulEveryRowCountScope&) = delete;

 private:
  bool saved_;
};

// Cache blocking of many-row products (small_matmul_blocking.h), on by default. It
// never changes a result's bits; off (TIERGEN_SMALL_MATMUL_BLOCKING=0) is for benchmarks
// and tests that show both.
bool small_matmul_blocking();
void set_small_matmul_blocking(bool on);

// How the AVX2 kernel (which takes one row of fp32 x at every level from avx2) multiplies
// one row of x by fp32 weights (decode at batch 1): one W row at a time, read front to
// back (on), or tiles of four W rows read side by side (off); either way each W row is
// prefetched ahead (w_stream_prefetch.h) and no result's bits change. On by default where
// the CPU reads one stream faster (cpu_is_amd_zen5_or_later: on a 2-core Zen 5 guest,
// TinyLlama fp32 batch-1 decode 1.07x, 1.21x and 1.13x, medians of three sets of
// interleaved pairs), off elsewhere (an Emerald Rapids guest read four rows side by side,
// prefetched, faster than one); TIERGEN_SMALL_MATMUL_ONE_ROW_SEQUENTIAL=0/1 overrides the
// default.
bool small_matmul_one_row_sequential();
void set_small_matmul_one_row_sequential(bool on);

// Without batch invariance, the largest row count for which callers route a product
// with weights of `w_type` to small_matmul() instead of a packed GEMM: 16 (the measured crossover with OpenBLAS and
// oneDNN, bench/bench_matmul.cpp), and no limit for fp16 weights where the AVX2 kernels
// run on a CPU without native fp16 products, where LibTorch's fp16 GEMM is a fallback
// several times slower (cpu_has_native_fp16_products). A measured limit for one type
// (`tiergen profile`'s cpu.small_matmul_max_rows: up to where small_matmul beat the GEMM,
// carried by a searched plan) replaces that type's default. TIERGEN_SMALL_MATMUL_MAX_ROWS or
// set_small_matmul_max_rows() sets one limit for every type, process-wide, over both; 0
// turns the small-row path off (benchmarks and tests compare both); a negative value
// restores the defaults (or the measured limits).
int64_t small_matmul_max_rows(ElemType w_type);
void set_small_matmul_max_rows(int64_t rows);
// The setting itself: the limit set, or -1 for the defaults.
int64_t small_matmul_max_rows_setting();
// The measured limit for weights of `w_type` (rows >= 0), set by the engine from its
// policy (runtime::Policy::small_matmul) for the run; clear_measured_small_matmul_max_rows()
// returns every type to its default. Set before products run, not while they do.
void set_measured_small_matmul_max_rows(ElemType w_type, int64_t rows);
void clear_measured_small_matmul_max_rows();
// The limit for `w_type` without any measured limit or setting.
int64_t default_small_matmul_max_rows(ElemType w_type);
// The limit small_matmul_max_rows(w_type) gives once a plan's measured limit
// `measured_rows` (0: none) is in force, as the engine applies it: the setting first,
// every row count while products are batch-invariant, the default where the default
// has no limit (the GEMM is a slow fallback there, and a plan searched on another
// machine must not send products to it), else the measured limit, else the default.
// For pricing a plan before its run sets the limit.
int64_t small_matmul_max_rows_under(ElemType w_type, int64_t measured_rows);

// set_small_matmul_max_rows(rows) for a scope, then the previous setting again (for
// measurements and tests; the setting is process-wide, not for concurrent scopes).
class SmallMatmulMaxRowsScope {
 public:
  explicit SmallMatmulMaxRowsScope(int64_t rows) : saved_(small_matmul_max_rows_setting()) {
    set_small_matmul_max_rows(rows);
  }
  ~SmallMatmulMaxRowsScope() { set_small_matmul_max_rows(saved_); }
  SmallMatmulMaxRowsScope(const SmallMatmulMaxRowsScope&) = delete;
  SmallMatmulMaxRowsScope& operator=(const SmallMatmulMaxRowsScope&) = delete;

 private:
  int64_t saved_;
};

}  // namespace tiergen::kernels
