#include "tiergen/runtime/stage.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "tiergen/common/error.h"

namespace tiergen::runtime {

int64_t StageLayers::first_decoder(const model::Spec& spec) const {
  return std::clamp<int64_t>(first - 1, 0, spec.num_layers);
}

int64_t StageLayers::decoder_count(const model::Spec& spec) const {
  const int64_t begin = std::max<int64_t>(first, 1), stop = std::min<int64_t>(end, spec.num_layers + 1);
  return std::max<int64_t>(0, stop - begin);
}

std::string StageLayers::describe(const model::Spec& spec) const {
  std::string parts;
  if (embeds()) parts += "embedding, ";
  const int64_t n = decoder_count(spec), d = first_decoder(spec);
  parts += n == 1 ? fmt::format("decoder layer {}", d) : fmt::format("decoder layers {}-{}", d, d + n - 1);
  if (samples(spec)) parts += ", head";
  return parts;
}

std::vector<double> stage_balance_weights(const model::Spec& spec) {
  const auto layers = spec.weight_layers();
  std::vector<double> bytes, compute;
  double total_bytes = 0, total_compute = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto elements = static_cast<double>(layers[i].numel());
    bytes.push_back(elements);
    // The embedding is a lookup: bytes to hold and move, next to no compute.
    compute.push_back(i == 0 ? 0.0 : elements);
    total_bytes += bytes.back();
    total_compute += compute.back();
  }
  std::vector<double> weights;
  for (size_t i = 0; i < layers.size(); ++i) weights.push_back(0.5 * bytes[i] / total_bytes + 0.5 * compute[i] / total_compute);
  return weights;
}

std::vector<StageLayers> split_stages(const model::Spec& spec, int64_t stages) {
  TG_CHECK(stages >= 1, "a pipeline needs at least one stage, got {}", stages);
  TG_CHECK(stages <= spec.num_layers, "{} pipeline stages for a model of {} decoder layers: every stage needs at "
           "least one decoder layer; use at most {} processes", stages, spec.num_layers, spec.num_layers);
  const auto layers = spec.weight_layers();
  const auto n = static_cast<int64_t>(layers.size());
  const std::vector<double> shares = stage_balance_weights(spec);
  // prefix[i]: the balance weight of weight layers [0, i).
  std::vector<double> prefix(static_cast<size_t>(n + 1), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    prefix[static_cast<size_t>(i + 1)] = prefix[static_cast<size_t>(i)] + shares[static_cast<size_t>(i)];
  }
  const auto weight = [&](int64_t a, int64_t b) { return prefix[static_cast<size_t>(b)] - prefix[static_cast<size_t>(a)]; };
  // best[s][e]: the smallest largest stage when layers [0, e) form s stages; a stage
  // ending at e must hold a decoder layer, so cuts fall between decoder layers
  // (after layer 1 at the earliest, before the head at the latest).
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(static_cast<size_t>(stages + 1), std::vector<double>(static_cast<size_t>(n + 1), inf));
  std::vector<std::vector<int64_t>> cut(static_cast<size_t>(stages + 1), std::vector<int64_t>(static_cast<size_t>(n + 1), -1));
  best[0][0] = 0.0;
  for (int64_t s = 1; s <= stages; ++s) {
    for (int64_t e = 2; e <= n; ++e) {
      if (s < stages && e >= n) continue;   // only the last stage ends with the head
      if (s == stages && e != n) continue;
      for (int64_t a = s == 1 ? 0 : 2; a < e; ++a) {
        if (best[static_cast<size_t>(s - 1)][static_cast<size_t>(a)] == inf) continue;
        const StageLayers candidate{a, e};
        if (candidate.decoder_count(spec) < 1) continue;
        const double worst = std::max(best[static_cast<size_t>(s - 1)][static_cast<size_t>(a)], weight(a, e));
        if (worst < best[static_cast<size_t>(s)][static_cast<size_t>(e)]) {
          best[static_cast<size_t>(s)][static_cast<size_t>(e)] = worst;
          cut[static_cast<size_t>(s)][static_cast<size_t>(e)] = a;
        }
      }
    }
  }
  TG_CHECK(best[static_cast<size_t>(stages)][static_cast<size_t>(n)] < inf, "internal: no split of {} layers into {} stages",
           n, stages);
  std::vector<StageLayers> result(static_cast<size_t>(stages));
  for (int64_t s = stages, e = n; s >= 1; --s) {
    const int64_t a = cut[static_cast<size_t>(s)][static_cast<size_t>(e)];
    result[static_cast<size_t>(s - 1)] = StageLayers{a, e};
    e = a;
  }
  return result;
}

}  // namespace tiergen::runtime
