#include "src/tokenizer/json_fields.h"

#include <fstream>
#include <sstream>

#include "tiergen/common/error.h"

namespace tiergen::tokenizer {

Json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TG_CHECK(in.good(), "{}: cannot open file", path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  try {
    return Json::parse(buffer.str());
  } catch (const Json::exception& e) {
    TG_THROW("{}: not valid JSON: {}", path, e.what());
  }
}

const Json& require_field(const Json& object, const std::string& key, const FieldPath& where) {
  TG_CHECK(object.is_object(), "{} must be an object", where.str());
  const auto it = object.find(key);
  TG_CHECK(it != object.end(), "{} is missing", (where / key).str());
  return *it;
}

std::string require_string(const Json& value, const FieldPath& where) {
  TG_CHECK(value.is_string(), "{} must be a string, not {}", where.str(), value.type_name());
  return value.get<std::string>();
}

int64_t require_int(const Json& value, const FieldPath& where) {
  TG_CHECK(value.is_number_integer(), "{} must be an integer, not {}", where.str(), value.type_name());
  return value.get<int64_t>();
}

bool optional_bool(const Json& object, const std::string& key, bool fallback, const FieldPath& where) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  TG_CHECK(it->is_boolean(), "{} must be true or false", (where / key).str());
  return it->get<bool>();
}

std::optional<std::string> optional_string(const Json& object, const std::string& key, const FieldPath& where) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  return require_string(*it, where / key);
}

}  // namespace tiergen::tokenizer
