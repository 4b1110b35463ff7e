#pragma once
// The BPE model: turns one pre-tokenized piece of text into token ids by applying
// the ranked merges, lowest rank first and leftmost first among equal ranks (the
// Hugging Face tokenizers rule). Two symbol alphabets:
//  - byte-level (GPT-2, OPT, LLaMA-3): a piece starts as its bytes;
//  - character-level (SentencePiece-style, LLaMA-2): a piece starts as its
//    characters; a character missing from the vocabulary becomes its <0xNN> byte
//    tokens (byte_fallback) or the unknown token.
// Vocabulary strings are translated to raw bytes at load time, so encoding never
// builds the mapped strings of byte-level vocabularies.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "src/tokenizer/id_tail.h"
#include "src/tokenizer/pair_rank_map.h"
#include "src/tokenizer/word_cache.h"

namespace tiergen::tokenizer {

struct BpeSpec {
  std::vector<std::pair<std::string, int64_t>> vocab;      // spelling in the file -> id
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::optional<std::string> unk_token;
  bool byte_level = false;
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;
  std::string where;  // file name for error messages
};

class BpeModel {
 public:
  explicit BpeModel(const BpeSpec& spec);

  // Appends the ids of `piece` (valid UTF-8 text) to out.
  // Appends the ids of `piece` to `out`, trimming it after each word it encodes.
  void encode(std::string_view piece, IdTail& out) const;

  // Largest id in the vocabulary plus one.
  int64_t id_limit() const { return id_limit_; }
  std::optional<int32_t> unk_id() const { return unk_id_; }

 private:
  void encode_word(std::string_view word, std::vector<int64_t>& out) const;
  void initial_symbols(std::string_view word, std::vector<int32_t>& ids) const;
  void merge(std::vector<int32_t>& ids) const;
  std::optional<int32_t> find_piece(std::string_view bytes) const;
  void check_sentencepiece_chunking(const BpeSpec& spec);

  bool byte_level_;
  bool byte_fallback_;
  bool fuse_unk_;
  bool ignore_merges_;
  // Character-level only: true when no merge can join a symbol ending in a
  // non-"▁" character to one starting with "▁", so text can be split before each
  // "▁" that follows another character without changing the result.
  bool split_at_metaspace_ = false;
  std::optional<int32_t> unk_id_;
  int64_t id_limit_ = 0;
  int32_t byte_ids_[256];  // byte-level: token of each byte; else <0xNN> fallback tokens
  std::vector<std::string> piece_keys_;  // storage for the keys of piece_ids_
  std::unordered_map<std::string_view, int32_t> piece_ids_;  // raw bytes / text -> id
  PairRankMap merges_;
  mutable WordCache cache_;
};

}  // namespace tiergen::tokenizer
