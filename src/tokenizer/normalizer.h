#pragma once
// Normalizers rewrite a section of input text (the text between added tokens)
// before pre-tokenization. Supported: Prepend and Replace (literal or regex), which
// is what LLaMA-2-style tokenizer.json files use; sequences are flattened.
#include <memory>
#include <string>
#include <vector>

#include "src/tokenizer/unicode_regex.h"

namespace tiergen::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void apply(std::string& text) const = 0;
};

// Prepends a fixed string to non-empty text (LLaMA-2 prepends "▁").
class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void apply(std::string& text) const override;

 private:
  std::string prefix_;
};

// Replaces every occurrence of a literal string or of a regex match.
class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::string literal, std::string content);
  ReplaceNormalizer(std::unique_ptr<UnicodeRegex> regex, std::string content);
  void apply(std::string& text) const override;

 private:
  std::string literal_;
  std::unique_ptr<UnicodeRegex> regex_;
  std::string content_;
};

using Normalizers = std::vector<std::unique_ptr<Normalizer>>;

}  // namespace tiergen::tokenizer
