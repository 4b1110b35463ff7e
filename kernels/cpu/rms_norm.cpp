#include "kernels/cpu/rms_norm.h"

#include <omp.h>

#include <cmath>

#include "kernels/cpu/elements.h"
#include "tiergen/common/error.h"

namespace tiergen::kernels {

namespace {

// Eight partial sums, so the compiler can keep them in vector lanes (the order of an
// fp32 sum is otherwise fixed by the source).
template <ElemType T>
float sum_of_squares(const void* x, int64_t cols) {
  float lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= cols; i += 8) {
    for (int l = 0; l < 8; ++l) {
      const float v = load_element(x, T, i + l);
      lanes[l] += v * v;
    }
  }
  for (; i < cols; ++i) {
    const float v = load_element(x, T, i);
    lanes[0] += v * v;
  }
  return ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
}

// Rows are independent, so a prefill's rows are shared between threads (a row's result
// is the same on any thread); a few decode rows stay on the calling one.
constexpr int64_t kParallelMinElements = 1 << 15;

template <ElemType T>
void rows(const RmsNormArgs& a) {
  const int64_t bytes = elem_size(T);
  const int threads = a.num_threads > 0 ? a.num_threads : omp_get_max_threads();
  const bool parallel = a.rows > 1 && a.rows * a.cols >= kParallelMinElements;
#pragma omp parallel for schedule(static) num_threads(threads) if (parallel)
  for (int64_t r = 0; r < a.rows; ++r) {
    const void* x = static_cast<const uint8_t*>(a.x) + r * a.cols * bytes;
    void* y = static_cast<uint8_t*>(a.y) + r * a.cols * bytes;
    const float inv = 1.0f / std::sqrt(sum_of_squares<T>(x, a.cols) / static_cast<float>(a.cols) + a.eps);
    for (int64_t i = 0; i < a.cols; ++i) {
      const float normed = round_to(T, load_element(x, T, i) * inv);
      store_element(y, T, i, load_element(a.weight, T, i) * normed);
    }
  }
}

}  // namespace

void rms_norm(const RmsNormArgs& a) {
  TG_CHECK(a.x && a.weight && a.y, "rms_norm: null pointer");
  TG_CHECK(a.rows >= 0 && a.cols > 0, "rms_norm: bad shape [{}, {}]", a.rows, a.cols);
  switch (a.type) {
    case ElemType::F32: return rows<ElemType::F32>(a);
    case ElemType::F16: return rows<ElemType::F16>(a);
    case ElemType::BF16: return rows<ElemType::BF16>(a);
  }
}

}  // namespace tiergen::kernels
