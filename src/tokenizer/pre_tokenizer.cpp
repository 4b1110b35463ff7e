#include "src/tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <string_view>

namespace tiergen::tokenizer {

const char* const kGpt2SplitPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

void begin_rebuild(PreTokenized& out, std::size_t reserve) {
  out.text.clear();
  out.text.reserve(reserve);
  out.pieces.clear();
}

void push_piece(std::vector<Span>& pieces, std::size_t begin, std::size_t end) {
  if (end > begin) pieces.push_back({static_cast<uint32_t>(begin), static_cast<uint32_t>(end)});
}

}  // namespace

SplitPreTokenizer::SplitPreTokenizer(std::unique_ptr<UnicodeRegex> regex, SplitBehavior behavior, bool invert)
    : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}

void PreTokenizer::emit(PreTokenized& in, PreTokenized& scratch, bool first_section, const PieceSink& sink) const {
  apply(in, scratch, first_section);
  for (const Span piece : in.pieces) sink(std::string_view(in.text.data() + piece.begin, piece.end - piece.begin));
}

template <typename Push>
void SplitPreTokenizer::split(const PreTokenized& in, Push&& push) const {
  for (const Span piece : in.pieces) {
    const std::string_view text(in.text.data() + piece.begin, piece.end - piece.begin);
    // Alternating gaps and matches; `invert` swaps which of them are the delimiters.
    std::size_t last = 0;
    std::size_t pending_begin = 0;  // start of a piece still growing (merge behaviours)
    const auto push_nonempty = [&](std::size_t begin, std::size_t end) {
      if (end > begin) push(begin, end);
    };
    auto emit_part = [&](std::size_t begin, std::size_t end, bool delimiter) {
      if (end == begin) return;
      const std::size_t b = piece.begin + begin, e = piece.begin + end;
      switch (behavior_) {
        case SplitBehavior::kIsolated: push_nonempty(b, e); break;
        case SplitBehavior::kRemoved:
          if (!delimiter) push_nonempty(b, e);
          break;
        case SplitBehavior::kMergedWithPrevious:
          // A delimiter closes the piece that precedes it.
          if (delimiter) {
            push_nonempty(piece.begin + pending_begin, e);
            pending_begin = end;
          }
          break;
        case SplitBehavior::kMergedWithNext:
          // A delimiter opens a new piece.
          if (delimiter) {
            push_nonempty(piece.begin + pending_begin, b);
            pending_begin = begin;
          }
          break;
      }
    };
    regex_->for_each_match(text, [&](std::size_t begin, std::size_t end) {
      emit_part(last, begin, invert_);
      emit_part(begin, end, !invert_);
      last = end;
    });
    emit_part(last, text.size(), invert_);
    if (behavior_ == SplitBehavior::kMergedWithPrevious || behavior_ == SplitBehavior::kMergedWithNext) {
      push_nonempty(piece.begin + pending_begin, piece.end);
    }
  }
}

void SplitPreTokenizer::apply(PreTokenized& in, PreTokenized& scratch, bool) const {
  scratch.pieces.clear();
  split(in, [&](std::size_t begin, std::size_t end) { push_piece(scratch.pieces, begin, end); });
  std::swap(in.pieces, scratch.pieces);
}

void SplitPreTokenizer::emit(PreTokenized& in, PreTokenized&, bool, const PieceSink& sink) const {
  split(in, [&](std::size_t begin, std::size_t end) { sink(std::string_view(in.text.data() + begin, end - begin)); });
}

ByteLevelPreTokenizer::ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, const std::string& where)
    : add_prefix_space_(add_prefix_space) {
  if (use_regex) {
    split_ = std::make_unique<SplitPreTokenizer>(std::make_unique<UnicodeRegex>(kGpt2SplitPattern, where),
                                                 SplitBehavior::kIsolated, false);
  }
}

void ByteLevelPreTokenizer::add_prefix_spaces(PreTokenized& in, PreTokenized& scratch) const {
  begin_rebuild(scratch, in.text.size() + in.pieces.size());
  for (const Span piece : in.pieces) {
    const std::size_t begin = scratch.text.size();
    if (in.text[piece.begin] != ' ') scratch.text.push_back(' ');
    scratch.text.append(in.text, piece.begin, piece.end - piece.begin);
    push_piece(scratch.pieces, begin, scratch.text.size());
  }
  std::swap(in, scratch);
}

void ByteLevelPreTokenizer::apply(PreTokenized& in, PreTokenized& scratch, bool first_section) const {
  if (add_prefix_space_) add_prefix_spaces(in, scratch);
  if (split_) split_->apply(in, scratch, first_section);
}

void ByteLevelPreTokenizer::emit(PreTokenized& in, PreTokenized& scratch, bool first_section,
                                 const PieceSink& sink) const {
  if (!split_) return PreTokenizer::emit(in, scratch, first_section, sink);
  if (add_prefix_space_) add_prefix_spaces(in, scratch);
  split_->emit(in, scratch, first_section, sink);
}

MetaspacePreTokenizer::MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
    : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}

void MetaspacePreTokenizer::apply(PreTokenized& in, PreTokenized& scratch, bool first_section) const {
  const std::string_view rep = replacement_;
  // At most: every space replaced, and a replacement prepended to every piece.
  const auto spaces = static_cast<std::size_t>(std::count(in.text.begin(), in.text.end(), ' '));
  begin_rebuild(scratch, in.text.size() + spaces * (rep.size() > 1 ? rep.size() - 1 : 0) + in.pieces.size() * rep.size());
  for (std::size_t p = 0; p < in.pieces.size(); ++p) {
    const Span piece = in.pieces[p];
    const std::string_view text(in.text.data() + piece.begin, piece.end - piece.begin);
    std::size_t begin = scratch.text.size();
    const bool prepend = scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && first_section && p == 0);
    if (prepend && text.substr(0, rep.size()) != rep && text[0] != ' ') scratch.text += replacement_;
    for (std::size_t i = 0; i < text.size(); ++i) {
      const bool is_space = text[i] == ' ';
      const bool is_rep = text.compare(i, rep.size(), rep) == 0;
      if (split_ && (is_space || is_rep) && scratch.text.size() > begin) {
        push_piece(scratch.pieces, begin, scratch.text.size());
        begin = scratch.text.size();
      }
      if (is_space) {
        scratch.text += replacement_;
      } else if (is_rep) {
        scratch.text += replacement_;
        i += rep.size() - 1;
      } else {
        scratch.text.push_back(text[i]);
      }
    }
    push_piece(scratch.pieces, begin, scratch.text.size());
  }
  std::swap(in, scratch);
}

}  // namespace tiergen::tokenizer
