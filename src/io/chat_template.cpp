#include "src/io/chat_template.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "src/io/jinja/template.h"
#include "tiergen/common/error.h"

namespace tiergen::io {

namespace {

// "bos_token": "<s>" or {"content": "<s>", ...} (an AddedToken).
std::optional<std::string> token_string(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  return std::nullopt;
}

// "chat_template" is a string, or a list of {"name", "template"} with a "default".
std::optional<std::string> template_source(const nlohmann::json& config) {
  const auto it = config.find("chat_template");
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const auto& t : *it) {
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string()) {
        return t["template"].get<std::string>();
      }
    }
  }
  return std::nullopt;
}

// The special tokens Hugging Face passes to a template (its special_tokens_map), from
// the config where it names them, BOS and EOS otherwise from the tokenizer.
std::vector<std::pair<std::string, std::string>> special_tokens(const nlohmann::json& config,
                                                                const tokenizer::Tokenizer& tok) {
  std::vector<std::pair<std::string, std::string>> tokens;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (auto s = token_string(config, key)) tokens.emplace_back(key, *s);
  }
  auto has = [&](const char* key) {
    return std::any_of(tokens.begin(), tokens.end(), [&](const auto& t) { return t.first == key; });
  };
  if (!has("bos_token") && tok.bos_id() >= 0) tokens.emplace_back("bos_token", tok.id_to_token(tok.bos_id()));
  if (!has("eos_token") && tok.eos_id() >= 0) tokens.emplace_back("eos_token", tok.id_to_token(tok.eos_id()));
  return tokens;
}

std::string read_template_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TG_CHECK(in, "--chat-template {}: cannot read the file", path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

ChatTemplate ChatTemplate::from_template(const std::string& source,
                                         std::vector<std::pair<std::string, std::string>> special_tokens,
                                         std::string where) {
  ChatTemplate t;
  t.source_ = source;
  t.special_tokens_ = std::move(special_tokens);
  t.where_ = std::move(where);
  try {
    t.template_ = std::make_shared<const jinja::Template>(source, t.where_);
  } catch (const Error& e) {
    t.error_ = e.what();
  }
  return t;
}

ChatTemplate ChatTemplate::load(const std::string& dir, const tokenizer::Tokenizer& tok,
                                const std::string& template_file) {
  const std::string path = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  nlohmann::json config = nlohmann::json::object();
  if (std::ifstream in(path, std::ios::binary); in) {
    config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    TG_CHECK(config.is_object(), "{}: not a JSON object", path);
  }
  if (!template_file.empty()) {
    ChatTemplate t = from_template(read_template_file(template_file), special_tokens(config, tok),
                                   "--chat-template " + template_file);
    if (!t.error_.empty()) throw Error(t.error_);
    return t;
  }
  const auto source = template_source(config);
  if (!source) {
    ChatTemplate t;
    t.where_ = path;
    return t;
  }
  return from_template(*source, special_tokens(config, tok), path + " \"chat_template\"");
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages) const {
  TG_CHECK(present(), "chat \"messages\" need a chat template, and {} has none; give one with --chat-template FILE "
           "or send \"/v1/completions\" with a \"prompt\"", where_);
  TG_CHECK(error_.empty(), "the chat template cannot be used: {}", error_);
  jinja::List list;
  for (const ChatMessage& m : messages) {
    list.push_back(jinja::Value::dict({{"role", jinja::Value::string(m.role)}, {"content", jinja::Value::string(m.content)}}));
  }
  jinja::Dict variables = {{"messages", jinja::Value::list(std::move(list))},
                           {"add_generation_prompt", jinja::Value::boolean(true)},
                           {"tools", jinja::Value::none()},
                           {"documents", jinja::Value::none()}};
  for (const auto& [key, value] : special_tokens_) variables.emplace_back(key, jinja::Value::string(value));
  try {
    return template_->render(variables);
  } catch (const jinja::TemplateRaised& e) {
    TG_THROW("chat messages refused by {}: {}", where_, e.what());
  }
}

}  // namespace tiergen::io
