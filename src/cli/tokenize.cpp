// `tiergen tokenize`: checks a tokenizer from the command line and serves scripts.
// Reads one JSON string per line on stdin and prints one JSON array of token ids per
// line; with --decode, reads arrays of ids and prints JSON strings. `-p/--text TEXT`
// (repeatable) takes raw text (with --decode: ids) on the command line instead.
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>

#include "src/cli/command.h"
#include "tiergen/common/error.h"
#include "tiergen/tokenizer/tokenizer.h"

namespace tiergen::cli {
namespace {

struct TokenizeOptions {
  std::string dir;
  std::vector<std::string> texts;  // -p/--text: raw text (or ids with --decode), one line of output each
  bool no_special = false;
  bool decode = false;
};

// --decode --text "1 2 3", "1,2,3" or "[1, 2, 3]": the ids as a JSON array.
nlohmann::json ids_from_text(const std::string& text, const std::string& where) {
  std::string spaced = text;
  for (char& c : spaced) {
    if (c == ',' || c == '[' || c == ']') c = ' ';
  }
  nlohmann::json ids = nlohmann::json::array();
  std::istringstream in(spaced);
  for (std::string word; in >> word;) {
    char* end = nullptr;
    errno = 0;
    const long long id = std::strtoll(word.c_str(), &end, 10);
    TG_CHECK(*end == '\0' && errno == 0, "{}: '{}' is not a token id (give ids as \"1 2 3\" or \"[1, 2, 3]\")",
             where, word);
    ids.push_back(id);
  }
  return ids;
}

nlohmann::json parse_line(const std::string& line, std::size_t number) {
  try {
    return nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    TG_THROW("stdin line {}: not valid JSON: {}", number, e.what());
  }
}

// `where` names the input in errors: "stdin line 3" or "--text 2".
std::string encode_line(const tokenizer::Tokenizer& tok, const nlohmann::json& value, bool add_special,
                        const std::string& where) {
  TG_CHECK(value.is_string(), "{}: expected a JSON string, got {}", where, value.type_name());
  try {
    return nlohmann::json(tok.encode(value.get_ref<const std::string&>(), add_special)).dump();
  } catch (const Error& e) {
    TG_THROW("{}: {}", where, e.what());
  }
}

std::string decode_line(const tokenizer::Tokenizer& tok, const nlohmann::json& value, bool skip_special,
                        const std::string& where) {
  TG_CHECK(value.is_array(), "{}: expected a JSON array of token ids, got {}", where, value.type_name());
  std::vector<int64_t> ids;
  ids.reserve(value.size());
  for (const auto& id : value) {
    TG_CHECK(id.is_number_integer(), "{}: token ids must be integers, got {}", where, id.dump());
    ids.push_back(id.get<int64_t>());
  }
  try {
    return nlohmann::json(tok.decode(ids, skip_special)).dump();
  } catch (const Error& e) {
    TG_THROW("{}: {}", where, e.what());
  }
}

void run_tokenize(const TokenizeOptions& o) {
  const auto tok = tokenizer::Tokenizer::load(o.dir);
  if (!o.texts.empty()) {
    for (std::size_t k = 0; k < o.texts.size(); ++k) {
      const std::string where = fmt::format("--text {}", k + 1);
      const std::string out = o.decode ? decode_line(*tok, ids_from_text(o.texts[k], where), !o.no_special, where)
                                       : encode_line(*tok, nlohmann::json(o.texts[k]), !o.no_special, where);
      std::cout << out << '\n';
    }
    return;
  }
  std::string line;
  for (std::size_t number = 1; std::getline(std::cin, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    TG_CHECK(!line.empty(), "stdin line {}: empty line; expected a JSON {}", number,
             o.decode ? "array of token ids" : "string");
    const nlohmann::json value = parse_line(line, number);
    // --no-special turns off both halves of special-token handling: nothing is
    // added around an encoded text, and decoding shows special tokens as text.
    const std::string where = fmt::format("stdin line {}", number);
    const std::string out = o.decode ? decode_line(*tok, value, !o.no_special, where)
                                     : encode_line(*tok, value, !o.no_special, where);
    std::cout << out << '\n' << std::flush;  // line by line, so scripts can converse
  }
}

void setup_tokenize(CLI::App& app) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize",
      "Encode JSON strings (one per line on stdin) to JSON arrays of token ids, or decode with --decode");
  auto* dir = cmd->add_option("--tokenizer", options->dir,
                              "Directory with tokenizer.json, or vocab.json + merges.txt (and tokenizer_config.json "
                              "if any)");
  cmd->add_option("-m,--model", options->dir, "A model directory, whose tokenizer is used (the same as --tokenizer)")
      ->excludes(dir);
  cmd->add_option("-p,--text", options->texts,
                  "Raw text to encode (repeatable; one id array each) instead of JSON lines on stdin; with --decode, "
                  "token ids (\"1 2 3\" or \"[1, 2, 3]\")")
      ->allow_extra_args(false);  // one value per -p, taken as written (CLI11 would split "[a, b]")
  cmd->add_flag("--no-special", options->no_special,
                "Encode without BOS/EOS; decode with special tokens kept as text");
  cmd->add_flag("--decode", options->decode, "Read arrays of ids and print the decoded JSON strings");
  cmd->callback([options] {
    TG_CHECK(!options->dir.empty(), "tokenize needs --tokenizer DIR or -m MODEL_DIR");
    run_tokenize(*options);
  });
}

}  // namespace

TIERGEN_REGISTER_COMMAND("tokenize", setup_tokenize);

}  // namespace tiergen::cli
