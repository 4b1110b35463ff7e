#include "src/cli/flexgen_flags.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>

#include "tiergen/common/error.h"

namespace tiergen::cli {

namespace {

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

const std::vector<std::string> kTrueSpellings = {"true", "yes", "t", "y", "1", "on"};
const std::vector<std::string> kFalseSpellings = {"false", "no", "f", "n", "0", "off"};

}  // namespace

std::vector<std::string> flexgen_bool_spellings() {
  std::vector<std::string> all = kTrueSpellings;
  all.insert(all.end(), kFalseSpellings.begin(), kFalseSpellings.end());
  return all;
}

bool parse_flexgen_bool(const std::string& value, const std::string& flag) {
  const std::string v = lowercase(value);
  if (std::find(kTrueSpellings.begin(), kTrueSpellings.end(), v) != kTrueSpellings.end()) return true;
  if (std::find(kFalseSpellings.begin(), kFalseSpellings.end(), v) != kFalseSpellings.end()) return false;
  TG_THROW("{} {}: expected true or false", flag, value);
}

void add_flexgen_flags(CLI::App* c, EngineFlags& f) {
  c->add_option("--path", f.path, "FlexGen's weights path: _DUMMY_ for dummy weights (as --dummy), or a checkpoint "
                "directory (config.json + safetensors; used as --model)");
  c->add_option("--attn-sparsity", f.attn_sparsity, "FlexGen's sparse attention fraction; only 1 (exact attention) "
                "is supported")->check(CLI::Range(0.0, 1.0));
  c->add_option("--verbose", f.verbose, "Log level as FlexGen's --verbose N: 0 warnings only, 1 or 2 the usual, 3 (or "
                "no N) debug; not given: the usual")->expected(0, 1)->default_str("3")->option_text("[N]");
}

void resolve_flexgen_path(EngineFlags& f) {
  namespace fs = std::filesystem;
  if (f.path == "_DUMMY_") {
    f.dummy = true;
  } else if (!f.path.empty()) {
    TG_CHECK(fs::is_directory(f.path) && fs::exists(fs::path(f.path) / "config.json"),
             "--path {}: not a checkpoint directory (config.json + safetensors). FlexGen's numpy weight cache is not "
             "a format tiergen reads; pass the Hugging Face checkpoint directory, or --path _DUMMY_ for dummy weights",
             f.path);
    if (!f.model.empty() && f.model != f.path) {
      spdlog::info("--path {}: the model is read from there (--model {} only names it)", f.path, f.model);
    }
    f.model = f.path;
  }
  TG_CHECK(!f.model.empty(), "no model: pass -m/--model DIR|PRESET (`tiergen list-presets` lists the presets){}",
           f.dummy ? " to run on dummy weights" : "");
}

void apply_flexgen_verbosity(const EngineFlags& f) {
  if (f.verbose < 0) return;
  spdlog::set_level(f.verbose == 0 ? spdlog::level::warn : f.verbose <= 2 ? spdlog::level::info : spdlog::level::debug);
}

void check_flexgen_attention_sparsity(const EngineFlags& f) {
  TG_CHECK(f.attn_sparsity >= 1.0, "--attn-sparsity {}: FlexGen's sparse (top-k) attention is not supported; tiergen "
           "computes exact attention. Leave it at 1", f.attn_sparsity);
}

RefusedFlag refuse_flag(CLI::App* c, const std::string& name, bool takes_value, std::string why) {
  CLI::Option* o = takes_value ? c->add_option(name)->expected(0, 1) : c->add_flag(name);
  o->group("");  // hidden from --help and from "did you mean"
  return {name, o, std::move(why)};
}

void check_refused_flags(const std::vector<RefusedFlag>& flags) {
  for (const auto& r : flags) {
    TG_CHECK(r.option->count() == 0, "{}: {}", r.name, r.why);
  }
}

}  // namespace tiergen::cli
