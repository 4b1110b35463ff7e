#include "src/io/jinja/lexer.h"

#include <algorithm>
#include <cctype>

#include "src/io/jinja/python_text.h"
#include "tiergen/common/error.h"

namespace tiergen::io::jinja {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

class Lexer {
 public:
  Lexer(const std::string& source, const std::string& where) : src_(normalize_newlines(source)), where_(where) {
    // keep_trailing_newline is off: one final newline is not part of the output.
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  // jinja2 reads \r\n and \r as \n (a template file written on Windows renders the same).
  static std::string normalize_newlines(const std::string& source) {
    std::string out;
    out.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] != '\r') {
        out += source[i];
      } else {
        out += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      }
    }
    return out;
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t open = next_tag(pos_);
      std::string text = src_.substr(pos_, open - pos_);
      if (open == src_.size()) {
        push_text(std::move(text), pos_);
        break;
      }
      const char kind = src_[open + 1];  // '{', '%' or '#'
      const char modifier = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (modifier == '-') {
        text.erase(std::find_if_not(text.rbegin(), text.rend(), is_space).base(), text.end());
      } else if (kind != '{' && modifier != '+') {
        lstrip_block_line(text, pos_);
      }
      push_text(std::move(text), pos_);
      pos_ = open + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      if (kind == '#') {
        skip_comment(open);
      } else {
        lex_tag(kind, open);
      }
    }
    tokens_.push_back({Token::Type::End, "", line_at(src_.size())});
    return std::move(tokens_);
  }

 private:
  size_t next_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }

  // Offsets are asked for mostly in increasing order: count on from the last one.
  int line_at(size_t offset) const {
    if (offset < counted_to_) {
      counted_to_ = 0;
      counted_line_ = 1;
    }
    counted_line_ += static_cast<int>(std::count(src_.begin() + static_cast<std::ptrdiff_t>(counted_to_),
                                                 src_.begin() + static_cast<std::ptrdiff_t>(offset), '\n'));
    counted_to_ = offset;
    return counted_line_;
  }

  [[noreturn]] void fail(size_t offset, const std::string& what) const {
    TG_THROW("{} line {}: {}", where_, line_at(offset), what);
  }

  void push_text(std::string text, size_t start) {
    if (!text.empty()) tokens_.push_back({Token::Type::Text, std::move(text), line_at(start)});
  }

  // lstrip_blocks: the whitespace between a line's start and a block tag goes.
  void lstrip_block_line(std::string& text, size_t text_start) const {
    const size_t newline = text.rfind('\n');
    const size_t line_start = newline == std::string::npos ? 0 : newline + 1;
    const bool at_line_start = newline != std::string::npos || text_start == 0 || src_[text_start - 1] == '\n';
    if (!at_line_start) return;
    // jinja2 matches \s here: any whitespace, Unicode included.
    if (strip_text(std::string_view(text).substr(line_start), nullptr, true, false).empty()) text.erase(line_start);
  }

  // After a closing tag: `-` strips all whitespace, trim_blocks one newline (blocks and
  // comments only).
  void after_close(bool strip, bool trim_newline) {
    if (strip) {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
    } else if (trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
  }

  void skip_comment(size_t open) {
    const size_t close = src_.find("#}", pos_);
    if (close == std::string::npos) fail(open, "a comment {# is never closed");
    const bool strip = close > pos_ && src_[close - 1] == '-';
    pos_ = close + 2;
    after_close(strip, true);
  }

  // The tokens of one {{ ... }} or {% ... %}. The tag ends at a closing delimiter
  // outside brackets (`{{ {'a': {'b': 1}} }}` is one expression), as in jinja2.
  void lex_tag(char kind, size_t open) {
    const bool block = kind == '%';
    const std::string close = block ? "%}" : "}}";
    const size_t first = tokens_.size();
    tokens_.push_back({block ? Token::Type::BlockBegin : Token::Type::VarBegin, "", line_at(open)});
    int brackets = 0;
    for (;;) {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      if (pos_ >= src_.size()) fail(open, std::string(block ? "a block {% is" : "an expression {{ is") + " never closed");
      const bool dash = src_.compare(pos_, 3, "-" + close) == 0;
      const bool plus = block && src_.compare(pos_, 3, "+" + close) == 0;  // keeps the newline after it
      if (brackets == 0 && (dash || plus || src_.compare(pos_, 2, close) == 0)) {
        pos_ += dash || plus ? 3 : 2;
        tokens_.push_back({block ? Token::Type::BlockEnd : Token::Type::VarEnd, "", line_at(pos_)});
        if (block && tokens_.size() == first + 3 && tokens_[first + 1].type == Token::Type::Name &&
            tokens_[first + 1].text == "raw") {
          lex_raw(open, first, dash);
        } else {
          after_close(dash, block && !plus);
        }
        return;
      }
      lex_expression_token();
      const Token& t = tokens_.back();
      if (t.type == Token::Type::Operator && (t.text == "(" || t.text == "[" || t.text == "{")) ++brackets;
      if (t.type == Token::Type::Operator && (t.text == ")" || t.text == "]" || t.text == "}")) {
        brackets = std::max(0, brackets - 1);
      }
    }
  }

  // {% raw %}TEXT{% endraw %}: TEXT verbatim. As in jinja2, no newline is trimmed after
  // the opening tag; the closing tag takes the block rules (`-`, lstrip, trim).
  void lex_raw(size_t open, size_t first, bool strip_after_open) {
    tokens_.resize(first);
    if (strip_after_open) after_close(true, false);
    for (size_t search = pos_;;) {
      const size_t tag = src_.find("{%", search);
      if (tag == std::string::npos) fail(open, "{% raw %} is never closed by {% endraw %}");
      size_t p = tag + 2;
      const char modifier = p < src_.size() ? src_[p] : '\0';
      if (modifier == '-' || modifier == '+') ++p;
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") != 0) {
        search = tag + 2;
        continue;
      }
      p += 6;
      while (p < src_.size() && is_space(src_[p])) ++p;
      const bool dash = src_.compare(p, 3, "-%}") == 0, plus = src_.compare(p, 3, "+%}") == 0;
      if (!dash && !plus && src_.compare(p, 2, "%}") != 0) fail(tag, "{% endraw %} takes nothing after endraw");
      std::string text = src_.substr(pos_, tag - pos_);
      if (modifier == '-') {
        text.erase(std::find_if_not(text.rbegin(), text.rend(), is_space).base(), text.end());
      } else if (modifier != '+') {
        lstrip_block_line(text, pos_);
      }
      push_text(std::move(text), pos_);
      pos_ = p + (dash || plus ? 3 : 2);
      after_close(dash, !plus);
      return;
    }
  }

  void lex_expression_token() {
    const char c = src_[pos_];
    const int line = line_at(pos_);
    if (c == '\'' || c == '"') {
      tokens_.push_back({Token::Type::String, lex_string(c), line});
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      lex_number(line);
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      const size_t start = pos_;
      while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
      tokens_.push_back({Token::Type::Name, src_.substr(start, pos_ - start), line});
    } else {
      static const char* const kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
      for (const char* op : kTwo) {
        if (src_.compare(pos_, 2, op) == 0) {
          tokens_.push_back({Token::Type::Operator, op, line});
          pos_ += 2;
          return;
        }
      }
      if (std::string("+-*/%~<>=()[]{},.:|").find(c) == std::string::npos) {
        fail(pos_, std::string("unexpected character '") + c + "' in an expression");
      }
      tokens_.push_back({Token::Type::Operator, std::string(1, c), line});
      ++pos_;
    }
  }

  void lex_number(int line) {
    const size_t start = pos_;
    bool real = false;
    auto digits = [&] {
      while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
    };
    digits();
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      real = true;
      ++pos_;
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
        real = true;
        pos_ = p;
        digits();
      }
    }
    std::string text = src_.substr(start, pos_ - start);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    tokens_.push_back({real ? Token::Type::Float : Token::Type::Integer, std::move(text), line});
  }

  // A Python string literal's value: the common backslash escapes decoded, any other
  // backslash kept as written (as Python does).
  std::string lex_string(char quote) {
    const size_t open = pos_++;
    std::string out;
    while (pos_ < src_.size() && src_[pos_] != quote) {
      char c = src_[pos_++];
      if (c != '\\' || pos_ >= src_.size()) {
        out += c;
        continue;
      }
      c = src_[pos_++];
      switch (c) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'a': out += '\a'; break;
        case '0': out += '\0'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;  // a line continuation
        case 'x': out += static_cast<char>(hex_escape(2, open)); break;
        case 'u': append_utf8(out, hex_escape(4, open)); break;
        case 'U': append_utf8(out, hex_escape(8, open)); break;
        default:
          out += '\\';
          out += c;
      }
    }
    if (pos_ >= src_.size()) fail(open, "a string is never closed");
    ++pos_;
    return out;
  }

  uint32_t hex_escape(int digits, size_t open) {
    if (pos_ + static_cast<size_t>(digits) > src_.size()) fail(open, "a truncated \\x, \\u or \\U escape");
    uint32_t value = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = src_[pos_++];
      if (!std::isxdigit(static_cast<unsigned char>(c))) fail(open, "a \\x, \\u or \\U escape with a non-hex digit");
      value = value * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (std::tolower(c) - 'a' + 10));
    }
    if (value > 0x10FFFF) fail(open, "a \\U escape past U+10FFFF");
    return value;
  }

  std::string src_;
  const std::string& where_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
  mutable size_t counted_to_ = 0;
  mutable int counted_line_ = 1;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source, const std::string& where) {
  return Lexer(source, where).run();
}

}  // namespace tiergen::io::jinja
