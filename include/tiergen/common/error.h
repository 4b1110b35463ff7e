#pragma once
// Errors carry their context (file, line, tensor) in the message: every user-facing
// failure is a tiergen::Error thrown with TG_THROW / TG_CHECK and printed by the CLI.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tiergen {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A policy or budget that cannot be met; refused before any work starts.
class InfeasibleError : public Error {
 public:
  using Error::Error;
};

}  // namespace tiergen

#define TG_THROW(...) throw ::tiergen::Error(::fmt::format(__VA_ARGS__))
#define TG_CHECK(cond, ...)  \
  do {                       \
    if (!(cond)) {           \
      TG_THROW(__VA_ARGS__); \
    }                        \
  } while (0)
