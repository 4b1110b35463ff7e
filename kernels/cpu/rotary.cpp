#include "kernels/cpu/rotary.h"

#include <omp.h>

#include <vector>

#include "kernels/cpu/elements.h"
#include "tiergen/common/error.h"

namespace tiergen::kernels {

namespace {

// Rows are independent, so a prefill's rows are shared between threads (a row's result
// is the same on any thread); a few decode rows stay on the calling one.
constexpr int64_t kParallelMinElements = 1 << 15;

template <ElemType T>
void rotate_rows(const RotaryArgs& a) {
  const int64_t d = a.head_dim, half = d / 2, bytes = elem_size(T);
  const int threads = a.num_threads > 0 ? a.num_threads : omp_get_max_threads();
  const bool parallel = a.rows > 1 && a.rows * a.heads * d >= kParallelMinElements;
#pragma omp parallel num_threads(threads) if (parallel)
  {
    std::vector<float> head(static_cast<size_t>(d));  // the head's inputs: the update reads both halves
#pragma omp for schedule(static)
    for (int64_t r = 0; r < a.rows; ++r) {
      const void* cos = static_cast<const uint8_t*>(a.cos) + r * d * bytes;
      const void* sin = static_cast<const uint8_t*>(a.sin) + r * d * bytes;
      for (int64_t h = 0; h < a.heads; ++h) {
        void* x = static_cast<uint8_t*>(a.x) + (r * a.heads + h) * d * bytes;
        for (int64_t i = 0; i < d; ++i) head[size_t(i)] = load_element(x, T, i);
        for (int64_t i = 0; i < d; ++i) {
          const float rotated = i < half ? -head[size_t(i + half)] : head[size_t(i - half)];
          const float straight = round_to(T, head[size_t(i)] * load_element(cos, T, i));
          const float turned = round_to(T, rotated * load_element(sin, T, i));
          store_element(x, T, i, straight + turned);
        }
      }
    }
  }
}

}  // namespace

void apply_rotary(const RotaryArgs& a) {
  TG_CHECK(a.x && a.cos && a.sin, "apply_rotary: null pointer");
  TG_CHECK(a.rows >= 0 && a.heads > 0 && a.head_dim > 0 && a.head_dim % 2 == 0,
           "apply_rotary: bad shape rows={} heads={} head_dim={}", a.rows, a.heads, a.head_dim);
  switch (a.type) {
    case ElemType::F32: return rotate_rows<ElemType::F32>(a);
    case ElemType::F16: return rotate_rows<ElemType::F16>(a);
    case ElemType::BF16: return rotate_rows<ElemType::BF16>(a);
  }
}

}  // namespace tiergen::kernels
