#pragma once
// A compiled Unicode regular expression (PCRE2, UTF + UCP, JIT when available) for
// the patterns in tokenizer.json. std::regex knows neither \p{L} nor \p{N}.
//
// `\s` and `\S` are rewritten to the Unicode White_Space property, the class that
// the Hugging Face tokenizers (Oniguruma) and Python's `regex` module use; PCRE2's
// own \s would also match U+180E.
#include <cstddef>
#include <string>
#include <string_view>

struct pcre2_real_code_8;

namespace tiergen::tokenizer {

class UnicodeRegex {
 public:
  // `where` names the file and field for error messages.
  UnicodeRegex(std::string_view pattern, const std::string& where);
  ~UnicodeRegex();
  UnicodeRegex(const UnicodeRegex&) = delete;
  UnicodeRegex& operator=(const UnicodeRegex&) = delete;

  // Finds the leftmost match in text[from, text.size()); text must be valid UTF-8.
  // Returns false when there is none. An empty match is reported like any other.
  bool find(std::string_view text, std::size_t from, std::size_t& begin, std::size_t& end) const;

  // Calls fn(begin, end) for each non-empty, non-overlapping match, left to right
  // (empty matches are skipped, as JavaScript's matchAll and Rust's find_iter do).
  template <class Fn>
  void for_each_match(std::string_view text, Fn&& fn) const {
    std::size_t pos = 0, begin = 0, end = 0;
    while (pos <= text.size() && find(text, pos, begin, end)) {
      if (end == begin) {
        pos = end + 1;
        while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
        continue;
      }
      fn(begin, end);
      pos = end;
    }
  }

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
};

// Returns `pattern` with \s and \S replaced by \p{White_Space} and \P{White_Space}.
std::string rewrite_whitespace_classes(std::string_view pattern);

// Escapes `literal` so that it matches itself.
std::string escape_regex_literal(std::string_view literal);

}  // namespace tiergen::tokenizer
