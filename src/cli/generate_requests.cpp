#include "src/cli/generate_requests.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "src/cli/job_identity.h"
#include "tiergen/common/error.h"

namespace tiergen::cli {

namespace {

// Advice that can work: --truncate only when some prompt would remain, and the
// largest max_tokens that fits.
std::string too_long_message(int64_t prompt_len, int64_t max_new, int64_t context, bool capped) {
  const std::string what = capped ? fmt::format("--max-model-len {}", context)
                                  : fmt::format("the model's {} positions", context);
  if (max_new >= context) {
    return fmt::format("max_tokens {} leaves no room for the prompt within {}; ask for fewer than {} tokens "
                       "(-n or \"max_tokens\")", max_new, what, context);
  }
  std::string advice = fmt::format("use --truncate to keep the last {} prompt tokens", context - max_new);
  if (prompt_len < context) advice += fmt::format(", or ask for at most {} tokens", context - prompt_len);
  return fmt::format("prompt of {} tokens plus {} new tokens exceeds {} ({})", prompt_len, max_new, what, advice);
}

template <typename T>
T pick(const std::optional<T>& request, const T& job) {
  return request ? *request : job;
}

std::string token_text(const tokenizer::Tokenizer* tok, int64_t id) {
  return tok ? tok->decode({id}, /*skip_special_tokens=*/false) : fmt::format("token_id:{}", id);
}

// OpenAI's "bytes": the token's UTF-8 bytes as numbers 0-255.
std::vector<int> utf8_bytes(const std::string& s) {
  std::vector<int> out;
  out.reserve(s.size());
  for (const unsigned char c : s) out.push_back(c);
  return out;
}

// OpenAI's completions logprobs object. With `echo`, the prompt's tokens come first:
// the first with null entries (nothing precedes it), the others as scored.
nlohmann::ordered_json completion_logprobs(const runtime::SequenceResult& result, const tokenizer::Tokenizer* tok,
                                           const std::vector<int64_t>* echo) {
  nlohmann::ordered_json tokens = nlohmann::ordered_json::array(), token_logprobs = tokens, top = tokens,
                         offsets = tokens;
  int64_t offset = 0;
  const auto add = [&](int64_t id, const runtime::TokenLogprob* lp) {
    const std::string text = token_text(tok, id);
    tokens.push_back(text);
    offsets.push_back(offset);
    offset += io::count_characters(text);  // characters, as vLLM counts them
    if (!lp) {
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
      return;
    }
    token_logprobs.push_back(lp->logprob);
    nlohmann::ordered_json alternatives = nlohmann::ordered_json::object();
    for (const auto& [alternative, logprob] : lp->top) alternatives[token_text(tok, alternative)] = logprob;
    top.push_back(std::move(alternatives));
  };
  if (echo && !echo->empty()) {
    TG_CHECK(result.prompt_logprobs.size() + 1 == echo->size(), "internal: {} prompt log-probabilities for {} tokens",
             result.prompt_logprobs.size(), echo->size());
    add(echo->front(), nullptr);
    for (const auto& lp : result.prompt_logprobs) add(lp.token, &lp);
  }
  for (const auto& lp : result.logprobs) add(lp.token, &lp);
  return {{"text_offset", offsets}, {"token_logprobs", token_logprobs}, {"tokens", tokens}, {"top_logprobs", top}};
}

nlohmann::ordered_json chat_logprobs(const runtime::SequenceResult& result, const tokenizer::Tokenizer* tok) {
  nlohmann::ordered_json content = nlohmann::ordered_json::array();
  for (const auto& lp : result.logprobs) {
    nlohmann::ordered_json alternatives = nlohmann::ordered_json::array();
    for (const auto& [id, logprob] : lp.top) {
      const std::string t = token_text(tok, id);
      alternatives.push_back({{"token", t}, {"logprob", logprob}, {"bytes", utf8_bytes(t)}});
    }
    const std::string t = token_text(tok, lp.token);
    content.push_back({{"token", t}, {"logprob", lp.logprob}, {"bytes", utf8_bytes(t)}, {"top_logprobs", alternatives}});
  }
  return {{"content", content}};
}

// The most choices (prompts x n) one request may ask for.
constexpr int64_t kMaxChoices = 4096;

// One prompt of request `r` (its echo and max_tokens already read): tokenized, checked
// against the vocabulary and the context, truncated where the job allows. A text the
// tokenizer cannot encode (a character outside a vocabulary without an unknown token,
// a pre-tokenizer pattern's match limit) fails this request only: `error` says why.
PreparedPrompt prepare_prompt(const std::optional<std::string>& text, const std::vector<int64_t>& token_ids, bool chat, const tokenizer::Tokenizer* tok,
                              const model::Spec& spec, const RequestDefaults& d, const PreparedRequest& r,
                              std::string& error) {
  PreparedPrompt out;
  const bool capped = d.max_model_len > 0 && d.max_model_len < spec.max_positions;
  const int64_t context = capped ? d.max_model_len : spec.max_positions;
  const int64_t room = context - std::max<int64_t>(1, r.max_tokens);  // scoring still samples one
  int64_t prompt_len = static_cast<int64_t>(token_ids.size());
  try {
    // A chat template writes BOS itself. Text prompts without a tokenizer were refused
    // before the results file opened. Only the ids that can be kept are held: a text
    // of millions of tokens is counted, not stored, beyond its last `room + 1`.
    if (text) {
      tokenizer::TokenTail tail =
          tok->encode_tail(*text, /*add_special_tokens=*/!chat, static_cast<std::size_t>(std::max<int64_t>(room, 0) + 1));
      out.ids = std::move(tail.ids);
      prompt_len = tail.total;
    } else {
      out.ids = token_ids;
    }
  } catch (const Error& e) {
    error = fmt::format("the tokenizer cannot encode the prompt: {}", e.what());
    return out;
  }
  if (prompt_len == 0) {
    error = "the prompt has no tokens";
    return out;
  }
  // Token ids given in the request are all checked, also those a truncation drops.
  const auto outside_vocabulary = [&](const std::vector<int64_t>& ids) {
    for (int64_t id : ids) {
      if (id < 0 || id >= spec.vocab_size) {
        error = fmt::format("token id {} is outside the model's vocabulary of {}", id, spec.vocab_size);
        return true;
      }
    }
    return false;
  };
  if (!text && outside_vocabulary(token_ids)) return out;
  if (prompt_len > room) {
    if (!d.truncate || room <= 0) {
      error = too_long_message(prompt_len, r.max_tokens, context, capped);
      return out;
    }
    out.ids.erase(out.ids.begin(), out.ids.end() - room);  // keep the most recent tokens
  }
  if (text && outside_vocabulary(out.ids)) return out;  // a tokenizer larger than the model
  if (prompt_len > room) {
    if (r.echo && tok && !chat) out.echo_text = tok->decode(out.ids, r.skip_special_tokens);  // what was scored
  } else if (r.echo && !chat) {
    out.echo_text = text ? *text
                         : tok ? std::optional(tok->decode(out.ids, r.skip_special_tokens)) : std::nullopt;
  }
  return out;
}

}  // namespace

std::vector<io::PromptRecord> prompts_from_flags(const std::vector<std::string>& texts) {
  std::string jsonl;
  for (size_t i = 0; i < texts.size(); ++i) {
    size_t bad = 0;
    TG_CHECK(io::valid_utf8(texts[i], &bad), "--prompt:{}: not valid UTF-8 (byte {})", i + 1, bad + 1);
    jsonl += nlohmann::json{{"prompt", texts[i]}}.dump() + "\n";
  }
  std::istringstream in(jsonl);
  return io::read_prompts(in, "--prompt", io::PromptFormat::Jsonl);
}

PreparedRequest prepare_request(const io::PromptRecord& p, const tokenizer::Tokenizer* tok, const model::Spec& spec,
                                const RequestDefaults& d, const std::optional<std::string>& chat_prompt) {
  PreparedRequest r;
  const auto& o = p.overrides;
  auto fail = [&](std::string message) {
    r.error = std::move(message);
    return r;
  };
  if (p.error) return fail(*p.error);
  r.echo = pick(o.echo, d.echo);
  r.max_tokens = pick(o.max_tokens, d.max_tokens);
  if (r.max_tokens == 0 && !r.echo) {
    return fail("max_tokens 0 generates nothing; it is only for scoring a prompt with \"echo\": true (--echo)");
  }
  r.n = pick(o.n, d.n);
  if (p.best_of && *p.best_of != r.n) {
    return fail(fmt::format("\"best_of\" {} is not supported: only best_of equal to n ({}), which returns every "
                            "sample", *p.best_of, r.n));
  }
  r.stop = pick(o.stop, d.stop);
  r.stop_token_ids = pick(o.stop_token_ids, d.stop_token_ids);
  r.include_stop_str = pick(o.include_stop_str_in_output, d.include_stop_str_in_output);
  r.skip_special_tokens = pick(o.skip_special_tokens, d.skip_special_tokens);
  r.ignore_eos = pick(o.ignore_eos, d.ignore_eos);
  runtime::SamplingParams& s = r.sampling;
  s.temperature = pick(o.temperature, d.temperature);
  s.top_k = pick(o.top_k, d.top_k);
  s.top_p = pick(o.top_p, d.top_p);
  s.min_p = pick(o.min_p, d.min_p);
  s.seed = o.seed ? static_cast<uint64_t>(*o.seed) : d.seed;
  s.min_tokens = pick(o.min_tokens, d.min_tokens);
  s.presence_penalty = pick(o.presence_penalty, d.presence_penalty);
  s.frequency_penalty = pick(o.frequency_penalty, d.frequency_penalty);
  s.repetition_penalty = pick(o.repetition_penalty, d.repetition_penalty);
  s.logprobs = pick(o.logprobs, d.logprobs);
  try {
    s.validate();
  } catch (const Error& e) {
    return fail(e.what());
  }
  if (s.min_tokens > r.max_tokens) {
    return fail(fmt::format("min_tokens {} is more than max_tokens {}", s.min_tokens, r.max_tokens));
  }
  if (!r.stop.empty() && !tok) return fail("\"stop\" strings need a tokenizer to match decoded text (pass --tokenizer)");
  for (int64_t id : r.stop_token_ids) {
    if (id >= spec.vocab_size) return fail(fmt::format("stop token id {} is outside the vocabulary of {}", id, spec.vocab_size));
  }
  if (p.messages) {
    if (!chat_prompt) return fail("internal: chat request without a rendered prompt");
    std::string error;
    r.prompts.push_back(prepare_prompt(chat_prompt, {}, /*chat=*/true, tok, spec, d, r, error));
    if (!error.empty()) return fail(error);
    return r;
  }
  const int64_t parts = 1 + static_cast<int64_t>(p.more_prompts.size());
  if (parts * r.n > kMaxChoices) {
    return fail(fmt::format("{} prompts x n {} asks for {} completions; one request gets at most {}", parts, r.n,
                            parts * r.n, kMaxChoices));
  }
  for (int64_t i = 0; i < parts; ++i) {
    const bool first = i == 0;
    const io::PromptPart* more = first ? nullptr : &p.more_prompts[static_cast<size_t>(i - 1)];
    std::string error;
    r.prompts.push_back(prepare_prompt(first ? p.text : more->text, first ? p.token_ids : more->token_ids,
                                       /*chat=*/false, tok, spec, d, r, error));
    if (!error.empty()) return fail(parts == 1 ? error : fmt::format("prompt[{}]: {}", i, error));
  }
  return r;
}

runtime::SequenceRequest sequence_request(const PreparedRequest& r, int64_t prompt_index, int64_t choice,
                                          const tokenizer::Tokenizer* tok) {
  runtime::SequenceRequest q;
  // Choice 0 keeps the request's own stream; the others get streams far from any
  // request's (a request's index is below 2^40, its choices at most 4096).
  q.index = prompt_index + (choice << 40);
  q.prompt = r.prompts[static_cast<size_t>(choice / r.n)].ids;
  // Scoring only (max_tokens 0): the engine's prefill samples one token, which is dropped.
  q.max_new_tokens = std::max<int64_t>(1, r.max_tokens);
  q.sampling = r.sampling;
  if (r.echo && r.sampling.logprobs >= 0) q.prompt_logprobs = r.sampling.logprobs;
  q.ignore_eos = r.ignore_eos;
  q.stop_token_ids = r.stop_token_ids;
  if (!r.stop.empty() && tok) {
    const auto stop = r.stop;
    const bool skip = r.skip_special_tokens;  // matched on the text the sample will show
    q.should_stop = [tok, stop, skip](const std::vector<int64_t>& tokens) {
      const std::string text = tok->decode(tokens, skip);
      return std::any_of(stop.begin(), stop.end(), [&](const std::string& s) { return text.find(s) != std::string::npos; });
    };
  }
  return q;
}

io::Completion make_completion(const runtime::SequenceResult& engine_result, const PreparedRequest& r, int64_t choice,
                               const tokenizer::Tokenizer* tok, bool chat) {
  const PreparedPrompt& prompt = r.prompts[static_cast<size_t>(choice / r.n)];
  runtime::SequenceResult result = engine_result;
  if (r.max_tokens == 0) {  // scoring only: the one token the engine had to sample is not an output
    result.tokens.clear();
    result.logprobs.clear();
    result.stop_token.reset();
    result.finish_reason = "length";
  }
  io::Completion c;
  c.token_ids = result.tokens;
  c.finish_reason = result.finish_reason;
  if (result.stop_token) c.stop_reason = *result.stop_token;
  if (tok) {
    std::vector<int64_t> shown = result.tokens;
    if (result.stop_token && !shown.empty()) shown.pop_back();  // a stop token is not part of the text
    std::string text = tok->decode(shown, r.skip_special_tokens);
    // The earliest stop string ends the text, and is not part of it unless the request
    // asks for it (include_stop_str_in_output).
    size_t cut = std::string::npos;
    const std::string* which = nullptr;
    for (const auto& s : r.stop) {
      const size_t at = text.find(s);
      if (at < cut) {
        cut = at;
        which = &s;
      }
    }
    if (which) {
      text.resize(r.include_stop_str ? cut + which->size() : cut);
      c.finish_reason = "stop";
      c.stop_reason = *which;
    }
    c.text = prompt.echo_text ? *prompt.echo_text + text : std::move(text);
  }
  if (r.sampling.logprobs >= 0) {
    c.logprobs = chat ? chat_logprobs(result, tok) : completion_logprobs(result, tok, r.echo ? &prompt.ids : nullptr);
  }
  return c;
}

int64_t total_prompt_tokens(const PreparedRequest& r) {
  int64_t total = 0;
  for (const auto& prompt : r.prompts) total += static_cast<int64_t>(prompt.ids.size());
  return total;
}

std::string prompts_hash(const std::vector<io::PromptRecord>& prompts) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& p : prompts) {
    nlohmann::ordered_json j;
    j["id"] = p.id;
    if (p.text) j["text"] = *p.text;
    j["token_ids"] = p.token_ids;
    for (const auto& more : p.more_prompts) {  // a prompt list; absent for one prompt
      j["more_prompts"].push_back(more.text ? nlohmann::ordered_json(*more.text) : nlohmann::ordered_json(more.token_ids));
    }
    if (p.messages) {
      for (const auto& m : *p.messages) j["messages"].push_back({m.role, m.content});
    }
    // Each override by name, absent ones left out: no value stands for "not given".
    const auto& o = p.overrides;
    nlohmann::ordered_json overrides = nlohmann::ordered_json::object();
    const auto put = [&](const char* key, const auto& value) {
      if (value) overrides[key] = *value;
    };
    put("temperature", o.temperature);
    put("top_p", o.top_p);
    put("top_k", o.top_k);
    put("min_p", o.min_p);
    put("include_stop_str_in_output", o.include_stop_str_in_output);
    put("skip_special_tokens", o.skip_special_tokens);
    put("seed", o.seed);
    put("max_tokens", o.max_tokens);
    put("min_tokens", o.min_tokens);
    put("n", o.n);
    put("logprobs", o.logprobs);
    put("presence_penalty", o.presence_penalty);
    put("frequency_penalty", o.frequency_penalty);
    put("repetition_penalty", o.repetition_penalty);
    put("ignore_eos", o.ignore_eos);
    put("echo", o.echo);
    j["o"] = std::move(overrides);
    if (o.stop) j["stop"] = *o.stop;
    if (o.stop_token_ids) j["stop_token_ids"] = *o.stop_token_ids;
    h = fnv1a64(j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n", h);
  }
  return fmt::format("fnv1a64:{:016x}", h);
}

}  // namespace tiergen::cli
