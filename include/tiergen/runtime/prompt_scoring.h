#pragma once
// Scoring a prompt: the log-probability of each of its tokens given the ones before
// it (OpenAI's `echo` with `logprobs`, perplexity), from the last layer's hidden states
// at every prompt position. The logits go through the same fp32 log-softmax as the
// generated tokens' log-probabilities (token_logprob), a chunk of positions at a time
// so that a long prompt never holds [length, vocab] logits at once.
#include <ATen/ATen.h>

#include <vector>

#include "tiergen/model/layer_weights.h"
#include "tiergen/model/spec.h"
#include "tiergen/runtime/sampler.h"

namespace tiergen::runtime {

// `hidden`: [length, h] last-layer hidden states of the prompt's positions (padding
// excluded); `prompt`: its `length` token ids. Returns length - 1 entries: entry t is
// prompt[t + 1] given prompt[0..t], with its `top_k` most likely alternatives.
std::vector<TokenLogprob> score_prompt(const model::Spec& spec, const model::LayerWeights& head,
                                       const at::Tensor& hidden, const std::vector<int64_t>& prompt, int64_t top_k);

}  // namespace tiergen::runtime
