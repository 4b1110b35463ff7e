#include "kernels/cpu/silu_gate.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/elements.h"
#include "tiergen/common/error.h"

namespace tiergen::kernels {

namespace {

// Elements per OpenMP task: the split never changes an element's result (each is
// computed alone), only how many threads share a large product.
constexpr int64_t kElementsPerTask = 16384;

template <ElemType T>
void gate_elements(const SiluGateArgs& a) {
  const int64_t tasks = (a.count + kElementsPerTask - 1) / kElementsPerTask;
  const int threads = a.num_threads > 0 ? a.num_threads : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(threads) if (tasks > 1)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t end = std::min(a.count, (task + 1) * kElementsPerTask);
    for (int64_t i = task * kElementsPerTask; i < end; ++i) {
      const float g = load_element(a.gate, T, i);
      const float silu = round_to(T, g / (1.0f + std::exp(-g)));
      store_element(a.y, T, i, silu * load_element(a.up, T, i));
    }
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
