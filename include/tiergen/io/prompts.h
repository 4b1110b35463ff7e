#pragma once
// Prompt files for `tiergen generate --prompts FILE`: the first step of a prompt's
// way to its result line. Every accepted format becomes a list of PromptRecord in
// file order; the tokenizer and the engine never see the file format.
//
// Formats
//   Text  (.txt): one prompt per line, taken verbatim (a trailing '\r' is dropped, so
//         CRLF files work). Blank lines (empty or only spaces/tabs) are skipped, and
//         the line numbers of the other prompts still refer to the file. A prompt
//         cannot span lines; use JSONL for that. A text prompt must be valid UTF-8:
//         an invalid byte is an error naming the line and the byte's column.
//   Jsonl (.jsonl, .json): one JSON object per line, blank lines skipped. The kind of
//         object is decided per line, so kinds may be mixed:
//           {"prompt": "text", ...}                      text prompt
//           {"prompt_token_ids": [1, 2, ...], ...}      pre-tokenized prompt
//           {"custom_id": "a", "method": "POST", "url": "/v1/completions",
//            "body": {"model": ..., "prompt": "text", "max_tokens": 16, ...}}
//                                                       an OpenAI batch request
//         "prompt" may also be an array of token ids, or a prompt list (several
//         strings, or several arrays of token ids): several prompts of one request, as
//         vLLM and OpenAI take them; each is sampled n times and the result holds their
//         choices in order, prompt i's sample j at index i * n + j. Optional per-request fields (at
//         the top level, or in "body" for OpenAI requests): "id", "model", "max_tokens",
//         "min_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "n", "stop" (a
//         string or a list), "stop_token_ids", "include_stop_str_in_output", "ignore_eos",
//         "presence_penalty", "frequency_penalty", "repetition_penalty", "logprobs",
//         "echo", "skip_special_tokens", "user", "stream" (false only); null means "the
//         job's default". Fields OpenAI clients send whose value here changes nothing
//         are accepted with that value only: "best_of" equal to n, "suffix" null,
//         "stream_options", "logit_bias" {}, "response_format" {"type": "text"}. Chat
//         requests ("/v1/chat/completions" with "messages" [{"role", "content"}], the
//         content a string or a list of text parts, joined with newlines) are read too;
//         whether they can be rendered depends on the model's chat template (src/chat/).
//   Errors: a line that is not JSON stops the whole read (it is the wrong format, not a
//         bad request). A JSON object whose fields are wrong or unknown becomes a
//         PromptRecord with `error` set: that request fails on its own, the job goes on.
//   Auto: by extension; any other extension (and stdin, "-") is sniffed: JSONL when
//         the first non-blank line starts with '{', else text.
//
// A UTF-8 byte-order mark at the start of the file is skipped. Every error is a
// tiergen::Error whose message starts "FILE:LINE: ".
#include <cstddef>
#include <cstdint>
#include <istream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tiergen::io {

// Per-prompt sampling settings that override the command line's; unset = use the job's.
struct SamplingOverrides {
  std::optional<double> temperature, top_p, min_p, presence_penalty, frequency_penalty, repetition_penalty;
  std::optional<int64_t> top_k, seed, max_tokens, min_tokens, n, logprobs;
  std::optional<bool> ignore_eos, echo, include_stop_str_in_output, skip_special_tokens;
  std::optional<std::vector<std::string>> stop;
  std::optional<std::vector<int64_t>> stop_token_ids;
};

struct ChatMessage {
  std::string role, content;
};

// One prompt of a prompt list: text, or token ids.
struct PromptPart {
  std::optional<std::string> text;
  std::vector<int64_t> token_ids;
};

struct PromptRecord {
  int64_t index = 0;  // 0-based position among prompts (blank lines do not count)
  int64_t line = 0;   // 1-based line in the file, for error messages downstream
  // "id" from the line, else the OpenAI "custom_id", else the index as a string.
  std::string id;
  std::optional<std::string> text;  // set when the prompt was given as text
  std::vector<int64_t> token_ids;   // set when the prompt was given as token ids
  // A prompt list's prompts after the first (the first is text/token_ids above): one
  // request, its choices in prompt order. Empty for a single prompt.
  std::vector<PromptPart> more_prompts;
  std::optional<std::vector<ChatMessage>> messages;  // a chat request
  SamplingOverrides overrides;
  bool openai = false;       // the line was an OpenAI batch request
  std::optional<std::string> custom_id;  // OpenAI "custom_id" (echoed in OpenAI output)
  std::string model;         // "model" of the request, if any (reported back in OpenAI output)
  std::optional<int64_t> best_of;  // OpenAI's "best_of": accepted where it equals n (changes nothing)
  std::optional<std::string> error;  // this request is malformed; it gets an error result
};

enum class PromptFormat { Auto, Text, Jsonl };

struct ReadOptions {
  // Longest accepted line in bytes. Lines are read without a fixed buffer; the cap
  // only stops a file with no newlines (a binary, a wrong path) from eating memory.
  size_t max_line_bytes = size_t{64} << 20;
};

// "auto", "text"/"txt", "jsonl"/"json" (case-insensitive) -> format; else tiergen::Error.
PromptFormat parse_prompt_format(const std::string& name);
std::string prompt_format_name(PromptFormat format);

// Format implied by a path's extension; Auto when the extension says nothing.
PromptFormat format_from_extension(const std::string& path);

// True when `bytes` is well-formed UTF-8 (no overlongs, surrogates or code points past
// U+10FFFF). On failure `*bad_offset` (when given) is the offset of the first byte of
// the first bad sequence.
bool valid_utf8(std::string_view bytes, size_t* bad_offset = nullptr);
// Characters (code points) in `bytes` as Python counts them after decoding with
// replacement: each invalid part (a stray byte, a cut-off sequence) is one U+FFFD.
int64_t count_characters(std::string_view bytes);

// Reads every prompt of `path` ("-" means stdin). Throws tiergen::Error naming the file
// and line for malformed input, and "FILE: no prompts" when there are none.
std::vector<PromptRecord> read_prompts(const std::string& path, PromptFormat format = PromptFormat::Auto,
                                       const ReadOptions& options = {});

// Same, from an open stream; `name` is used in messages and for Auto detection.
std::vector<PromptRecord> read_prompts(std::istream& in, const std::string& name,
                                       PromptFormat format = PromptFormat::Auto,
                                       const ReadOptions& options = {});

// The ids in prompt order, as ResultWriter::open wants them for resume checks.
std::vector<std::string> prompt_ids(const std::vector<PromptRecord>& prompts);

}  // namespace tiergen::io
