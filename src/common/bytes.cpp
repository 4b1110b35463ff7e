#include "tiergen/common/bytes.h"

#include <spdlog/spdlog.h>

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "tiergen/common/error.h"

namespace tiergen {

namespace {

uint64_t unit_multiplier(std::string unit, const std::string& text, const std::string& what) {
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (unit.empty() || unit == "b") return 1;
  const char prefixes[] = {'k', 'm', 'g', 't', 'p'};
  for (int i = 0; i < 5; ++i) {
    if (unit[0] != prefixes[i]) continue;
    const std::string rest = unit.substr(1);
    uint64_t base = (rest == "ib" || rest == "i") ? 1024 : (rest == "b" || rest.empty()) ? 1000 : 0;
    if (base == 0) break;
    // A bare "16G" means GiB to some tools (java -Xmx, free -g) and GB to others
    // (Kubernetes): say which it is here.
    if (rest.empty()) {
      const std::string prefix(1, static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0]))));
      spdlog::warn("{}: '{}' is read as {}B (powers of 1000); write {}iB for powers of 1024", what, text, prefix,
                   prefix);
    }
    uint64_t m = 1;
    for (int k = 0; k <= i; ++k) m *= base;
    return m;
  }
  TG_THROW("{}: cannot parse '{}': unknown unit '{}' (use B, KB, MB, GB, TB or KiB, MiB, GiB, TiB)",
           what, text, unit);
}

}  // namespace

uint64_t parse_bytes(const std::string& text, const std::string& what) {
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  size_t start = i;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  TG_CHECK(i > start, "{}: cannot parse '{}' as a size (examples: 4096, 512MiB, 16GB)", what, text);
  const std::string number = text.substr(start, i - start);
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  TG_CHECK(end && *end == '\0' && std::isfinite(value) && value >= 0,
           "{}: cannot parse '{}' as a size", what, text);
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit = text.substr(i);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.back()))) unit.pop_back();
  const double bytes = value * static_cast<double>(unit_multiplier(unit, text, what));
  TG_CHECK(bytes < 1.8e19, "{}: '{}' is too large", what, text);
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", v, units[u]);
}

}  // namespace tiergen
