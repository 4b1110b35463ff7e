#pragma once
// Token sampling from float32 logits: greedy, temperature, top-k, top-p, the
// presence/frequency/repetition penalties, min_tokens and log-probabilities.
// Each sequence has its own random stream seeded by (seed, stream index), so a
// prompt's output does not depend on which batch or block it ran in.
//
// Where the work happens (see row_sampler.h): greedy rows and top-k rows are reduced
// on the compute device (argmax / topk) and only ids or a [k] slice reach the host;
// rows that need the whole distribution (penalties, logprobs, min_tokens, sampling
// without top-k) are copied to the host whole.
#include <cstdint>
#include <optional>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tiergen::runtime {

struct SamplingParams {
  // 0 means greedy. So does any temperature below kGreedyBelow (as in vLLM): dividing
  // logits by it would overflow float32 to infinities.
  static constexpr double kGreedyBelow = 1e-5;
  double temperature = 0.0;
  int64_t top_k = 0;         // 0 means off
  double top_p = 1.0;        // 1 means off
  double min_p = 0.0;        // 0 means off; else drops tokens less likely than min_p x the most likely (vLLM's)
  uint64_t seed = 0;
  int64_t min_tokens = 0;    // end-of-sequence and stop token ids are masked until this many tokens
  double presence_penalty = 0.0;    // subtracted once from a token already generated
  double frequency_penalty = 0.0;   // subtracted per occurrence in the generated tokens
  double repetition_penalty = 1.0;  // CTRL/HF style: divides positive, multiplies negative logits of
                                    // tokens seen in the prompt or the output; 1 is off
  int64_t logprobs = -1;     // -1: none; k >= 0: the chosen token's log-probability and the k most likely

  bool greedy() const { return temperature < kGreedyBelow; }
  bool penalized() const { return presence_penalty != 0 || frequency_penalty != 0 || repetition_penalty != 1.0; }
  void validate() const;  // throws tiergen::Error naming the bad field
};

// One generated token's log-probability, and the most likely alternatives (most likely
// first, ties by lower id), from the fp32 log-softmax of the model's logits row.
struct TokenLogprob {
  int64_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int64_t, float>> top;
};

// `token`'s log-probability under the fp32 log-softmax of one logits row (raw logits:
// no temperature or penalty), with the `top_k` most likely alternatives (0: none).
// Generated tokens and scored prompt tokens both come from here.
TokenLogprob token_logprob(const float* logits, int64_t vocab_size, int64_t token, int64_t top_k);

class SequenceSampler {
 public:
  SequenceSampler(const SamplingParams& params, uint64_t stream_index);

  // The prompt (for the repetition penalty) and the ids that min_tokens holds back
  // (end-of-sequence and stop token ids). Called once before the first token.
  void begin(const std::vector<int64_t>& prompt, std::vector<int64_t> held_back_ids);

  // Whether sample() must see the whole logits row; otherwise the row may be reduced
  // on the device to its argmax (greedy) or its top_k candidates.
  bool needs_full_row() const;

  // `logits` holds vocab_size values; returns the chosen token id and records it.
  int64_t sample(const float* logits, int64_t vocab_size);
  // From the row's `k` most likely candidates, sorted by logit (descending). Only valid
  // when !needs_full_row() and top_k > 0; gives what sample() would on the full row.
  int64_t sample_candidates(const float* values, const int64_t* ids, int64_t k);
  // Records a token chosen elsewhere (a greedy argmax on the device).
  void accept(int64_t token);

  // The row's logits held a NaN or an infinity (broken weights or numerics): no token
  // can be chosen from them, and the sequence fails (sample_rows notes it).
  void note_non_finite_logits() { non_finite_logits_ = true; }
  bool saw_non_finite_logits() const { return non_finite_logits_; }

  // Set after each sample() when params.logprobs >= 0.
  const std::optional<TokenLogprob>& last_logprob() const { return last_logprob_; }
  const SamplingParams& params() const { return params_; }

 private:
  int64_t choose(std::vector<std::pair<float, int64_t>>& candidates, bool sorted);
  void penalize(std::vector<float>& row) const;
  void record_logprob(const float* logits, int64_t vocab_size, int64_t token);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int64_t>> scratch_;
  std::vector<float> row_;
  std::unordered_map<int64_t, int64_t> generated_counts_;
  std::vector<int64_t> prompt_tokens_;  // sorted, unique
  std::vector<int64_t> held_back_;
  int64_t generated_ = 0;
  std::optional<TokenLogprob> last_logprob_;
  bool non_finite_logits_ = false;
};

}  // namespace tiergen::runtime
