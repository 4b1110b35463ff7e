#include "tiergen/runtime/prompt_scoring.h"

#include <algorithm>

#include "tiergen/common/error.h"
#include "tiergen/model/forward.h"
#include "tiergen/runtime/device.h"

namespace tiergen::runtime {

namespace {
// Positions per logits chunk: 256 x a 128k vocabulary is 128 MiB of fp32.
constexpr int64_t kChunkPositions = 256;
}  // namespace

std::vector<TokenLogprob> score_prompt(const model::Spec& spec, const model::LayerWeights& head,
                                       const at::Tensor& hidden, const std::vector<int64_t>& prompt, int64_t top_k) {
  const auto length = static_cast<int64_t>(prompt.size());
  TG_CHECK(hidden.dim() == 2 && hidden.size(0) == length, "internal: scoring a {}-token prompt from {} positions",
           length, hidden.dim() == 2 ? hidden.size(0) : -1);
  std::vector<TokenLogprob> scores;
  scores.reserve(static_cast<size_t>(std::max<int64_t>(0, length - 1)));
  // The last position predicts the first generated token, not a prompt token.
  for (int64_t start = 0; start < length - 1; start += kChunkPositions) {
    const int64_t n = std::min(kChunkPositions, length - 1 - start);
    const at::Tensor logits = copy_to_host_now(model::position_logits(spec, head, hidden.narrow(0, start, n))).contiguous();
    const int64_t vocab = logits.size(1);
    const float* rows = logits.data_ptr<float>();
    for (int64_t t = 0; t < n; ++t) {
      scores.push_back(token_logprob(rows + t * vocab, vocab, prompt[static_cast<size_t>(start + t + 1)], top_k));
    }
  }
  return scores;
}

}  // namespace tiergen::runtime
