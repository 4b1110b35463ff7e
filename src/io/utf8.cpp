// UTF-8 validation for text prompts. Strict (RFC 3629): the tokenizer works on bytes,
// but a prompt file with invalid UTF-8 is almost always in the wrong encoding
// (Latin-1, UTF-16), and saying so at the offending line beats silently generating
// from mojibake.
#include "tiergen/io/prompts.h"

namespace tiergen::io {

bool valid_utf8(std::string_view bytes, size_t* bad_offset) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  auto fail = [&](size_t at) {
    if (bad_offset) *bad_offset = at;
    return false;
  };
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // no overlongs
      if (c == 0xED) hi = 0x9F;  // no UTF-16 surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // no overlongs
      if (c == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
    } else {
      return fail(i);  // continuation byte without a lead, 0xC0/0xC1, 0xF5..0xFF
    }
    if (i + len > n) return fail(i);
    if (s[i + 1] < lo || s[i + 1] > hi) return fail(i);
    for (size_t k = 2; k < len; ++k) {
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return fail(i);
    }
    i += len;
  }
  return true;
}

}  // namespace tiergen::io
