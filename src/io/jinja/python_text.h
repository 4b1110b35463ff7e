#pragma once
// UTF-8 strings as Python sees them: sequences of code points, measured, indexed,
// sliced and stripped without a value per character (a template may trim a long
// prompt). Invalid bytes count as one code point each.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tiergen::io::jinja {

// Bytes of the code point starting at s[i] (1 for an invalid or truncated sequence).
size_t code_point_bytes(std::string_view s, size_t i);
// The code point starting at s[i] (the byte itself where the sequence is invalid).
uint32_t decode_code_point(std::string_view s, size_t i);
// Appends the UTF-8 encoding of code point `cp`.
void append_utf8(std::string& out, uint32_t cp);
// Python's len(): the number of code points.
int64_t code_point_count(std::string_view s);
// Byte offsets of the code points' starts, plus s.size() at the end.
std::vector<size_t> code_point_offsets(std::string_view s);
// str.isspace() for one code point (ASCII and Unicode whitespace, as Python).
bool is_python_space(uint32_t cp);
// str.upper(), str.lower(), str.title(), str.capitalize() for ASCII, Latin-1, Latin
// Extended-A, Greek and Cyrillic letters (other scripts are left as they are).
std::string upper_text(std::string_view s);
std::string lower_text(std::string_view s);
std::string title_text(std::string_view s);
std::string capitalize_text(std::string_view s);
// str.strip/lstrip/rstrip: whitespace (chars == nullptr) or the code points of `chars`.
std::string strip_text(std::string_view s, const std::string* chars, bool left, bool right);

}  // namespace tiergen::io::jinja
