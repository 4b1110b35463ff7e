#include "src/io/jinja/python_text.h"

#include <algorithm>

namespace tiergen::io::jinja {

size_t code_point_bytes(std::string_view s, size_t i) {
  const auto lead = static_cast<unsigned char>(s[i]);
  const size_t n = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 1;
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

uint32_t decode_code_point(std::string_view s, size_t i) {
  const size_t n = code_point_bytes(s, i);
  const auto lead = static_cast<unsigned char>(s[i]);
  if (n == 1) return lead;
  uint32_t cp = lead & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

int64_t code_point_count(std::string_view s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size(); i += code_point_bytes(s, i)) ++n;
  return n;
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  for (size_t i = 0; i < s.size(); i += code_point_bytes(s, i)) offsets.push_back(i);
  offsets.push_back(s.size());
  return offsets;
}

bool is_python_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

// The case pairs of the scripts covered: [first upper, last upper] and the distance to
// the lower case; `alternating` ranges pair each even upper with the odd one after it.
struct CaseRange {
  uint32_t first, last, offset;
  bool alternating;
};
constexpr CaseRange kCaseRanges[] = {
    {0x41, 0x5A, 32, false},    {0xC0, 0xD6, 32, false},   {0xD8, 0xDE, 32, false},  // ASCII, Latin-1
    {0x100, 0x137, 1, true},    {0x139, 0x148, 1, true},   {0x14A, 0x177, 1, true},   // Latin Extended-A
    {0x179, 0x17E, 1, true},    {0x391, 0x3A1, 32, false}, {0x3A3, 0x3AB, 32, false},  // Greek
    {0x410, 0x42F, 32, false},  {0x400, 0x40F, 80, false}, {0x460, 0x481, 1, true},   // Cyrillic
    {0x48A, 0x4BF, 1, true},
};

bool in_range(const CaseRange& r, uint32_t upper) {
  return upper >= r.first && upper <= r.last && (!r.alternating || (upper - r.first) % 2 == 0);
}

uint32_t lower_of(uint32_t cp) {
  for (const CaseRange& r : kCaseRanges) {
    if (in_range(r, cp)) return cp + r.offset;
  }
  return cp;
}

uint32_t upper_of(uint32_t cp) {
  for (const CaseRange& r : kCaseRanges) {
    if (cp >= r.offset && in_range(r, cp - r.offset)) return cp - r.offset;
  }
  return cp;
}

bool is_cased(uint32_t cp) { return upper_of(cp) != cp || lower_of(cp) != cp || cp == 0xDF; }

// Each code point through `map` (ß upper-cases to SS, as in Python).
template <typename Map>
std::string map_text(std::string_view s, Map map) {
  std::string out;
  out.reserve(s.size());
  size_t index = 0;
  for (size_t i = 0; i < s.size(); i += code_point_bytes(s, i), ++index) map(out, decode_code_point(s, i), index);
  return out;
}

void append_upper(std::string& out, uint32_t cp) {
  if (cp == 0xDF) {
    out += "SS";
  } else {
    append_utf8(out, upper_of(cp));
  }
}

}  // namespace

std::string upper_text(std::string_view s) {
  return map_text(s, [](std::string& out, uint32_t cp, size_t) { append_upper(out, cp); });
}

std::string lower_text(std::string_view s) {
  return map_text(s, [](std::string& out, uint32_t cp, size_t) { append_utf8(out, lower_of(cp)); });
}

std::string title_text(std::string_view s) {
  bool previous_cased = false;
  return map_text(s, [&](std::string& out, uint32_t cp, size_t) {
    if (previous_cased) {
      append_utf8(out, lower_of(cp));
    } else {
      append_upper(out, cp);
    }
    previous_cased = is_cased(cp);
  });
}

std::string capitalize_text(std::string_view s) {
  return map_text(s, [](std::string& out, uint32_t cp, size_t index) {
    if (index == 0) {
      append_upper(out, cp);
    } else {
      append_utf8(out, lower_of(cp));
    }
  });
}

std::string strip_text(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<uint32_t> set;
  if (chars != nullptr) {
    for (size_t i = 0; i < chars->size(); i += code_point_bytes(*chars, i)) set.push_back(decode_code_point(*chars, i));
  }
  const auto strips = [&](uint32_t cp) {
    return chars == nullptr ? is_python_space(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t begin = 0, end = s.size();
  while (left && begin < end && strips(decode_code_point(s, begin))) begin += code_point_bytes(s, begin);
  while (right && end > begin) {
    size_t start = end - 1;  // back to the start of the last code point
    while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && end - start < 4) --start;
    if (start + code_point_bytes(s, start) != end) start = end - 1;  // an invalid tail byte stands alone
    if (!strips(decode_code_point(s, start))) break;
    end = start;
  }
  return std::string(s.substr(begin, end - begin));
}

}  // namespace tiergen::io::jinja
