#pragma once
// Chat requests ("messages") -> the prompt text the model was trained on: the
// "chat_template" of the tokenizer directory's tokenizer_config.json (or a template
// file given with --chat-template), rendered by tiergen's Jinja engine (src/io/jinja/)
// with what Hugging Face's apply_chat_template passes: messages,
// add_generation_prompt = true, tools = none, documents = none and the special-token
// strings (bos_token, eos_token, unk_token, pad_token, ...).
// tests/test_io_chat_template.cpp checks real models' templates against Python's jinja2
// (what Hugging Face renders with) and a JavaScript Jinja engine.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tiergen/io/prompts.h"
#include "tiergen/tokenizer/tokenizer.h"

namespace tiergen::io {

namespace jinja {
class Template;
}

class ChatTemplate {
 public:
  // DIR/tokenizer_config.json's template, or the file `template_file` when one is given
  // (its special tokens still come from the config, else from `tok`). A missing config
  // or template leaves the chat template absent: render() then refuses every chat. A
  // template_file that cannot be read or parsed throws here; a config's template that
  // does not parse fails each chat request with that error.
  static ChatTemplate load(const std::string& dir, const tokenizer::Tokenizer& tok,
                           const std::string& template_file = "");
  // From a template string and the special-token strings ({"bos_token", "<s>"}, ...).
  static ChatTemplate from_template(const std::string& source,
                                    std::vector<std::pair<std::string, std::string>> special_tokens,
                                    std::string where = "chat_template");

  bool present() const { return template_ != nullptr || !error_.empty(); }
  // The template's text ("" when absent): part of a job's identity.
  const std::string& source() const { return source_; }
  // The prompt for `messages`, ending where the assistant's answer begins. Throws
  // tiergen::Error naming the template for a template that is absent or broken, or
  // messages the template refuses (its raise_exception message).
  std::string render(const std::vector<ChatMessage>& messages) const;

 private:
  std::shared_ptr<const jinja::Template> template_;
  std::vector<std::pair<std::string, std::string>> special_tokens_;
  std::string source_, where_, error_;
};

}  // namespace tiergen::io
