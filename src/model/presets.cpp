#include "tiergen/model/presets.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tiergen/common/error.h"

namespace tiergen::model {

namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Spec parse_preset(const std::string& name, const std::string& text) {
  Spec spec = spec_from_config(nlohmann::json::parse(text), "preset " + name);
  spec.name = name;
  return spec;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, text] : builtin_preset_texts()) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<Spec> find_preset(const std::string& name_or_hf_id) {
  const std::string wanted = lower(name_or_hf_id);
  for (const auto& [name, text] : builtin_preset_texts()) {
    if (lower(name) == wanted) return parse_preset(name, text);
    const auto config = nlohmann::json::parse(text);
    if (lower(config.value("_name_or_path", "")) == wanted) return parse_preset(name, text);
  }
  return std::nullopt;
}

Spec resolve_spec(const std::string& model) {
  namespace fs = std::filesystem;
  if (fs::is_directory(model)) {
    const fs::path config = fs::path(model) / "config.json";
    TG_CHECK(fs::exists(config), "{}: model directory has no config.json", model);
    Spec spec = spec_from_config_file(config.string());
    spec.name = model;
    return spec;
  }
  if (auto preset = find_preset(model)) return *preset;
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  TG_THROW("--model '{}' is neither a model directory (with config.json) nor a preset; presets: {}", model,
           known);
}

}  // namespace tiergen::model
