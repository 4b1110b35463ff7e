// Reads tokenizer_config.json: which special tokens a tokenizer has and whether BOS
// and EOS are added around a sequence.
#include <filesystem>

#include "src/tokenizer/json_fields.h"
#include "src/tokenizer/tokenizer_impl.h"
#include "tiergen/common/error.h"

namespace tiergen::tokenizer {
namespace {

// A token is written as a string, as {"content": ...} (with "__type": "AddedToken")
// or as null.
std::optional<std::string> read_token(const Json& config, const std::string& key, const FieldPath& where) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_object()) return require_string(require_field(*it, "content", where / key), where / key / "content");
  return require_string(*it, where / key);
}

std::optional<bool> read_flag(const Json& config, const std::string& key, const FieldPath& where) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  TG_CHECK(it->is_boolean(), "{} must be true or false", (where / key).str());
  return it->get<bool>();
}

}  // namespace

TokenizerConfig read_tokenizer_config(const std::string& path) {
  TokenizerConfig config;
  if (!std::filesystem::exists(path)) return config;
  config.source = path;
  const Json root = read_json_file(path);
  TG_CHECK(root.is_object(), "{}: expected a JSON object", path);
  const FieldPath top{path, ""};
  config.add_bos_token = read_flag(root, "add_bos_token", top);
  config.add_eos_token = read_flag(root, "add_eos_token", top);
  config.add_prefix_space = read_flag(root, "add_prefix_space", top);
  config.bos_token = read_token(root, "bos_token", top);
  config.eos_token = read_token(root, "eos_token", top);
  config.pad_token = read_token(root, "pad_token", top);
  config.unk_token = read_token(root, "unk_token", top);

  if (const auto it = root.find("added_tokens_decoder"); it != root.end() && !it->is_null()) {
    const FieldPath where = top / "added_tokens_decoder";
    TG_CHECK(it->is_object(), "{} must be an object of id -> token", where.str());
    for (auto entry = it->begin(); entry != it->end(); ++entry) {
      const FieldPath item = where / entry.key();
      AddedToken token;
      try {
        std::size_t used = 0;
        token.id = static_cast<int32_t>(std::stol(entry.key(), &used));
        TG_CHECK(used == entry.key().size(), "bad id");
      } catch (const std::exception&) {
        TG_THROW("{}: key must be a token id", item.str());
      }
      token.content = require_string(require_field(entry.value(), "content", item), item / "content");
      token.special = optional_bool(entry.value(), "special", false, item);
      token.lstrip = optional_bool(entry.value(), "lstrip", false, item);
      token.rstrip = optional_bool(entry.value(), "rstrip", false, item);
      config.added_tokens_decoder.push_back(std::move(token));
    }
  }
  if (const auto it = root.find("additional_special_tokens"); it != root.end() && !it->is_null()) {
    const FieldPath where = top / "additional_special_tokens";
    TG_CHECK(it->is_array(), "{} must be an array", where.str());
    for (std::size_t i = 0; i < it->size(); ++i) {
      const Json& t = (*it)[i];
      config.additional_special_tokens.push_back(
          t.is_object() ? require_string(require_field(t, "content", where[i]), where[i] / "content")
                        : require_string(t, where[i]));
    }
  }
  return config;
}

}  // namespace tiergen::tokenizer
