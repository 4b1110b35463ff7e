#include "src/io/chat_template.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tiergen/common/error.h"

namespace tiergen::io {

namespace {

// Python's str.strip() for the ASCII whitespace that Jinja's trim and strip remove.
std::string strip(const std::string& s) {
  const char* ws = " \t\n\r\v\f";
  const size_t first = s.find_first_not_of(ws);
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(ws) - first + 1);
}

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

}  // namespace

// The templates tiergen renders natively, exactly as their models' tokenizer_config.json
// ship them. A template is one of these only when it is the same text (up to leading
// and trailing whitespace): a fine-tune's variant (an injected system prompt, roles
// rendered otherwise) renders differently and must not pass for the stock one.
// LLaMA-3.0 instruct (Meta-Llama-3-8B/70B-Instruct).
const char* const kLlama3Instruct = R"tmpl({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>

'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>

' }}{% endif %})tmpl";
// LLaMA-2 chat (Llama-2-7b/13b/70b-chat-hf).
const char* const kLlama2Chat = R"tmpl({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %})tmpl";

ChatFamily recognise_chat_template(const std::string& s) {
  const std::string text = strip(s);
  if (text == kLlama3Instruct) return ChatFamily::Llama3;
  if (text == kLlama2Chat) return ChatFamily::Llama2;
  return ChatFamily::Unknown;
}

ChatTemplate ChatTemplate::from_template(const std::string& source, std::string bos, std::string eos,
                                         std::string where) {
  ChatTemplate t;
  t.family_ = recognise_chat_template(source);
  t.bos_ = std::move(bos);
  t.eos_ = std::move(eos);
  t.where_ = std::move(where);
  return t;
}

ChatTemplate ChatTemplate::load(const std::string& dir, const tokenizer::Tokenizer& tok) {
  const std::string path = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  const std::string where = path + " \"chat_template\"";
  auto id_string = [&](int64_t id) { return id >= 0 ? tok.id_to_token(id) : std::string(); };
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ChatTemplate t;
    t.where_ = path;
    return t;
  }
  const auto config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  TG_CHECK(config.is_object(), "{}: not a JSON object", path);
  const auto source = template_source(config);
  if (!source) {
    ChatTemplate t;
    t.where_ = path;
    return t;
  }
  return from_template(*source, token_string(config, "bos_token").value_or(id_string(tok.bos_id())),
                       token_string(config, "eos_token").value_or(id_string(tok.eos_id())), where);
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages) const {
  switch (family_) {
    case ChatFamily::Llama3: return render_llama3(messages);
    case ChatFamily::Llama2: return render_llama2(messages);
    case ChatFamily::None:
      TG_THROW("chat \"messages\" need a chat template, and {} has none; send \"/v1/completions\" with a \"prompt\"",
               where_);
    case ChatFamily::Unknown:
      break;
  }
  TG_THROW("{} is not a template tiergen can render (it renders the LLaMA-2 chat and LLaMA-3 instruct templates); "
           "render the chat yourself and send \"/v1/completions\" with a \"prompt\"", where_);
}

std::string ChatTemplate::render_llama3(const std::vector<ChatMessage>& messages) const {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0) out += bos_;
    out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n" + strip(messages[i].content) + "<|eot_id|>";
  }
  return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";  // add_generation_prompt
}

std::string ChatTemplate::render_llama2(const std::vector<ChatMessage>& messages) const {
  size_t first = 0;
  std::optional<std::string> system;
  if (!messages.empty() && messages[0].role == "system") {
    system = messages[0].content;
    first = 1;
  }
  std::string out;
  for (size_t i = first; i < messages.size(); ++i) {
    const size_t index0 = i - first;
    const ChatMessage& m = messages[i];
    TG_CHECK((m.role == "user") == (index0 % 2 == 0),
             "chat messages: Conversation roles must alternate user/assistant/user/assistant/... (message {} is "
             "\"{}\")", i, m.role);
    std::string content = m.content;
    // Jinja's `system_message != false` is true for any string, even an empty one.
    if (index0 == 0 && system) content = "<<SYS>>\n" + *system + "\n<</SYS>>\n\n" + m.content;
    if (m.role == "user") {
      out += bos_ + "[INST] " + strip(content) + " [/INST]";
    } else if (m.role == "assistant") {
      out += " " + strip(content) + " " + eos_;
    }
  }
  return out;
}

}  // namespace tiergen::io
