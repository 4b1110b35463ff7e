// Formats through error.h and logs through spdlog: compiles only against a real fmt,
// links only against the one spdlog was built with.
#include <spdlog/spdlog.h>

#include "tiergen/common/error.h"

int main() {
  spdlog::info("{} {}", fmt::format("{:>4}", 7), std::string("probe"));
  try {
    TG_THROW("value {}", 2);
  } catch (const tiergen::Error& e) {
    return std::string(e.what()) == "value 2" ? 0 : 1;
  }
  return 1;
}
