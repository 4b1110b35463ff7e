#pragma once
// Internals of Tokenizer: what the files describe (TokenizerFiles, TokenizerConfig),
// and the assembled encoder/decoder state (Tokenizer::Impl).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/tokenizer/added_tokens.h"
#include "src/tokenizer/bpe_model.h"
#include "src/tokenizer/id_tail.h"
#include "src/tokenizer/normalizer.h"
#include "src/tokenizer/pre_tokenizer.h"
#include "tiergen/tokenizer/tokenizer.h"

namespace tiergen::tokenizer {

// How one token's spelling becomes bytes when decoding; applied in order.
struct DecodeStep {
  enum class Kind { kByteLevel, kReplace, kByteFallback };
  Kind kind;
  std::string from, to;  // kReplace only
};

struct DecoderSpec {
  std::vector<DecodeStep> steps;
  // Removed from the start / end of the whole decoded text (Strip after Fuse, or
  // Metaspace's prefix space): up to strip_start / strip_stop copies of strip_content.
  std::string strip_content = " ";
  std::size_t strip_start = 0;
  std::size_t strip_stop = 0;
};

// Special tokens put around an encoded sequence.
struct SpecialTemplate {
  std::vector<int32_t> before, after;
};

// What tokenizer.json (or vocab.json + merges.txt) describes.
struct TokenizerFiles {
  std::string source;  // file name(s) for messages
  BpeSpec bpe;
  std::vector<AddedToken> added;
  Normalizers normalizers;
  PreTokenizers pre_tokenizers;
  std::optional<SpecialTemplate> post_processor;
  DecoderSpec decoder;
  // vocab.json + merges.txt without tokenizer_config.json: <|endoftext|> is BOS and
  // EOS, as in GPT-2.
  bool gpt2_defaults = false;
};

// What tokenizer_config.json says (all optional).
struct TokenizerConfig {
  std::string source;
  std::optional<bool> add_bos_token, add_eos_token, add_prefix_space;
  std::optional<std::string> bos_token, eos_token, pad_token, unk_token;
  std::vector<AddedToken> added_tokens_decoder;
  std::vector<std::string> additional_special_tokens;
};

TokenizerFiles read_tokenizer_json(const std::string& path);
TokenizerFiles read_vocab_and_merges(const std::string& vocab_path, const std::string& merges_path,
                                     bool add_prefix_space);
// An absent file gives an empty config.
TokenizerConfig read_tokenizer_config(const std::string& path);

struct Tokenizer::Impl {
  std::string source;
  Normalizers normalizers;
  PreTokenizers pre_tokenizers;
  std::unique_ptr<BpeModel> model;
  AddedTokenSplitter added;
  SpecialTemplate specials;  // added when add_special_tokens

  std::vector<std::string> spelling;  // id -> token as spelled in the files
  std::unordered_map<std::string, int32_t> ids_by_spelling;
  std::vector<std::string> bytes;  // id -> decoded bytes
  std::vector<uint8_t> special;    // id -> skipped by decode(skip_special_tokens)
  DecoderSpec decoder;
  int64_t bos = -1, eos = -1, pad = -1;

  void encode_text(std::string_view text, bool first_section, IdTail& out) const;
  void pre_tokenize_from(std::size_t step, PreTokenized& in, bool first_section, std::vector<PreTokenized>& buffers,
                         IdTail& out) const;
  // encode() and encode_tail(): the ids of `text`, of which `out` keeps its last ones.
  void encode_into(std::string_view text, bool add_special_tokens, IdTail& out) const;
  // Appends the bytes of ids (no UTF-8 repair, no strip).
  void append_bytes(int64_t id, bool skip_special_tokens, std::string& out) const;
};

std::unique_ptr<Tokenizer::Impl> assemble_tokenizer(TokenizerFiles files, const TokenizerConfig& config);

}  // namespace tiergen::tokenizer
