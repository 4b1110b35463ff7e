// libFuzzer target: a model's config.json (model::spec_from_config), as
// spec_from_config_file and `tiergen generate --model DIR` read it. The input is the
// file's bytes. Contract: the only exception is tiergen::Error, and a Spec that is
// accepted has sizes the engine can lay out: positive, and a weight list whose element
// counts fit 64 bits (the planner sums them), and numbers that keep activations finite
// (norm eps >= 0, rope theta and scaling factor > 0).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "tiergen/common/error.h"
#include "tiergen/model/spec.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_config: contract broken: %s\n", what);
  std::abort();
}

// Sum of shape products with overflow checks; false when a count does not fit int64.
bool checked_total(const tiergen::model::Spec& s) {
  int64_t total = 0;
  for (const auto& layer : s.weight_layers()) {
    for (const auto& t : layer.tensors) {
      int64_t n = 1;
      for (int64_t d : t.shape) {
        if (d <= 0) fail("accepted spec has a tensor dimension <= 0");
        if (__builtin_mul_overflow(n, d, &n)) return false;
      }
      if (__builtin_add_overflow(total, n, &total)) return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nlohmann::json;
  const json doc = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return 0;  // spec_from_config_file reports invalid JSON itself
  tiergen::model::Spec spec;
  try {
    spec = tiergen::model::spec_from_config(doc, "fuzz/config.json");
  } catch (const tiergen::Error&) {
    return 0;
  }
  // Numbers that make every activation NaN are refused, not found as garbage tokens.
  if (!std::isfinite(spec.norm_eps) || spec.norm_eps < 0) fail("accepted spec with a negative or non-finite norm eps");
  if (spec.family == tiergen::model::Family::Llama && !(std::isfinite(spec.rope_theta) && spec.rope_theta > 0)) {
    fail("accepted spec with rope_theta <= 0");
  }
  if (!spec.rope_scaling.type.empty() && !(std::isfinite(spec.rope_scaling.factor) && spec.rope_scaling.factor > 0)) {
    fail("accepted spec with a rope scaling factor <= 0");
  }
  if (spec.vocab_size <= 0 || spec.hidden_size <= 0 || spec.num_layers <= 0 || spec.num_heads <= 0 ||
      spec.num_kv_heads <= 0 || spec.head_dim <= 0 || spec.max_positions <= 0) {
    fail("accepted spec has a size <= 0");
  }
  // A real config has at most a few hundred layers; laying out billions of them is the
  // out-of-memory the engine would hit, so the target only walks plausible ones.
  if (spec.num_layers <= 4096) {
    if (!checked_total(spec)) fail("accepted spec whose element counts overflow int64");
    (void)spec.total_params();
    (void)spec.decoder_layer_params();
  }
  return 0;
}
