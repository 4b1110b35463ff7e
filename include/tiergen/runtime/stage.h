#pragma once
// A pipeline stage's share of the model (flexgen.txt section 4.4): a contiguous range
// of FlexGen weight layers (0 = embedding, 1..L decoder layers, L+1 head). The first
// stage embeds the prompt, the last one computes the head and samples; a single
// process is the one stage holding every layer.
#include <cstdint>
#include <string>
#include <vector>

#include "tiergen/model/spec.h"

namespace tiergen::runtime {

struct StageLayers {
  int64_t first = 0;  // first weight layer of the stage
  int64_t end = 0;    // one past its last weight layer

  static StageLayers whole(const model::Spec& spec) { return {0, spec.num_weight_layers()}; }
  bool contains(int64_t layer) const { return layer >= first && layer < end; }
  bool embeds() const { return first == 0; }
  bool samples(const model::Spec& spec) const { return end == spec.num_weight_layers(); }
  // Decoder layers of the stage, as indices 0..L-1 (the KV cache's numbering).
  int64_t first_decoder(const model::Spec& spec) const;
  int64_t decoder_count(const model::Spec& spec) const;
  std::string describe(const model::Spec& spec) const;
};

// Each weight layer's share of the model, half by weight bytes (what an offloaded
// stage moves) and half by matmul work (what a resident one computes; the embedding
// is a lookup): the two costs a stage's time follows. The shares sum to 1.
std::vector<double> stage_balance_weights(const model::Spec& spec);

// Splits the model into `stages` contiguous stages, each with at least one decoder
// layer, minimising the largest stage's share (stage_balance_weights). Deterministic
// in the spec, so every rank derives the same split. Refuses more stages than decoder
// layers.
std::vector<StageLayers> split_stages(const model::Spec& spec, int64_t stages);

}  // namespace tiergen::runtime
