#pragma once
// Pre-tokenizers cut a normalized section into the pieces that BPE encodes one at a
// time. Pieces are spans of one buffer, so splitting never copies text; steps that
// change text (a prefix space, "▁" for spaces) rebuild the buffer once.
// Supported: ByteLevel (GPT-2 regex, add_prefix_space), Split (regex or literal;
// Isolated, Removed, MergedWithPrevious, MergedWithNext; invert), Metaspace;
// sequences are flattened.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "src/tokenizer/unicode_regex.h"

namespace tiergen::tokenizer {

struct Span {
  uint32_t begin;
  uint32_t end;
};

struct PreTokenized {
  std::string text;
  std::vector<Span> pieces;
};

// Receives the pieces of the last pre-tokenizer of a chain, in order.
using PieceSink = std::function<void(std::string_view piece)>;

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // `first_section`: this text starts the input (no added token before it).
  // `scratch` may be swapped with `in`.
  virtual void apply(PreTokenized& in, PreTokenized& scratch, bool first_section) const = 0;
  // apply(), as the last step of a chain: each piece goes to `sink` as it is found.
  // Splitters override it so that the pieces are never collected (a prompt of 60 MB
  // has millions of them); by default apply() runs and its pieces are handed on.
  virtual void emit(PreTokenized& in, PreTokenized& scratch, bool first_section, const PieceSink& sink) const;
};

enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext };

// Splits each piece at the matches of a regex.
class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<UnicodeRegex> regex, SplitBehavior behavior, bool invert);
  void apply(PreTokenized& in, PreTokenized& scratch, bool first_section) const override;
  void emit(PreTokenized& in, PreTokenized& scratch, bool first_section, const PieceSink& sink) const override;

 private:
  // Calls push(begin, end) for each non-empty piece of `in`, in order.
  template <typename Push>
  void split(const PreTokenized& in, Push&& push) const;

  std::unique_ptr<UnicodeRegex> regex_;
  SplitBehavior behavior_;
  bool invert_;
};

// GPT-2's pre-tokenizer. Bytes are not mapped to characters here: the BPE model of
// a byte-level tokenizer works on raw bytes directly.
class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, const std::string& where);
  void apply(PreTokenized& in, PreTokenized& scratch, bool first_section) const override;
  void emit(PreTokenized& in, PreTokenized& scratch, bool first_section, const PieceSink& sink) const override;

 private:
  void add_prefix_spaces(PreTokenized& in, PreTokenized& scratch) const;
  bool add_prefix_space_;
  std::unique_ptr<SplitPreTokenizer> split_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

// SentencePiece's whitespace handling: spaces become the replacement ("▁"), which
// is also prepended; with `split`, each "▁" starts a new piece.
class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split);
  void apply(PreTokenized& in, PreTokenized& scratch, bool first_section) const override;

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

using PreTokenizers = std::vector<std::unique_ptr<PreTokenizer>>;

// The GPT-2 pattern, which ByteLevel pre-tokenizers apply when use_regex is set.
extern const char* const kGpt2SplitPattern;

}  // namespace tiergen::tokenizer
