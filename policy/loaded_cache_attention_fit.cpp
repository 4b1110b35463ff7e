#include "policy/loaded_cache_attention_fit.h"

#include <algorithm>

namespace tiergen::policy {

std::optional<LoadedCacheAttention> fit_loaded_cache_attention(const std::array<double, 5>& seconds,
                                                               int64_t elem_bytes) {
  const auto& [few, units, positions, wide, grouped] = kLoadedCacheAttentionShapes;
  const auto& t = seconds;
  if (!(t[3] > t[2])) return std::nullopt;
  LoadedCacheAttention a;
  a.kv_bandwidth = (wide.kv_bytes(elem_bytes) - positions.kv_bytes(elem_bytes)) / (t[3] - t[2]);
  a.score_seconds = std::max(0.0, (t[4] - t[1]) / (grouped.scores() - units.scores()));
  const double per_position =
      (t[2] - t[1] - (positions.kv_bytes(elem_bytes) - units.kv_bytes(elem_bytes)) / a.kv_bandwidth) /
      (positions.positions() - units.positions());
  a.position_seconds = std::max(0.0, per_position - a.score_seconds);
  // Each shape's time less what its positions, scores and bytes cost.
  const auto beside_units = [&](const AttentionProbeShape& s, double time) {
    return time - s.positions() * a.position_seconds - s.scores() * a.score_seconds -
           s.kv_bytes(elem_bytes) / a.kv_bandwidth;
  };
  a.unit_seconds =
      std::max(0.0, (beside_units(units, t[1]) - beside_units(few, t[0])) / double(units.units - few.units));
  a.call_seconds = std::max(0.0, beside_units(few, t[0]) - double(few.units) * a.unit_seconds);
  return a;
}

}  // namespace tiergen::policy
