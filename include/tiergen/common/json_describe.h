#pragma once
// A JSON value for an error message. Arrays and objects are described, not dumped:
// dump() recurses once per nesting level, and an input of millions of '[' would
// overflow the stack. Long strings are cut.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>

namespace tiergen {

inline std::string describe_json_value(const nlohmann::json& v) {
  if (v.is_array()) return fmt::format("an array of {} element{}", v.size(), v.size() == 1 ? "" : "s");
  if (v.is_object()) return fmt::format("an object of {} key{}", v.size(), v.size() == 1 ? "" : "s");
  std::string text = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  constexpr size_t kMax = 80;
  if (text.size() > kMax) text = text.substr(0, kMax) + "...";
  return text;
}

}  // namespace tiergen
