#pragma once
// Token sampling on the host from float32 logits: greedy, temperature, top-k, top-p.
// Each sequence has its own random stream seeded by (seed, prompt index), so a
// prompt's output does not depend on which batch or block it ran in.
#include <cstdint>
#include <random>
#include <vector>

namespace tiergen::runtime {

struct SamplingParams {
  double temperature = 0.0;  // 0 means greedy
  int64_t top_k = 0;         // 0 means off
  double top_p = 1.0;        // 1 means off
  uint64_t seed = 0;

  bool greedy() const { return temperature <= 0.0; }
  void validate() const;  // throws tiergen::Error naming the bad field
};

class SequenceSampler {
 public:
  SequenceSampler(const SamplingParams& params, uint64_t stream_index);
  // `logits` holds vocab_size values; returns the chosen token id.
  int64_t sample(const float* logits, int64_t vocab_size);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int64_t>> scratch_;
};

}  // namespace tiergen::runtime
