#pragma once
// Added tokens (special tokens such as "<s>" or "<|eot_id|>", and user-added words)
// are cut out of the input before normalization, so no normalizer or pre-tokenizer
// can break them. Matching is leftmost-longest over the raw text, as in the Hugging
// Face tokenizers. lstrip/rstrip remove whitespace next to a token. `single_word`
// and `normalized` are not interpreted: tokens match wherever they occur in the raw
// input (the LLaMA, OPT and GPT-2 files set neither).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tiergen::tokenizer {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
};

// A part of the input: either the text [begin, end) or an added token.
struct Section {
  std::size_t begin;
  std::size_t end;
  int32_t added_id;  // -1 for ordinary text
};

class AddedTokenSplitter {
 public:
  // Later tokens with the same content replace earlier ones.
  void add(const AddedToken& token);
  bool empty() const { return tokens_.empty(); }

  // Splits text (valid UTF-8) into ordinary text and added tokens, in order; empty
  // text sections are dropped.
  void split(std::string_view text, std::vector<Section>& out) const;

 private:
  const AddedToken* match_at(std::string_view text, std::size_t pos) const;

  std::vector<AddedToken> tokens_;
  // Indices into tokens_ by first byte, longest content first.
  std::vector<std::vector<std::size_t>> by_first_byte_ = std::vector<std::vector<std::size_t>>(256);
};

// Unicode White_Space (what lstrip/rstrip remove).
bool is_unicode_whitespace(char32_t cp);

}  // namespace tiergen::tokenizer
