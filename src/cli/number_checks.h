#pragma once
// Number checks for command-line values whose refusals read well. CLI11's
// NonNegativeNumber and PositiveNumber print their range up to the largest double
// ("not in range 0.000000 to 1797693134862315708...", 300 digits).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdlib>
#include <string>

namespace tiergen::cli {

// A number >= `lowest` (`strict`: > lowest), else "must be ..., not VALUE".
inline CLI::Validator number_at_least(double lowest, bool strict, const std::string& name) {
  return CLI::Validator(
      [lowest, strict](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') return "must be a number, not '" + text + "'";
        if (strict ? value > lowest : value >= lowest) return {};
        return std::string(strict ? "must be more than " : "must be at least ") + fmt::format("{}", lowest) +
               ", not " + text;
      },
      name);
}

inline CLI::Validator non_negative() { return number_at_least(0, false, "NONNEGATIVE"); }
inline CLI::Validator positive() { return number_at_least(0, true, "POSITIVE"); }

}  // namespace tiergen::cli
