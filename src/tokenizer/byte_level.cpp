#include "src/tokenizer/byte_level.h"

#include <array>

#include "tiergen/tokenizer/utf8.h"

namespace tiergen::tokenizer {
namespace {

struct ByteTables {
  std::array<char32_t, 256> to_char{};
  std::array<int, 324> to_byte{};  // every mapped code point is below 256 + 68

  ByteTables() {
    to_byte.fill(-1);
    // Printable Latin-1 bytes stand for themselves; the others (controls, space,
    // 0x7F-0xA0, 0xAD) are moved, in order, to U+0100 and up.
    auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); };
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(next++);
      to_char[b] = cp;
      to_byte[cp] = b;
    }
  }
};

const ByteTables& tables() {
  static const ByteTables t;
  return t;
}

}  // namespace

char32_t byte_to_char(unsigned char b) { return tables().to_char[b]; }

int char_to_byte(char32_t cp) {
  const auto& t = tables().to_byte;
  return cp < t.size() ? t[cp] : -1;
}

bool byte_level_to_bytes(std::string_view token, std::string& out) {
  out.clear();
  if (find_invalid_utf8(token) != kValidUtf8) return false;
  std::size_t pos = 0;
  while (pos < token.size()) {
    const int b = char_to_byte(next_code_point(token, pos));
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
  }
  return true;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) append_utf8(out, byte_to_char(b));
  return out;
}

int parse_byte_token(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  const auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
  const int hi = hex(token[3]), lo = hex(token[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace tiergen::tokenizer
