#pragma once
// `tiergen generate`'s requests: a PromptRecord plus the job's flags -> what the engine
// runs (or the request's own error), and the engine's SequenceResults -> the sample
// that goes into the result line (stop strings cut, logprobs as OpenAI writes them).
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "tiergen/io/prompts.h"
#include "tiergen/io/results.h"
#include "tiergen/model/spec.h"
#include "tiergen/runtime/block_runner.h"
#include "tiergen/tokenizer/tokenizer.h"

namespace tiergen::cli {

// The job's defaults for every request field (the command line's flags).
struct RequestDefaults {
  int64_t max_tokens = 32;
  int64_t min_tokens = 0;
  double temperature = 0.0, top_p = 1.0, min_p = 0.0;
  int64_t top_k = 0;
  uint64_t seed = 0;
  int64_t n = 1;
  std::vector<std::string> stop;
  std::vector<int64_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  bool ignore_eos = false;
  double presence_penalty = 0.0, frequency_penalty = 0.0, repetition_penalty = 1.0;
  int64_t logprobs = -1;
  bool echo = false;
  bool truncate = false;
  int64_t max_model_len = 0;  // 0: the model's positions
};

// One prompt of a request, tokenized, and the text its samples start with under echo.
struct PreparedPrompt {
  std::vector<int64_t> ids;
  std::optional<std::string> echo_text;
};

struct PreparedRequest {
  // The request's prompts: one, or a prompt list's several. Each is sampled n times;
  // the result's choices are prompt i's sample j at i * n + j (vLLM's order).
  std::vector<PreparedPrompt> prompts;
  runtime::SamplingParams sampling;
  int64_t max_tokens = 0;
  int64_t n = 1;
  std::vector<std::string> stop;
  std::vector<int64_t> stop_token_ids;
  bool include_stop_str = false;     // the stop string that ended a sample stays in its text
  bool skip_special_tokens = true;   // special tokens are left out of the text
  bool ignore_eos = false;
  // OpenAI's echo: the text starts with the prompt, and with logprobs the prompt's
  // tokens are scored too. max_tokens 0 (echo only) scores without generating.
  bool echo = false;
  std::optional<std::string> error;  // set: the request fails on its own
};

// --prompt TEXT (repeatable): each one a request, read as the JSONL line
// {"prompt": TEXT} would be; errors name "--prompt:N", the N-th --prompt.
std::vector<io::PromptRecord> prompts_from_flags(const std::vector<std::string>& texts);

// `chat_prompt` is the rendered chat template for a chat request (else unused).
PreparedRequest prepare_request(const io::PromptRecord& p, const tokenizer::Tokenizer* tok, const model::Spec& spec,
                                const RequestDefaults& defaults, const std::optional<std::string>& chat_prompt);

// The engine request for choice `choice` (0..prompts x n - 1: prompt choice / n, its
// sample choice % n) of the request at `prompt_index`. Choice 0 samples from the
// request's own random stream, so one prompt with n = 1 is what it always was.
runtime::SequenceRequest sequence_request(const PreparedRequest& r, int64_t prompt_index, int64_t choice,
                                          const tokenizer::Tokenizer* tok);

// Choice `choice` for the result line; `chat` picks OpenAI's chat logprobs layout.
io::Completion make_completion(const runtime::SequenceResult& result, const PreparedRequest& r, int64_t choice,
                               const tokenizer::Tokenizer* tok, bool chat);

// The request's prompt tokens, over all its prompts.
int64_t total_prompt_tokens(const PreparedRequest& r);

// A content hash of the prompts as read (ids, texts, token ids, fields), for resume.
std::string prompts_hash(const std::vector<io::PromptRecord>& prompts);

}  // namespace tiergen::cli
