#pragma once
// How `tiergen profile` prices the stand-in's decode attention over a loaded cache
// (LoadedCacheAttention) from five timed shapes: each cost is a difference of two shapes'
// times that differ in one thing only, so that no cost absorbs another's.
#include <array>
#include <cstdint>
#include <optional>

#include "policy/hardware_profile.h"

namespace tiergen::policy {

// One timed call: `units` units (a sequence's kv head) of `groups` query heads each, over
// `context` positions of K and V with heads `head_dim` wide.
struct AttentionProbeShape {
  int64_t units, groups, context, head_dim;
  double positions() const { return double(units * context); }
  double scores() const { return double(units * groups * context); }
  double kv_bytes(int64_t elem_bytes) const { return double(2 * units * context * head_dim * elem_bytes); }
};

// The shapes in the order the fit reads their times: few units; more units; more
// positions; wider heads (more bytes, nothing else); more query heads a unit (more
// scores, nothing else). Sizes of a layer's gpu batch in the stand-in's sweeps: 7 to 28
// MB of fp32 K and V.
inline constexpr std::array<AttentionProbeShape, 5> kLoadedCacheAttentionShapes = {{
    {48, 1, 48, 64},
    {192, 1, 48, 64},
    {192, 1, 144, 64},
    {192, 1, 144, 128},
    {192, 8, 48, 64},
}};

// The costs from the shapes' median `seconds` in a dtype of `elem_bytes`: the bytes' rate
// from the wider heads, the cost per score from the added query heads, per position from
// the added positions (each also a score and its bytes), per unit from the added units,
// and what is left of the first shape per call; each cost never below zero. nullopt
// where the wider heads did not take longer (a noisy host: no rate to price bytes at).
std::optional<LoadedCacheAttention> fit_loaded_cache_attention(const std::array<double, 5>& seconds,
                                                               int64_t elem_bytes);

}  // namespace tiergen::policy
