#include "src/tokenizer/normalizer.h"

namespace tiergen::tokenizer {

void PrependNormalizer::apply(std::string& text) const {
  if (!text.empty()) text.insert(0, prefix_);
}

ReplaceNormalizer::ReplaceNormalizer(std::string literal, std::string content)
    : literal_(std::move(literal)), content_(std::move(content)) {}

ReplaceNormalizer::ReplaceNormalizer(std::unique_ptr<UnicodeRegex> regex, std::string content)
    : regex_(std::move(regex)), content_(std::move(content)) {}

void ReplaceNormalizer::apply(std::string& text) const {
  std::string out;
  // The exact size for a literal (a prompt of many MB is not grown by doubling).
  std::size_t size = text.size() + text.size() / 4;
  if (!regex_ && !literal_.empty()) {
    std::size_t matches = 0;
    for (std::size_t at = text.find(literal_); at != std::string::npos; at = text.find(literal_, at + literal_.size())) {
      ++matches;
    }
    if (matches == 0) return;
    size = text.size() - matches * literal_.size() + matches * content_.size();
  }
  out.reserve(size);
  std::size_t copied = 0;
  if (regex_) {
    regex_->for_each_match(text, [&](std::size_t begin, std::size_t end) {
      out.append(text, copied, begin - copied);
      out += content_;
      copied = end;
    });
  } else {
    if (literal_.empty()) return;
    for (std::size_t at = text.find(literal_); at != std::string::npos; at = text.find(literal_, copied)) {
      out.append(text, copied, at - copied);
      out += content_;
      copied = at + literal_.size();
    }
  }
  if (copied == 0 && out.empty()) return;  // nothing matched
  out.append(text, copied, std::string::npos);
  text.swap(out);
}

}  // namespace tiergen::tokenizer
