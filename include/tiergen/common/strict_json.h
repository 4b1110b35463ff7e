#pragma once
// JSON parsing that notices repeated keys. nlohmann keeps only the last value of a
// repeated key, which would silently hide a safetensors tensor or a request field.
// Linear in the input (nlohmann's callback parser rescans a parent object at the end
// of every child, which is quadratic in a header of many tensors).
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace tiergen {

struct StrictJson {
  nlohmann::json value;                    // the document (a repeated key keeps its last value)
  std::optional<std::string> repeated_key;  // the first key found twice in one object
};

// Throws nlohmann::json::parse_error on invalid JSON, as json::parse does.
StrictJson parse_json_noting_repeated_keys(const char* begin, const char* end);

}  // namespace tiergen
