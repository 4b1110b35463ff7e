#pragma once
// Chat requests ("messages") -> the prompt text the model was trained on, from the
// "chat_template" of the tokenizer directory's tokenizer_config.json. There is no C++
// Jinja engine here, so the template is recognised as one of the families tiergen
// renders natively and then rendered by code that does what that template does:
//   LLaMA-3 instruct: <|begin_of_text|><|start_header_id|>ROLE<|end_header_id|>\n\n
//                     CONTENT(trimmed)<|eot_id|> ... then the assistant header;
//   LLaMA-2 chat:     <s>[INST] <<SYS>>\nSYSTEM\n<</SYS>>\n\nUSER [/INST] ANSWER </s>...
// (tests/test_io_chat_template.cpp checks both against a JavaScript Jinja engine).
// Any other template, or none, makes render() throw a message for that request.
#include <optional>
#include <string>
#include <vector>

#include "tiergen/io/prompts.h"
#include "tiergen/tokenizer/tokenizer.h"

namespace tiergen::io {

enum class ChatFamily { None, Unknown, Llama2, Llama3 };

class ChatTemplate {
 public:
  // Reads DIR/tokenizer_config.json (a missing file or template gives family None).
  // Special-token strings come from the config, else from `tok`.
  static ChatTemplate load(const std::string& dir, const tokenizer::Tokenizer& tok);
  // From a template string and the BOS/EOS token strings (tests, other sources).
  static ChatTemplate from_template(const std::string& source, std::string bos, std::string eos,
                                    std::string where = "chat_template");

  ChatFamily family() const { return family_; }
  // The prompt for `messages`, ending where the assistant's answer begins. Throws
  // tiergen::Error for a template it cannot render or messages the template refuses.
  std::string render(const std::vector<ChatMessage>& messages) const;

 private:
  std::string render_llama2(const std::vector<ChatMessage>& messages) const;
  std::string render_llama3(const std::vector<ChatMessage>& messages) const;

  ChatFamily family_ = ChatFamily::None;
  std::string bos_, eos_, where_;
};

// Which family a template string belongs to (Unknown when it is none tiergen renders).
ChatFamily recognise_chat_template(const std::string& source);

}  // namespace tiergen::io
