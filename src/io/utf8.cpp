// UTF-8 validation for text prompts. Strict (RFC 3629): the tokenizer works on bytes,
// but a prompt file with invalid UTF-8 is almost always in the wrong encoding
// (Latin-1, UTF-16), and saying so at the offending line beats silently generating
// from mojibake.
#include "tiergen/io/prompts.h"

namespace tiergen::io {

namespace {

// The length of the UTF-8 sequence at s[i] (1..4) when it is valid; else 0, with
// `maximal` set to the bytes of its longest valid-looking start (what one U+FFFD
// replaces when decoding with replacement, as Python does).
size_t sequence_at(const unsigned char* s, size_t n, size_t i, size_t* maximal) {
  const unsigned char c = s[i];
  *maximal = 1;
  if (c < 0x80) return 1;
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
    return 0;  // continuation byte without a lead, 0xC0/0xC1, 0xF5..0xFF
  }
  for (size_t k = 1; k < len; ++k) {
    const unsigned char low = k == 1 ? lo : 0x80, high = k == 1 ? hi : 0xBF;
    if (i + k >= n || s[i + k] < low || s[i + k] > high) return 0;
    *maximal = k + 1;
  }
  return len;
}

}  // namespace

int64_t count_characters(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  int64_t characters = 0;
  for (size_t i = 0, maximal = 0; i < bytes.size(); ++characters) {
    const size_t len = sequence_at(s, bytes.size(), i, &maximal);
    i += len > 0 ? len : maximal;
  }
  return characters;
}

bool valid_utf8(std::string_view bytes, size_t* bad_offset) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  for (size_t i = 0, maximal = 0; i < bytes.size();) {
    const size_t len = sequence_at(s, bytes.size(), i, &maximal);
    if (len == 0) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += len;
  }
  return true;
}

}  // namespace tiergen::io
