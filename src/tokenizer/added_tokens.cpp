#include "src/tokenizer/added_tokens.h"

#include <algorithm>

#include "tiergen/tokenizer/utf8.h"

namespace tiergen::tokenizer {

bool is_unicode_whitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

namespace {

// Length of the whitespace run that ends at text[end] (exclusive), from `floor` on.
std::size_t trailing_whitespace(std::string_view text, std::size_t floor, std::size_t end) {
  std::size_t start = end;
  while (start > floor) {
    std::size_t lead = start - 1;
    while (lead > floor && (static_cast<unsigned char>(text[lead]) & 0xC0) == 0x80) --lead;
    std::size_t pos = lead;
    if (!is_unicode_whitespace(next_code_point(text, pos))) break;
    start = lead;
  }
  return end - start;
}

std::size_t leading_whitespace(std::string_view text, std::size_t begin, std::size_t limit) {
  std::size_t pos = begin;
  while (pos < limit) {
    std::size_t next = pos;
    if (!is_unicode_whitespace(next_code_point(text, next))) break;
    pos = next;
  }
  return pos - begin;
}

}  // namespace

void AddedTokenSplitter::add(const AddedToken& token) {
  if (token.content.empty()) return;
  for (auto& existing : tokens_) {
    if (existing.content == token.content) {
      existing = token;
      return;
    }
  }
  tokens_.push_back(token);
  auto& bucket = by_first_byte_[static_cast<unsigned char>(token.content[0])];
  bucket.push_back(tokens_.size() - 1);
  std::stable_sort(bucket.begin(), bucket.end(),
                   [&](std::size_t a, std::size_t b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
}

const AddedToken* AddedTokenSplitter::match_at(std::string_view text, std::size_t pos) const {
  for (std::size_t index : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
    const std::string& content = tokens_[index].content;
    if (text.compare(pos, content.size(), content) == 0) return &tokens_[index];
  }
  return nullptr;
}

void AddedTokenSplitter::split(std::string_view text, std::vector<Section>& out) const {
  out.clear();
  std::size_t text_begin = 0;  // start of the ordinary text not yet emitted
  std::size_t pos = 0;
  while (pos < text.size()) {
    const AddedToken* token = tokens_.empty() ? nullptr : match_at(text, pos);
    if (token == nullptr) {
      ++pos;
      continue;
    }
    std::size_t text_end = pos;
    if (token->lstrip) text_end -= trailing_whitespace(text, text_begin, pos);
    if (text_end > text_begin) out.push_back({text_begin, text_end, -1});
    out.push_back({pos, pos + token->content.size(), token->id});
    pos += token->content.size();
    if (token->rstrip) pos += leading_whitespace(text, pos, text.size());
    text_begin = pos;
  }
  if (text.size() > text_begin) out.push_back({text_begin, text.size(), -1});
}

}  // namespace tiergen::tokenizer
