#include "src/tokenizer/unicode_regex.h"

#include <pcre2.h>

#include <memory>

#include "tiergen/common/error.h"

namespace tiergen::tokenizer {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// One match-data block per thread: encode() is const and may run concurrently.
pcre2_match_data* thread_match_data() {
  struct Holder {
    pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(data); }
  };
  thread_local Holder holder;
  return holder.data;
}

}  // namespace

std::string rewrite_whitespace_classes(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out.push_back(pattern[i]);
      continue;
    }
    const char next = pattern[++i];
    if (next == 's') {
      out += "\\p{White_Space}";
    } else if (next == 'S') {
      out += "\\P{White_Space}";
    } else {
      out.push_back('\\');
      out.push_back(next);
    }
  }
  return out;
}

std::string escape_regex_literal(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-/#&~ ").find(c) != std::string_view::npos) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

UnicodeRegex::UnicodeRegex(std::string_view pattern, const std::string& where) : pattern_(pattern) {
  const std::string rewritten = rewrite_whitespace_classes(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(), PCRE2_UTF | PCRE2_UCP,
                        &error, &offset, nullptr);
  TG_CHECK(code_ != nullptr, "{}: invalid regular expression '{}': {} (at offset {})", where, pattern_,
           pcre2_message(error), offset);
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

UnicodeRegex::~UnicodeRegex() { pcre2_code_free(code_); }

bool UnicodeRegex::find(std::string_view text, std::size_t from, std::size_t& begin, std::size_t& end) const {
  pcre2_match_data* data = thread_match_data();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  // Callers validate UTF-8 once per input, so PCRE2 need not re-check each call.
  int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), from, PCRE2_NO_UTF_CHECK, data, nullptr)
                : PCRE2_ERROR_JIT_BADOPTION;
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_JIT_BADOPTION) {
    // The interpreter keeps its backtracking state on the heap, so it copes with
    // inputs whose matches would overflow the JIT's small machine stack.
    rc = pcre2_match(code_, subject, text.size(), from, PCRE2_NO_UTF_CHECK, data, nullptr);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  TG_CHECK(rc > 0, "regular expression '{}' failed on a {}-byte text: {}", pattern_, text.size(), pcre2_message(rc));
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
  begin = ovector[0];
  end = ovector[1];
  return true;
}

}  // namespace tiergen::tokenizer
