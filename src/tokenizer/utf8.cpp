#include "tiergen/tokenizer/utf8.h"

#include "tiergen/common/error.h"

namespace tiergen::tokenizer {
namespace {

enum class Scan { kChar, kInvalid, kTruncated };

// Allowed range of the second byte after lead byte b; the rest are always 80..BF.
// These ranges exclude overlongs, surrogates and code points above U+10FFFF.
void second_byte_range(unsigned char b, unsigned char& lo, unsigned char& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (b == 0xE0) lo = 0xA0;
  if (b == 0xED) hi = 0x9F;
  if (b == 0xF0) lo = 0x90;
  if (b == 0xF4) hi = 0x8F;
}

// Scans one character at p[0..n): returns the bytes it covers. For ill-formed input
// that is the maximal subpart (at least one byte); for a valid prefix cut off by the
// end of input, all remaining bytes.
std::size_t scan_one(const unsigned char* p, std::size_t n, Scan& result) {
  const int len = utf8_sequence_length(p[0]);
  if (len == 1) {
    result = p[0] < 0x80 ? Scan::kChar : Scan::kInvalid;
    return 1;
  }
  unsigned char lo, hi;
  second_byte_range(p[0], lo, hi);
  for (int i = 1; i < len; ++i) {
    if (static_cast<std::size_t>(i) >= n) {
      result = Scan::kTruncated;
      return n;
    }
    const bool ok = i == 1 ? (p[i] >= lo && p[i] <= hi) : (p[i] >= 0x80 && p[i] <= 0xBF);
    if (!ok) {
      result = Scan::kInvalid;
      return static_cast<std::size_t>(i);
    }
  }
  result = Scan::kChar;
  return static_cast<std::size_t>(len);
}

}  // namespace

std::size_t find_invalid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {  // ASCII fast path
      ++i;
      continue;
    }
    Scan result;
    const std::size_t len = scan_one(p + i, n - i, result);
    if (result != Scan::kChar) return i;
    i += len;
  }
  return kValidUtf8;
}

void check_utf8(std::string_view text) {
  const std::size_t bad = find_invalid_utf8(text);
  TG_CHECK(bad == kValidUtf8, "invalid UTF-8 at byte offset {} (byte 0x{:02X}); text must be UTF-8", bad,
           static_cast<unsigned>(static_cast<unsigned char>(text[bad])));
}

std::string replace_invalid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  std::size_t i = 0;
  while (i < n) {
    Scan result;
    const std::size_t len = scan_one(p + i, n - i, result);
    if (result == Scan::kChar) {
      out.append(bytes.data() + i, len);
    } else {
      out.append("\xEF\xBF\xBD");
    }
    i += len;
  }
  return out;
}

std::size_t complete_utf8_prefix(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  // Only the last (up to) 3 bytes can start an incomplete character.
  const std::size_t from = n > 3 ? n - 3 : 0;
  for (std::size_t start = from; start < n; ++start) {
    if ((p[start] & 0xC0) == 0x80) continue;  // continuation byte
    Scan result;
    scan_one(p + start, n - start, result);
    if (result == Scan::kTruncated) return start;
  }
  return n;
}

char32_t next_code_point(std::string_view text, std::size_t& pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + pos;
  const int len = utf8_sequence_length(p[0]);
  char32_t cp;
  switch (len) {
    case 1: cp = p[0]; break;
    case 2: cp = ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu); break;
    case 3: cp = ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu); break;
    default: cp = ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
  }
  pos += static_cast<std::size_t>(len);
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace tiergen::tokenizer
