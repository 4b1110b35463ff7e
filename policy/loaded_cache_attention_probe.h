#pragma once
// One call of decode attention as a host standing in for the GPU makes it over a cache
// it loaded (runtime::KvCache::decode_attention: model::attend over units of one
// sequence's kv head, the unit's query heads in the query rows, keys and values [units,
// 1, context, head dim]), in one dtype, no padding: what `tiergen profile` times for
// LoadedCacheAttention and bench_decode_attention times against its prices. (With
// profiler.cpp, the only policy/ code that uses LibTorch.)
#include <ATen/ATen.h>

#include "policy/loaded_cache_attention_fit.h"
#include "tiergen/model/forward.h"

namespace tiergen::policy {

class LoadedCacheAttentionProbe {
 public:
  LoadedCacheAttentionProbe(at::ScalarType dtype, const AttentionProbeShape& shape)
      : q_(at::randn({shape.units, shape.groups, 1, shape.head_dim}).to(dtype)),
        k_(at::randn({shape.units, 1, shape.context, shape.head_dim}).to(dtype)),
        v_(at::randn({shape.units, 1, shape.context, shape.head_dim}).to(dtype)) {
    step_.pad = at::zeros({shape.units}, at::kLong);
    step_.past_len = shape.context - 1;
    step_.visibility = model::visibility_mask(step_, 1, shape.context, at::kCPU);
  }
  void run() const { (void)model::attend(q_, k_, v_, step_); }
  double kv_bytes() const { return double(k_.nbytes() + v_.nbytes()); }

 private:
  at::Tensor q_, k_, v_;
  model::StepInputs step_;
};

}  // namespace tiergen::policy
