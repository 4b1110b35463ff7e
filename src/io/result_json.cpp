// Result records as JSON lines: tiergen's own format and the OpenAI batch output
// format that vLLM's `run-batch` writes (see tiergen/io/results.h).
#include <nlohmann/json.hpp>
#include <random>

#include "tiergen/common/error.h"
#include "tiergen/io/results.h"

namespace tiergen::io {

namespace {

using nlohmann::ordered_json;

// Generation may stop inside a multi-byte character; replace, never throw.
std::string dump(const ordered_json& j) { return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace); }

ordered_json completion_fields(const Completion& c) {
  ordered_json j;
  if (c.text) j["text"] = *c.text;
  j["token_ids"] = c.token_ids;
  j["finish_reason"] = c.finish_reason;
  if (!c.stop_reason.is_null()) j["stop_reason"] = c.stop_reason;
  if (!c.logprobs.is_null()) j["logprobs"] = c.logprobs;
  return j;
}

// 32 random hex digits, like the uuid4().hex vLLM puts in its ids.
std::string random_hex() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{:016x}{:016x}", rng(), rng());
}

ordered_json openai_choice(const Completion& c, size_t index, bool chat) {
  ordered_json j;
  j["index"] = index;
  if (chat) {
    j["message"] = {{"role", "assistant"}, {"content", c.text.value_or("")}};
  } else {
    j["text"] = c.text.value_or("");
  }
  j["logprobs"] = c.logprobs;
  j["finish_reason"] = c.finish_reason;
  j["stop_reason"] = c.stop_reason;
  return j;
}

}  // namespace

ResultFormat parse_result_format(const std::string& name) {
  if (name == "tiergen") return ResultFormat::Tiergen;
  if (name == "openai") return ResultFormat::OpenAi;
  TG_THROW("unknown output format \"{}\" (expected tiergen or openai)", name);
}

std::string result_to_json_line(const ResultRecord& record) {
  // ordered_json: the key order is part of the format (people read these files).
  ordered_json j;
  j["id"] = record.id;
  if (record.error) {
    j["error"] = *record.error;
    return dump(j);
  }
  if (record.prompt && record.more_prompts.empty()) j["prompt"] = *record.prompt;
  if (record.prompt && !record.more_prompts.empty()) {
    ordered_json list = ordered_json::array({*record.prompt});
    for (const auto& text : record.more_prompts) list.push_back(text);
    j["prompt"] = std::move(list);
  }
  if (record.more.empty()) {
    const ordered_json fields = completion_fields(record);  // items() does not keep a temporary alive
    for (const auto& [key, value] : fields.items()) j[key] = value;
  } else {
    ordered_json choices = ordered_json::array();
    choices.push_back(completion_fields(record));
    for (const auto& c : record.more) choices.push_back(completion_fields(c));
    j["choices"] = std::move(choices);
  }
  j["num_prompt_tokens"] = record.num_prompt_tokens;
  j["num_output_tokens"] = record.num_output_tokens;
  return dump(j);
}

std::string result_to_openai_line(const ResultRecord& record, int64_t created) {
  ordered_json j;
  j["id"] = "vllm-" + random_hex();
  j["custom_id"] = record.custom_id.empty() ? record.id : record.custom_id;
  ordered_json response;
  if (record.error) {
    response["status_code"] = 400;
    response["request_id"] = "vllm-batch-" + random_hex();
    response["body"] = nullptr;
    j["response"] = std::move(response);
    j["error"] = {{"object", "error"}, {"message", *record.error}, {"type", "BadRequestError"}, {"param", nullptr},
                  {"code", 400}};
    return dump(j);
  }
  ordered_json body;
  body["id"] = (record.chat ? "chatcmpl-" : "cmpl-") + random_hex();
  body["object"] = record.chat ? "chat.completion" : "text_completion";
  body["created"] = created;
  body["model"] = record.model;
  ordered_json choices = ordered_json::array();
  choices.push_back(openai_choice(record, 0, record.chat));
  for (size_t i = 0; i < record.more.size(); ++i) choices.push_back(openai_choice(record.more[i], i + 1, record.chat));
  body["choices"] = std::move(choices);
  body["usage"] = {{"prompt_tokens", record.num_prompt_tokens},
                   {"completion_tokens", record.num_output_tokens},
                   {"total_tokens", record.num_prompt_tokens + record.num_output_tokens}};
  response["status_code"] = 200;
  response["request_id"] = "vllm-batch-" + random_hex();
  response["body"] = std::move(body);
  j["response"] = std::move(response);
  j["error"] = nullptr;
  return dump(j);
}

std::vector<std::string> job_differences(const nlohmann::json& was, const nlohmann::json& now) {
  std::vector<std::string> out;
  for (const auto& [key, value] : now.items()) {
    const auto it = was.find(key);
    if (it == was.end()) {
      out.push_back(fmt::format("{}: was not recorded, now {}", key, value.dump()));
    } else if (*it != value) {
      out.push_back(fmt::format("{}: was {}, now {}", key, it->dump(), value.dump()));
    }
  }
  for (const auto& [key, value] : was.items()) {
    if (!now.contains(key)) out.push_back(fmt::format("{}: was {}, now not set", key, value.dump()));
  }
  return out;
}

}  // namespace tiergen::io
