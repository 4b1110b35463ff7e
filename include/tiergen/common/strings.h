#pragma once
// Small string helpers shared by modules (C++17 has no std::string::ends_with).
#include <string>

namespace tiergen {

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace tiergen
