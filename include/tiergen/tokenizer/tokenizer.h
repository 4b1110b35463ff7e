#pragma once
// Tokenizers loaded from a model directory's Hugging Face files:
//  - tokenizer.json with a BPE model: byte-level (GPT-2 / OPT style, or LLaMA-3's
//    Split-regex + ByteLevel pre-tokenizer) or SentencePiece-style with byte
//    fallback (LLaMA-2: Prepend/Replace normalizer, ByteFallback/Fuse/Strip decoder);
//  - vocab.json + merges.txt (GPT-2 / OPT byte-level BPE).
// tokenizer_config.json, when present, supplies add_bos_token / add_eos_token, the
// bos/eos/pad/unk tokens and extra special tokens.
//
// Encoding input must be valid UTF-8: encode() throws tiergen::Error naming the byte
// offset of the first invalid byte, and the caller adds the file and line. Callers
// that prefer replacement can pass text through replace_invalid_utf8() (utf8.h).
//
// A Tokenizer is immutable after load(); encode() and decode() may be called from
// several threads at once.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tiergen::tokenizer {

// The last ids of an encoded text, and how many ids the text has in all.
struct TokenTail {
  std::vector<int64_t> ids;
  int64_t total = 0;
};

class Tokenizer {
 public:
  // Loads dir/tokenizer.json (preferred) or dir/vocab.json + dir/merges.txt, plus
  // dir/tokenizer_config.json when present. Throws tiergen::Error naming the file
  // (and the field or line) when a file is missing, malformed or unsupported.
  static std::unique_ptr<Tokenizer> load(const std::string& dir);

  // True when dir has tokenizer.json, or both vocab.json and merges.txt.
  static bool exists_in(const std::string& dir);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text`. Added and special tokens written in the text (e.g. "<s>")
  // are always recognised as such. add_special_tokens adds what the tokenizer adds
  // around a sequence (BOS for LLaMA and OPT, nothing for GPT-2).
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens = true) const;

  // The last `keep` ids of encode(text, add_special_tokens) and the count of all of
  // them, holding at most about 2 x keep ids at any time: a prompt of millions of
  // tokens cut to a model's context, or only counted (keep 0), in little memory.
  TokenTail encode_tail(std::string_view text, bool add_special_tokens, std::size_t keep) const;

  // Text of `ids`. Byte sequences that are not valid UTF-8 (a character cut off at
  // the end, or garbage from a model) become U+FFFD. Out-of-range ids throw.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = true) const;

  // One more than the largest id (model vocabulary and added tokens).
  int64_t vocab_size() const;
  int64_t bos_id() const;  // -1 when absent
  int64_t eos_id() const;  // -1 when absent
  int64_t pad_id() const;  // -1 when absent

  // Conversions between ids and their spelling in the tokenizer files (for byte-level
  // vocabularies that is the mapped spelling, e.g. "Ġthe").
  std::optional<int64_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int64_t id) const;  // throws for an out-of-range id

  // Ids whose tokens are special (BOS, EOS, added tokens marked special, ...).
  bool is_special(int64_t id) const;

  struct Impl;

 private:
  friend class StreamingDecoder;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns generated ids into text as they arrive. push() returns only complete UTF-8
// characters, holding back the bytes of a character split across tokens (byte-level
// BPE and byte-fallback tokens both split multi-byte characters). The concatenation
// of every push() and a final flush() equals tokenizer.decode(all ids).
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = true);

  std::string push(int64_t id);
  // Returns what is still held back (an incomplete character becomes U+FFFD) and
  // starts a new text.
  std::string flush();

 private:
  std::string take(std::size_t count);

  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;     // bytes not yet returned
  std::size_t strip_left_;  // leading strip characters the decoder may still remove
};

}  // namespace tiergen::tokenizer
