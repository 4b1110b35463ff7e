// Reads the GPT-2 / OPT file pair: vocab.json (token -> id) and merges.txt (one
// "left right" merge per line, in rank order, after an optional "#version" line).
#include <fstream>

#include "src/tokenizer/json_fields.h"
#include "src/tokenizer/tokenizer_impl.h"
#include "tiergen/common/error.h"

namespace tiergen::tokenizer {
namespace {

void read_vocab_json(const std::string& path, BpeSpec& bpe) {
  const Json vocab = read_json_file(path);
  TG_CHECK(vocab.is_object(), "{}: expected a JSON object of token -> id", path);
  const FieldPath top{path, ""};
  bpe.vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    bpe.vocab.emplace_back(it.key(), require_int(it.value(), top / it.key()));
  }
}

void read_merges_txt(const std::string& path, BpeSpec& bpe) {
  std::ifstream in(path, std::ios::binary);
  TG_CHECK(in.good(), "{}: cannot open file", path);
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (number == 1 && line.rfind("#version", 0) == 0)) continue;
    const std::size_t space = line.find(' ');
    TG_CHECK(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                 line.find(' ', space + 1) == std::string::npos,
             "{}:{}: expected two tokens separated by one space, got '{}'", path, number, line);
    bpe.merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  TG_CHECK(!in.bad(), "{}: read error", path);
}

}  // namespace

TokenizerFiles read_vocab_and_merges(const std::string& vocab_path, const std::string& merges_path,
                                     bool add_prefix_space) {
  TokenizerFiles files;
  files.source = vocab_path + " + " + merges_path;
  files.bpe.where = files.source;
  files.bpe.byte_level = true;
  files.gpt2_defaults = true;
  read_vocab_json(vocab_path, files.bpe);
  files.bpe.where = merges_path;
  read_merges_txt(merges_path, files.bpe);
  files.pre_tokenizers.push_back(std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, true, vocab_path));
  files.decoder.steps.push_back({DecodeStep::Kind::kByteLevel, {}, {}});
  return files;
}

}  // namespace tiergen::tokenizer
