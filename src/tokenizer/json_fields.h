#pragma once
// Typed access to JSON fields with errors that name the file and the field path,
// for the tokenizer files.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace tiergen::tokenizer {

using Json = nlohmann::json;

// Reads and parses a JSON file; throws tiergen::Error naming the file.
Json read_json_file(const std::string& path);

// A field's location, e.g. {"tokenizer.json", "model.vocab"}; renders as
// "tokenizer.json: field 'model.vocab'".
struct FieldPath {
  std::string file;
  std::string path;

  FieldPath operator/(const std::string& key) const { return {file, path.empty() ? key : path + "." + key}; }
  FieldPath operator[](std::size_t index) const { return {file, path + "[" + std::to_string(index) + "]"}; }
  std::string str() const { return file + ": field '" + path + "'"; }
};

const Json& require_field(const Json& object, const std::string& key, const FieldPath& where);
std::string require_string(const Json& value, const FieldPath& where);
int64_t require_int(const Json& value, const FieldPath& where);
// Absent or null gives the fallback.
bool optional_bool(const Json& object, const std::string& key, bool fallback, const FieldPath& where);
std::optional<std::string> optional_string(const Json& object, const std::string& key, const FieldPath& where);

}  // namespace tiergen::tokenizer
