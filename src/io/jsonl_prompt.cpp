#include "src/io/jsonl_prompt.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "tiergen/common/error.h"
#include "tiergen/common/json_describe.h"

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

// "prompt": a non-empty string, or token ids (as OpenAI's completions API allows).
void read_prompt_value(const json& v, PromptRecord& record, const Where& w) {
  if (v.is_string()) {
    record.text = v.get<std::string>();
    TG_CHECK(!record.text->empty(), "{}: \"prompt\" is empty", w.at());
  } else if (v.is_array() && !v.empty() && v[0].is_string()) {
    TG_THROW("{}: \"prompt\" is a list of strings; give one prompt per line", w.at());
  } else if (v.is_array()) {
    record.token_ids = get_token_ids(v, "prompt", w);
  } else {
    TG_THROW("{}: \"prompt\" must be a string or an array of token ids", w.at());
  }
}

std::string get_id(const json& v, const char* key, const Where& w) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return v.dump();
  TG_THROW("{}: \"{}\" must be a string or an integer", w.at(), key);
}

// Sampling fields and "id"; returns false for a key it does not know.
bool read_common_field(const std::string& key, const json& v, PromptRecord& record, const Where& w,
                       JsonlWarnings& warnings) {
  auto& o = record.overrides;
  if (v.is_null()) {
    // OpenAI clients send "temperature": null for "the default"; treat as absent.
    return key == "temperature" || key == "top_p" || key == "top_k" || key == "seed" ||
           key == "max_tokens" || key == "stop" || key == "id";
  }
  if (key == "id") {
    record.id = get_id(v, "id", w);
  } else if (key == "max_tokens") {
    o.max_tokens = get_integer(v, "max_tokens", w);
    TG_CHECK(*o.max_tokens >= 1, "{}: \"max_tokens\" must be at least 1, got {}", w.at(), *o.max_tokens);
  } else if (key == "temperature") {
    o.temperature = get_number(v, "temperature", w);
    TG_CHECK(*o.temperature >= 0, "{}: \"temperature\" must be >= 0, got {}", w.at(), *o.temperature);
  } else if (key == "top_p") {
    o.top_p = get_number(v, "top_p", w);
    TG_CHECK(*o.top_p > 0 && *o.top_p <= 1, "{}: \"top_p\" must be in (0, 1], got {}", w.at(), *o.top_p);
  } else if (key == "top_k") {
    o.top_k = get_integer(v, "top_k", w);
    TG_CHECK(*o.top_k >= 0, "{}: \"top_k\" must be >= 0, got {}", w.at(), *o.top_k);
  } else if (key == "seed") {
    o.seed = get_integer(v, "seed", w);
  } else if (key == "stop") {
    if (!warnings.stop) {
      spdlog::warn("{}: stop sequences are not supported; ignoring \"stop\" (reported once per file)", w.at());
      warnings.stop = true;
    }
  } else {
    return false;
  }
  return true;
}

void warn_unknown(const std::string& key, const Where& w, JsonlWarnings& warnings) {
  if (warnings.unknown_key) return;
  spdlog::warn("{}: ignoring unknown key \"{}\" (further unknown keys are not reported)", w.at(), key);
  warnings.unknown_key = true;
}

// {"custom_id", "method", "url", "body": {"model", "prompt", "max_tokens", ...}}
void read_openai_request(const json& j, PromptRecord& record, const Where& w, JsonlWarnings& warnings) {
  std::optional<std::string> custom_id;
  for (const auto& [key, v] : j.items()) {
    if (key == "custom_id") {
      custom_id = get_id(v, "custom_id", w);
    } else if (key == "method") {
      TG_CHECK(v.is_string() && v.get<std::string>() == "POST", "{}: \"method\" must be \"POST\"", w.at());
    } else if (key == "url") {
      TG_CHECK(v.is_string(), "{}: \"url\" must be a string", w.at());
      const auto url = v.get<std::string>();
      TG_CHECK(url != "/v1/chat/completions",
               "{}: chat requests (\"/v1/chat/completions\") are not supported; use \"/v1/completions\" "
               "with a \"prompt\"",
               w.at());
      TG_CHECK(url == "/v1/completions", "{}: unsupported url \"{}\"; only \"/v1/completions\" is supported",
               w.at(), url);
    } else if (key == "body") {
      // read below, once "id" precedence is settled
    } else if (!read_common_field(key, v, record, w, warnings)) {
      warn_unknown(key, w, warnings);
    }
  }
  const auto body_it = j.find("body");
  TG_CHECK(body_it != j.end() && body_it->is_object(), "{}: an OpenAI batch request needs a \"body\" object",
           w.at());
  const json& body = *body_it;
  TG_CHECK(!body.contains("messages"),
           "{}: chat requests (\"messages\") are not supported; use \"/v1/completions\" with a \"prompt\"",
           w.at());
  TG_CHECK(body.contains("prompt"), "{}: the request \"body\" has no \"prompt\"", w.at());
  const std::string top_level_id = record.id;
  for (const auto& [key, v] : body.items()) {
    if (key == "prompt") {
      read_prompt_value(v, record, w);
    } else if (key == "model") {
      // The model is the one the job runs; a batch file names one for OpenAI's sake.
    } else if (key == "id" || !read_common_field(key, v, record, w, warnings)) {
      warn_unknown(key, w, warnings);
    }
  }
  if (top_level_id.empty() && custom_id) record.id = *custom_id;
}

}  // namespace

PromptRecord parse_jsonl_prompt(std::string_view text, const std::string& name, int64_t line,
                                int64_t index, JsonlWarnings& warnings) {
  const Where w{name, line};
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    // A pretty-printed JSON document or a JSON array: say what JSONL is.
    const auto first = text.find_first_not_of(" \t");
    const bool looks_pretty = first != std::string_view::npos && (text.substr(first) == "{" || text[first] == '[');
    TG_THROW("{}: invalid JSON: {}{}", w.at(), parse_error_message(e),
             looks_pretty ? " (a JSONL file holds one complete JSON object per line)" : "");
  }
  TG_CHECK(j.is_object(), "{}: expected a JSON object, got a JSON {}", w.at(), j.type_name());

  PromptRecord record;
  record.index = index;
  record.line = line;

  const bool openai = j.contains("body") || j.contains("custom_id") || j.contains("url");
  if (openai) {
    read_openai_request(j, record, w, warnings);
  } else {
    const bool has_text = j.contains("prompt"), has_ids = j.contains("prompt_token_ids");
    TG_CHECK(!(has_text && has_ids), "{}: give either \"prompt\" or \"prompt_token_ids\", not both", w.at());
    TG_CHECK(has_text || has_ids,
             "{}: no \"prompt\", \"prompt_token_ids\" or OpenAI batch \"body\" in this line", w.at());
    TG_CHECK(!j.contains("messages"), "{}: chat \"messages\" are not supported; give a \"prompt\"", w.at());
    for (const auto& [key, v] : j.items()) {
      if (key == "prompt") {
        read_prompt_value(v, record, w);
      } else if (key == "prompt_token_ids") {
        record.token_ids = get_token_ids(v, "prompt_token_ids", w);
      } else if (!read_common_field(key, v, record, w, warnings)) {
        warn_unknown(key, w, warnings);
      }
    }
  }
  if (record.id.empty()) record.id = std::to_string(index);
  return record;
}

}  // namespace tiergen::io
