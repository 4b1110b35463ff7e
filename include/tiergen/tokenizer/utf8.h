#pragma once
// UTF-8 helpers shared by the tokenizers, the prompt readers and the CLI.
//
// Invalid UTF-8 policy: Tokenizer::encode() refuses invalid UTF-8 and throws a
// tiergen::Error naming the byte offset of the first bad byte (the prompt reader adds
// the file and line). Callers that prefer to keep going can pass the text through
// replace_invalid_utf8() first, which substitutes U+FFFD the same way decoders do.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tiergen::tokenizer {

inline constexpr std::size_t kValidUtf8 = static_cast<std::size_t>(-1);

// Byte offset of the first byte that is not part of a well-formed UTF-8 sequence
// (overlongs, surrogates and code points above U+10FFFF are ill-formed), or kValidUtf8.
std::size_t find_invalid_utf8(std::string_view text);

// Throws tiergen::Error("invalid UTF-8 at byte offset N ...") unless text is valid.
void check_utf8(std::string_view text);

// Replaces each maximal ill-formed subsequence with U+FFFD (the Unicode / WHATWG
// "substitution of maximal subparts" rule, as Rust's from_utf8_lossy and
// JavaScript's TextDecoder do). Valid text comes back unchanged.
std::string replace_invalid_utf8(std::string_view bytes);

// Length of the longest prefix of `bytes` that can be emitted now without splitting
// a character: everything except a trailing sequence that is a valid but incomplete
// start of a character (at most 3 bytes). Ill-formed bytes count as complete (they
// will become U+FFFD).
std::size_t complete_utf8_prefix(std::string_view bytes);

// Decodes the code point starting at text[pos] of valid UTF-8 and advances pos.
char32_t next_code_point(std::string_view text, std::size_t& pos);

// Appends the UTF-8 encoding of cp.
void append_utf8(std::string& out, char32_t cp);

// Number of bytes of the UTF-8 sequence introduced by lead byte b (1 for invalid leads).
inline int utf8_sequence_length(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  if (b >= 0xE0) return b <= 0xEF ? 3 : 1;
  if (b >= 0xC2) return 2;
  return 1;
}

}  // namespace tiergen::tokenizer
