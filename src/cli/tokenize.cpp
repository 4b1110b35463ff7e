// `tiergen tokenize`: checks a tokenizer from the command line and serves scripts.
// Reads one JSON string per line on stdin and prints one JSON array of token ids per
// line; with --decode, reads arrays of ids and prints JSON strings.
#include <spdlog/spdlog.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "src/cli/command.h"
#include "tiergen/common/error.h"
#include "tiergen/tokenizer/tokenizer.h"

namespace tiergen::cli {
namespace {

struct TokenizeOptions {
  std::string dir;
  bool no_special = false;
  bool decode = false;
};

nlohmann::json parse_line(const std::string& line, std::size_t number) {
  try {
    return nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    TG_THROW("stdin line {}: not valid JSON: {}", number, e.what());
  }
}

std::string encode_line(const tokenizer::Tokenizer& tok, const nlohmann::json& value, bool add_special,
                        std::size_t number) {
  TG_CHECK(value.is_string(), "stdin line {}: expected a JSON string, got {}", number, value.type_name());
  try {
    return nlohmann::json(tok.encode(value.get_ref<const std::string&>(), add_special)).dump();
  } catch (const Error& e) {
    TG_THROW("stdin line {}: {}", number, e.what());
  }
}

std::string decode_line(const tokenizer::Tokenizer& tok, const nlohmann::json& value, bool skip_special,
                        std::size_t number) {
  TG_CHECK(value.is_array(), "stdin line {}: expected a JSON array of token ids, got {}", number, value.type_name());
  std::vector<int64_t> ids;
  ids.reserve(value.size());
  for (const auto& id : value) {
    TG_CHECK(id.is_number_integer(), "stdin line {}: token ids must be integers, got {}", number, id.dump());
    ids.push_back(id.get<int64_t>());
  }
  try {
    return nlohmann::json(tok.decode(ids, skip_special)).dump();
  } catch (const Error& e) {
    TG_THROW("stdin line {}: {}", number, e.what());
  }
}

void run_tokenize(const TokenizeOptions& o) {
  const auto tok = tokenizer::Tokenizer::load(o.dir);
  std::string line;
  for (std::size_t number = 1; std::getline(std::cin, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    TG_CHECK(!line.empty(), "stdin line {}: empty line; expected a JSON {}", number,
             o.decode ? "array of token ids" : "string");
    const nlohmann::json value = parse_line(line, number);
    // --no-special turns off both halves of special-token handling: nothing is
    // added around an encoded text, and decoding shows special tokens as text.
    const std::string out = o.decode ? decode_line(*tok, value, !o.no_special, number)
                                     : encode_line(*tok, value, !o.no_special, number);
    std::cout << out << '\n' << std::flush;  // line by line, so scripts can converse
  }
}

void setup_tokenize(CLI::App& app) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize",
      "Encode JSON strings (one per line on stdin) to JSON arrays of token ids, or decode with --decode");
  cmd->add_option("--tokenizer", options->dir,
                  "Directory with tokenizer.json, or vocab.json + merges.txt (and tokenizer_config.json if any)")
      ->required();
  cmd->add_flag("--no-special", options->no_special,
                "Encode without BOS/EOS; decode with special tokens kept as text");
  cmd->add_flag("--decode", options->decode, "Read arrays of ids and print the decoded JSON strings");
  cmd->callback([options] { run_tokenize(*options); });
}

}  // namespace

TIERGEN_REGISTER_COMMAND("tokenize", setup_tokenize);

}  // namespace tiergen::cli
