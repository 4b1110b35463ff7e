#include "kernels/cpu/silu_gate.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/elements.h"
#if defined(__x86_64__)
#include "kernels/cpu/simd_avx2.h"
#endif
#include "tiergen/common/error.h"

namespace tiergen::kernels {

namespace {

// Elements per OpenMP task: the split never changes an element's result (each is
// computed alone), only how many threads share a large product.
constexpr int64_t kElementsPerTask = 16384;

// Elements [begin, end) with the scalar std::exp.
template <ElemType T>
void gate_range(const SiluGateArgs& a, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float g = load_element(a.gate, T, i);
    const float silu = round_to(T, g / (1.0f + std::exp(-g)));
    store_element(a.y, T, i, silu * load_element(a.up, T, i));
  }
}

#if defined(__x86_64__)

// Eight elements from i on: the same steps as gate_range, with avx2::exp8.
template <ElemType T>
TG_AVX2 void gate8(const void* gate, const void* up, void* y, int64_t i) {
  const __m256 g = avx2::load8<T>(gate, i);
  const __m256 e = avx2::exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
  const __m256 silu = avx2::round8_to<T>(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
  avx2::store8<T>(y, i, _mm256_mul_ps(silu, avx2::load8<T>(up, i)));
}

// Elements [begin, end) eight at a time; the last few go through a padded copy, so
// that they too take exp8 and every element is computed alike wherever it falls.
template <ElemType T>
TG_AVX2 void gate_range_avx2(const SiluGateArgs& a, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) gate8<T>(a.gate, a.up, a.y, i);
  if (i == end) return;
  const int64_t rest = end - i, bytes = elem_size(T);
  alignas(32) uint8_t gate[32] = {}, up[32] = {}, y[32];
  std::memcpy(gate, static_cast<const uint8_t*>(a.gate) + i * bytes, rest * bytes);
  std::memcpy(up, static_cast<const uint8_t*>(a.up) + i * bytes, rest * bytes);
  gate8<T>(gate, up, y, 0);
  std::memcpy(static_cast<uint8_t*>(a.y) + i * bytes, y, rest * bytes);
}

#endif  // __x86_64__

// With AVX2, a vector exp: LibTorch's vector silu takes 1-2 units of fp32 from expf
// too, and std::exp element by element was 5% of a TinyLlama bf16 prefill.
template <ElemType T>
void gate_elements(const SiluGateArgs& a) {
  const int64_t tasks = (a.count + kElementsPerTask - 1) / kElementsPerTask;
  const int threads = a.num_threads > 0 ? a.num_threads : omp_get_max_threads();
  [[maybe_unused]] const bool vector = use_avx2_kernels();
#pragma omp parallel for schedule(static) num_threads(threads) if (tasks > 1)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t begin = task * kElementsPerTask, end = std::min(a.count, begin + kElementsPerTask);
#if defined(__x86_64__)
    if (vector) {
      gate_range_avx2<T>(a, begin, end);
      continue;
    }
#endif
    gate_range<T>(a, begin, end);
  }
}

}  // namespace

void silu_gate(const SiluGateArgs& a) {
  TG_CHECK(a.count >= 0, "silu_gate: negative element count {}", a.count);
  if (a.count == 0) return;
  TG_CHECK(a.gate && a.up && a.y, "silu_gate: null pointer");
  switch (a.type) {
    case ElemType::F32: return gate_elements<ElemType::F32>(a);
    case ElemType::F16: return gate_elements<ElemType::F16>(a);
    case ElemType::BF16: return gate_elements<ElemType::BF16>(a);
  }
}

}  // namespace tiergen::kernels
