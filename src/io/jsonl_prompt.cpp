#include "src/io/jsonl_prompt.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "tiergen/common/error.h"
#include "tiergen/common/json_describe.h"
#include "tiergen/common/strict_json.h"

namespace tiergen::io {

using nlohmann::json;

namespace {

// Where we are, for messages: every error names file and line.
struct Where {
  const std::string& name;
  int64_t line;
  std::string at() const { return fmt::format("{}:{}", name, line); }
};

// nlohmann's messages say "[json.exception.parse_error.101] parse error at line 1,
// column 7: ..."; inside one JSONL line only the column is news.
std::string parse_error_message(const json::parse_error& e) {
  std::string msg = e.what();
  if (auto p = msg.find("] "); p != std::string::npos && msg.rfind("[json.exception", 0) == 0) {
    msg.erase(0, p + 2);
  }
  static const std::string kLineOne = "at line 1, ";
  if (auto p = msg.find(kLineOne); p != std::string::npos) msg.replace(p, kLineOne.size(), "at ");
  // "last read: '...'" quotes the whole token, which for a 10 MB prompt is 10 MB.
  constexpr size_t kHead = 240, kTail = 120;
  if (msg.size() > kHead + kTail + 16) {
    msg = msg.substr(0, kHead) + " [...] " + msg.substr(msg.size() - kTail);
  }
  return msg;
}

bool is_integral(const json& v) {
  if (v.is_number_integer()) {
    return !v.is_number_unsigned() ||
           v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  }
  // Some serializers write 16.0 for 16; accept integral floats in range.
  if (v.is_number_float()) {
    const double d = v.get<double>();
    return std::isfinite(d) && std::trunc(d) == d && std::fabs(d) < 9.0e18;
  }
  return false;
}

int64_t as_int64(const json& v) {
  if (v.is_number_float()) return static_cast<int64_t>(v.get<double>());
  if (v.is_number_unsigned()) return static_cast<int64_t>(v.get<uint64_t>());
  return v.get<int64_t>();
}

int64_t get_integer(const json& v, const char* key, const Where& w) {
  TG_CHECK(!v.is_number_unsigned() || is_integral(v), "{}: \"{}\" is out of range: at most 2^63-1 "
           "(9223372036854775807), got {}", w.at(), key, describe_json_value(v));
  TG_CHECK(is_integral(v), "{}: \"{}\" must be an integer, got {}", w.at(), key, describe_json_value(v));
  return as_int64(v);
}

double get_number(const json& v, const char* key, const Where& w) {
  TG_CHECK(v.is_number(), "{}: \"{}\" must be a number, got {}", w.at(), key, describe_json_value(v));
  return v.get<double>();
}

std::vector<int64_t> get_token_ids(const json& v, const char* key, const Where& w) {
  TG_CHECK(v.is_array(), "{}: \"{}\" must be an array of token ids", w.at(), key);
  TG_CHECK(!v.empty(), "{}: \"{}\" is empty", w.at(), key);
  std::vector<int64_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const json& t = v[i];
    TG_CHECK(is_integral(t) && as_int64(t) >= 0,
             "{}: \"{}\" must hold non-negative integers; element {} is {}", w.at(), key, i, describe_json_value(t));
    ids.push_back(as_int64(t));
  }
  return ids;
}

// The prompts one request may list: each one is prefilled and sampled n times.
constexpr size_t kMaxPromptList = 4096;

// One prompt: a non-empty string, or token ids (as OpenAI's completions API allows).
// `key` names it in errors: "prompt", or "prompt[i]" in a list.
PromptPart read_one_prompt(const json& v, const std::string& key, const Where& w) {
  PromptPart part;
  if (v.is_string()) {
    part.text = v.get<std::string>();
    TG_CHECK(!part.text->empty(), "{}: \"{}\" is empty", w.at(), key);
  } else if (v.is_array()) {
    part.token_ids = get_token_ids(v, key.c_str(), w);
  } else {
    TG_THROW("{}: \"{}\" must be a string or an array of token ids, not {}", w.at(), key, describe_json_value(v));
  }
  return part;
}

// "prompt": one prompt, or a prompt list (strings, or arrays of token ids): several
// prompts of one request, as vLLM and OpenAI read it.
void read_prompt_value(const json& v, PromptRecord& record, const Where& w) {
  const bool list = v.is_array() && !v.empty() && (v[0].is_string() || v[0].is_array());
  if (!list) {
    TG_CHECK(v.is_string() || v.is_array(), "{}: \"prompt\" must be a string, a list of strings, an array of token "
             "ids or a list of them, not {}", w.at(), describe_json_value(v));
    PromptPart part = read_one_prompt(v, "prompt", w);
    record.text = std::move(part.text);
    record.token_ids = std::move(part.token_ids);
    return;
  }
  TG_CHECK(v.size() <= kMaxPromptList, "{}: \"prompt\" lists {} prompts; one request takes at most {}", w.at(),
           v.size(), kMaxPromptList);
  for (size_t i = 0; i < v.size(); ++i) {
    TG_CHECK(!(v[i].is_string() || v[i].is_array()) || v[i].is_string() == v[0].is_string(),
             "{}: \"prompt\" mixes strings and token id arrays (\"prompt[{}]\")", w.at(), i);
    PromptPart part = read_one_prompt(v[i], fmt::format("prompt[{}]", i), w);
    if (i == 0) {
      record.text = std::move(part.text);
      record.token_ids = std::move(part.token_ids);
    } else {
      record.more_prompts.push_back(std::move(part));
    }
  }
}

std::string get_id(const json& v, const char* key, const Where& w) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return v.dump();
  TG_THROW("{}: \"{}\" must be a string or an integer", w.at(), key);
}

bool get_bool(const json& v, const char* key, const Where& w) {
  TG_CHECK(v.is_boolean(), "{}: \"{}\" must be true or false, got {}", w.at(), key, describe_json_value(v));
  return v.get<bool>();
}

double get_ranged(const json& v, const char* key, double lo, double hi, const Where& w) {
  const double x = get_number(v, key, w);
  TG_CHECK(x >= lo && x <= hi, "{}: \"{}\" must be in [{}, {}], got {}", w.at(), key, lo, hi, x);
  return x;
}

std::vector<std::string> get_stop(const json& v, const Where& w) {
  std::vector<std::string> stop;
  if (v.is_string()) {
    stop.push_back(v.get<std::string>());
  } else {
    TG_CHECK(v.is_array(), "{}: \"stop\" must be a string or a list of strings", w.at());
    for (const json& s : v) {
      TG_CHECK(s.is_string(), "{}: \"stop\" must be a string or a list of strings, holds {}", w.at(),
               describe_json_value(s));
      stop.push_back(s.get<std::string>());
    }
  }
  for (const auto& s : stop) TG_CHECK(!s.empty(), "{}: \"stop\" holds an empty string", w.at());
  return stop;
}

// A message's content: a string, or OpenAI's list of content parts, of which only text
// parts can be given to a text model; they are joined with newlines, as vLLM joins them.
std::string get_content(const json& content, size_t i, const Where& w) {
  if (content.is_string()) return content.get<std::string>();
  TG_CHECK(content.is_array() && !content.empty(),
           "{}: \"messages\" element {}: \"content\" must be a string or a list of text parts", w.at(), i);
  std::string text;
  for (size_t k = 0; k < content.size(); ++k) {
    const json& part = content[k];
    const json type = part.is_object() ? part.value("type", json()) : json();
    TG_CHECK(!type.is_string() || type == "text",
             "{}: \"messages\" element {}: content part {} is of type {}; a text model takes \"text\" parts only",
             w.at(), i, k, type.dump());
    TG_CHECK(type == "text" && part.contains("text") && part["text"].is_string(),
             "{}: \"messages\" element {}: content part {} must be {{\"type\": \"text\", \"text\": string}}",
             w.at(), i, k);
    text += (k ? "\n" : "") + part["text"].get<std::string>();
  }
  return text;
}

std::vector<ChatMessage> get_messages(const json& v, const Where& w) {
  TG_CHECK(v.is_array() && !v.empty(), "{}: \"messages\" must be a non-empty list", w.at());
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& m = v[i];
    TG_CHECK(m.is_object() && m.contains("role") && m["role"].is_string() && m.contains("content"),
             "{}: \"messages\" element {} must be {{\"role\": string, \"content\": string or text parts}}", w.at(),
             i);
    messages.push_back({m["role"].get<std::string>(), get_content(m["content"], i, w)});
  }
  return messages;
}

// Fields OpenAI clients send whose value changes nothing here are accepted with that
// value; any other value would ask for something this engine does not do, and fails the
// request by name rather than being ignored.
void read_no_op_field(const std::string& key, const json& v, PromptRecord& record, const Where& w) {
  if (key == "best_of") {
    TG_CHECK(is_integral(v) && as_int64(v) >= 1, "{}: \"best_of\" must be a positive integer", w.at());
    record.best_of = as_int64(v);  // checked against the request's n with the job's defaults
  } else if (key == "suffix") {
    TG_THROW("{}: \"suffix\" is not supported (null or absent only): this engine does not insert text", w.at());
  } else if (key == "stream_options") {
    TG_CHECK(v.is_object(), "{}: \"stream_options\" must be an object or null", w.at());  // only read when streaming
  } else if (key == "logit_bias") {
    TG_CHECK(v.is_object() && v.empty(), "{}: \"logit_bias\" is not supported ({{}} or null only)", w.at());
  } else if (key == "response_format") {
    TG_CHECK(v.is_object() && v.size() == 1 && v.contains("type") && v["type"] == "text",
             "{}: \"response_format\" {} is not supported: only {{\"type\": \"text\"}} (no constrained decoding)",
             w.at(), v.dump());
  }
}

constexpr const char* kNoOpFields[] = {"best_of", "suffix", "stream_options", "logit_bias", "response_format"};

// Request fields shared by every kind of line; returns false for a key it does not know.
bool read_common_field(const std::string& key, const json& v, PromptRecord& record, const Where& w) {
  auto& o = record.overrides;
  static const char* const kKnown[] = {
      "id", "model", "max_tokens", "max_completion_tokens", "min_tokens", "temperature", "top_p", "top_k", "min_p",
      "seed", "n", "stop", "stop_token_ids", "include_stop_str_in_output", "ignore_eos", "presence_penalty",
      "frequency_penalty", "repetition_penalty", "logprobs", "top_logprobs", "echo", "skip_special_tokens", "user",
      "stream"};
  const bool no_op = std::find(std::begin(kNoOpFields), std::end(kNoOpFields), key) != std::end(kNoOpFields);
  if (v.is_null()) {
    // OpenAI clients send "temperature": null for "the default"; treat as absent.
    return no_op || std::find(std::begin(kKnown), std::end(kKnown), key) != std::end(kKnown);
  }
  if (no_op) {
    read_no_op_field(key, v, record, w);
    return true;
  }
  if (key == "id") {
    record.id = get_id(v, "id", w);
  } else if (key == "model") {
    TG_CHECK(v.is_string(), "{}: \"model\" must be a string", w.at());
    record.model = v.get<std::string>();
  } else if (key == "max_tokens" || key == "max_completion_tokens") {
    o.max_tokens = get_integer(v, key.c_str(), w);
    // 0 only scores a prompt (with "echo"); prepare_request refuses it otherwise.
    TG_CHECK(*o.max_tokens >= 0, "{}: \"{}\" must not be negative, got {}", w.at(), key, *o.max_tokens);
  } else if (key == "min_tokens") {
    o.min_tokens = get_integer(v, "min_tokens", w);
    TG_CHECK(*o.min_tokens >= 0, "{}: \"min_tokens\" must be >= 0, got {}", w.at(), *o.min_tokens);
  } else if (key == "temperature") {
    o.temperature = get_number(v, "temperature", w);
    TG_CHECK(*o.temperature >= 0, "{}: \"temperature\" must be >= 0, got {}", w.at(), *o.temperature);
  } else if (key == "top_p") {
    o.top_p = get_number(v, "top_p", w);
    TG_CHECK(*o.top_p > 0 && *o.top_p <= 1, "{}: \"top_p\" must be in (0, 1], got {}", w.at(), *o.top_p);
  } else if (key == "min_p") {
    o.min_p = get_ranged(v, "min_p", 0, 1, w);
  } else if (key == "include_stop_str_in_output") {
    o.include_stop_str_in_output = get_bool(v, "include_stop_str_in_output", w);
  } else if (key == "skip_special_tokens") {
    o.skip_special_tokens = get_bool(v, "skip_special_tokens", w);
  } else if (key == "top_k") {
    o.top_k = get_integer(v, "top_k", w);
    // vLLM spells "no top-k" as -1.
    TG_CHECK(*o.top_k >= -1, "{}: \"top_k\" must be >= 0 (or -1 for off), got {}", w.at(), *o.top_k);
    if (*o.top_k == -1) o.top_k = 0;
  } else if (key == "seed") {
    o.seed = get_integer(v, "seed", w);
  } else if (key == "n") {
    o.n = get_integer(v, "n", w);
    TG_CHECK(*o.n >= 1 && *o.n <= 128, "{}: \"n\" must be between 1 and 128, got {}", w.at(), *o.n);
  } else if (key == "stop") {
    o.stop = get_stop(v, w);
  } else if (key == "stop_token_ids") {
    o.stop_token_ids = v.empty() && v.is_array() ? std::vector<int64_t>{} : get_token_ids(v, "stop_token_ids", w);
  } else if (key == "ignore_eos") {
    o.ignore_eos = get_bool(v, "ignore_eos", w);
  } else if (key == "presence_penalty") {
    o.presence_penalty = get_ranged(v, "presence_penalty", -2, 2, w);
  } else if (key == "frequency_penalty") {
    o.frequency_penalty = get_ranged(v, "frequency_penalty", -2, 2, w);
  } else if (key == "repetition_penalty") {
    o.repetition_penalty = get_number(v, "repetition_penalty", w);
    TG_CHECK(*o.repetition_penalty > 0, "{}: \"repetition_penalty\" must be > 0, got {}", w.at(),
             *o.repetition_penalty);
  } else if (key == "logprobs") {
    // Completions: how many alternatives (0-20). Chat: true/false, with "top_logprobs".
    if (v.is_boolean()) {
      if (v.get<bool>() && !o.logprobs) o.logprobs = 0;
      if (!v.get<bool>()) o.logprobs.reset();
    } else {
      o.logprobs = static_cast<int64_t>(get_ranged(v, "logprobs", 0, 20, w));
      TG_CHECK(is_integral(v), "{}: \"logprobs\" must be an integer", w.at());
    }
  } else if (key == "top_logprobs") {
    TG_CHECK(is_integral(v), "{}: \"top_logprobs\" must be an integer", w.at());
    o.logprobs = static_cast<int64_t>(get_ranged(v, "top_logprobs", 0, 20, w));
  } else if (key == "echo") {
    o.echo = get_bool(v, "echo", w);
  } else if (key == "user") {
    // An end-user label for OpenAI's abuse monitoring; nothing to do offline.
  } else if (key == "stream") {
    TG_CHECK(!get_bool(v, "stream", w), "{}: \"stream\": true is not supported in a batch file", w.at());
  } else {
    return false;
  }
  return true;
}

[[noreturn]] void unknown_field(const std::string& key, const Where& w) {
  TG_THROW("{}: unsupported field \"{}\"", w.at(), key);
}

// {"custom_id", "method", "url", "body": {"model", "prompt" | "messages", "max_tokens", ...}}
void read_openai_request(const json& j, PromptRecord& record, const Where& w) {
  record.openai = true;
  std::string url = "/v1/completions";
  for (const auto& [key, v] : j.items()) {
    if (key == "custom_id") {
      record.custom_id = get_id(v, "custom_id", w);
    } else if (key == "method") {
      TG_CHECK(v.is_string() && v.get<std::string>() == "POST", "{}: \"method\" must be \"POST\"", w.at());
    } else if (key == "url") {
      TG_CHECK(v.is_string(), "{}: \"url\" must be a string", w.at());
      url = v.get<std::string>();
      TG_CHECK(url == "/v1/completions" || url == "/v1/chat/completions",
               "{}: unsupported url \"{}\"; \"/v1/completions\" and \"/v1/chat/completions\" are supported", w.at(),
               url);
    } else if (key != "body" && !read_common_field(key, v, record, w)) {
      unknown_field(key, w);
    }
  }
  if (record.id.empty() && record.custom_id) record.id = *record.custom_id;
  const auto body_it = j.find("body");
  TG_CHECK(body_it != j.end() && body_it->is_object(), "{}: an OpenAI batch request needs a \"body\" object",
           w.at());
  const json& body = *body_it;
  const bool chat = url == "/v1/chat/completions";
  TG_CHECK(!chat || body.contains("messages"), "{}: a \"/v1/chat/completions\" body needs \"messages\"", w.at());
  TG_CHECK(chat || body.contains("prompt"), "{}: a \"/v1/completions\" body needs a \"prompt\"{}", w.at(),
           body.contains("messages") ? " (\"messages\" belong to \"/v1/chat/completions\")" : "");
  for (const auto& [key, v] : body.items()) {
    if (key == "prompt" && !chat) {
      read_prompt_value(v, record, w);
    } else if (key == "messages" && chat) {
      record.messages = get_messages(v, w);
    } else if (key == "id" || !read_common_field(key, v, record, w)) {
      unknown_field(key, w);
    }
  }
  TG_CHECK(!(chat && record.overrides.echo.value_or(false)), "{}: \"echo\" is not supported for chat requests",
           w.at());
}

void read_plain_request(const json& j, PromptRecord& record, const Where& w) {
  const bool has_text = j.contains("prompt"), has_ids = j.contains("prompt_token_ids");
  TG_CHECK(!(has_text && has_ids), "{}: give either \"prompt\" or \"prompt_token_ids\", not both", w.at());
  TG_CHECK(has_text || has_ids || j.contains("messages"),
           "{}: no \"prompt\", \"prompt_token_ids\", \"messages\" or OpenAI batch \"body\" in this line", w.at());
  TG_CHECK(!(j.contains("messages") && (has_text || has_ids)), "{}: give either a prompt or \"messages\", not both",
           w.at());
  for (const auto& [key, v] : j.items()) {
    if (key == "prompt") {
      read_prompt_value(v, record, w);
    } else if (key == "prompt_token_ids") {
      record.token_ids = get_token_ids(v, "prompt_token_ids", w);
    } else if (key == "messages") {
      record.messages = get_messages(v, w);
    } else if (!read_common_field(key, v, record, w)) {
      unknown_field(key, w);
    }
  }
}

// The request's name, found before anything else can fail, so that an error record
// still carries it.
std::string early_id(const json& j) {
  for (const char* key : {"id", "custom_id"}) {
    const auto it = j.find(key);
    if (it != j.end() && it->is_string()) return it->get<std::string>();
    if (it != j.end() && it->is_number_integer()) return it->dump();
  }
  return {};
}

}  // namespace

PromptRecord parse_jsonl_prompt(std::string_view text, const std::string& name, int64_t line,
                                int64_t index) {
  const Where w{name, line};
  json j;
  std::optional<std::string> repeated_key;
  try {
    StrictJson parsed = parse_json_noting_repeated_keys(text.data(), text.data() + text.size());
    j = std::move(parsed.value);
    repeated_key = std::move(parsed.repeated_key);
  } catch (const json::parse_error& e) {
    // A pretty-printed JSON document or a JSON array: say what JSONL is.
    const auto first = text.find_first_not_of(" \t");
    const bool looks_pretty = first != std::string_view::npos && (text.substr(first) == "{" || text[first] == '[');
    TG_THROW("{}: invalid JSON: {}{}", w.at(), parse_error_message(e),
             looks_pretty ? " (a JSONL file holds one complete JSON object per line)"
                          : " (if the file holds one text prompt per line, pass --format text)");
  }
  PromptRecord record;
  record.index = index;
  record.line = line;
  // Not an object: not a request at all, the wrong kind of file.
  TG_CHECK(j.is_object(), "{}: expected a JSON object, got a JSON {}", w.at(), j.type_name());
  const bool openai = j.contains("body") || j.contains("custom_id") || j.contains("url");
  try {
    record.id = early_id(j);
    if (openai && j.contains("custom_id") && j["custom_id"].is_string()) record.custom_id = j["custom_id"].get<std::string>();
    // The last of two values would win silently; which one was meant is unknown.
    TG_CHECK(!repeated_key, "{}: the key \"{}\" appears twice in one object; give it once", w.at(),
             repeated_key.value_or(""));
    if (openai) {
      read_openai_request(j, record, w);
    } else {
      read_plain_request(j, record, w);
    }
  } catch (const Error& e) {
    record.error = e.what();
    record.openai = openai;
  }
  if (record.id.empty()) record.id = std::to_string(index);
  return record;
}

}  // namespace tiergen::io
