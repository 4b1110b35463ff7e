#include "tiergen/tokenizer/tokenizer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <initializer_list>

#include "src/tokenizer/tokenizer_impl.h"
#include "tiergen/common/error.h"
#include "tiergen/tokenizer/utf8.h"

namespace tiergen::tokenizer {
namespace fs = std::filesystem;

namespace {

std::string strip_text(std::string text, const DecoderSpec& decoder) {
  const std::string& c = decoder.strip_content;
  if (c.empty()) return text;
  std::size_t begin = 0;
  for (std::size_t n = 0; n < decoder.strip_start && text.compare(begin, c.size(), c) == 0; ++n) begin += c.size();
  std::size_t end = text.size();
  for (std::size_t n = 0; n < decoder.strip_stop && end >= begin + c.size() && text.compare(end - c.size(), c.size(), c) == 0;
       ++n) {
    end -= c.size();
  }
  return text.substr(begin, end - begin);
}

}  // namespace

// The pre-tokenizers' buffers, kept between calls to save allocations, but not the
// hundreds of MB a huge prompt grew them to.
template <typename Buffer>
void release_if_large(Buffer& buffer) {
  constexpr std::size_t kLargeBytes = 16u << 20;
  if (buffer.capacity() * sizeof(buffer[0]) > kLargeBytes) Buffer().swap(buffer);
}

void Tokenizer::Impl::encode_text(std::string_view text, bool first_section, IdTail& out) const {
  thread_local PreTokenized work;
  thread_local std::vector<PreTokenized> buffers;
  work.text.assign(text.data(), text.size());
  for (const auto& normalizer : normalizers) normalizer->apply(work.text);
  if (!work.text.empty()) {
    if (pre_tokenizers.empty()) {
      model->encode(work.text, out);
    } else {
      work.pieces.assign(1, Span{0, static_cast<uint32_t>(work.text.size())});
      buffers.resize(2 * pre_tokenizers.size());
      pre_tokenize_from(0, work, first_section, buffers, out);
    }
  }
  release_if_large(work.text);
  release_if_large(work.pieces);
  for (PreTokenized& p : buffers) {
    release_if_large(p.text);
    release_if_large(p.pieces);
  }
}

// Pre-tokenizer `step` and those after it, piece by piece: each piece that one step
// cuts goes through the rest of the chain and into the model before the next piece is
// cut, so a text's pieces are never all held at once. That gives the same pieces as
// running each step over the whole text, because every step acts on each piece alone;
// the one fact that spans pieces, whether a piece starts the input, is passed on: a
// piece starts it when every step before cut it first. (Only where an earlier step
// drops the input's first piece whole, e.g. a Split that removes it, does a Metaspace
// "first" then prepend to nothing, where over the whole text it would prepend to the
// first piece left.)
// `buffers` holds two per step: its scratch, and the one piece handed to the next.
void Tokenizer::Impl::pre_tokenize_from(std::size_t step, PreTokenized& in, bool first_section,
                                        std::vector<PreTokenized>& buffers, IdTail& out) const {
  PreTokenized& scratch = buffers[2 * step];
  if (step + 1 == pre_tokenizers.size()) {
    pre_tokenizers[step]->emit(in, scratch, first_section, [&](std::string_view piece) { model->encode(piece, out); });
    return;
  }
  PreTokenized& one = buffers[2 * step + 1];
  bool first_piece = true;
  pre_tokenizers[step]->emit(in, scratch, first_section, [&](std::string_view piece) {
    one.text.assign(piece.data(), piece.size());
    one.pieces.assign(1, Span{0, static_cast<uint32_t>(piece.size())});
    pre_tokenize_from(step + 1, one, first_section && first_piece, buffers, out);
    first_piece = false;
  });
}

void Tokenizer::Impl::encode_into(std::string_view text, bool add_special_tokens, IdTail& out) const {
  check_utf8(text);
  const auto append = [&out](const auto& ids) {
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.trim_amortised();
  };
  if (add_special_tokens) append(specials.before);
  if (added.empty()) {
    encode_text(text, true, out);
  } else {
    thread_local std::vector<Section> sections;
    added.split(text, sections);
    for (const Section& s : sections) {
      if (s.added_id >= 0) append(std::initializer_list<int64_t>{s.added_id});
      else encode_text(text.substr(s.begin, s.end - s.begin), s.begin == 0, out);
    }
    release_if_large(sections);
  }
  if (add_special_tokens) append(specials.after);
}

void Tokenizer::Impl::append_bytes(int64_t id, bool skip_special_tokens, std::string& out) const {
  TG_CHECK(id >= 0, "token id {} is negative", id);
  // A model's vocabulary is often larger than its tokenizer's (OPT: 50,272 ids, 50,265
  // spelled): an id past the tokenizer's decodes to nothing, as in Hugging Face.
  if (static_cast<std::size_t>(id) >= bytes.size()) return;
  if (skip_special_tokens && special[id]) return;
  out += bytes[id];
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

bool Tokenizer::exists_in(const std::string& dir) {
  const fs::path d(dir);
  return fs::is_regular_file(d / "tokenizer.json") ||
         (fs::is_regular_file(d / "vocab.json") && fs::is_regular_file(d / "merges.txt"));
}

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& dir) {
  const fs::path d(dir);
  TG_CHECK(fs::is_directory(d), "{}: tokenizer directory does not exist", dir);
  const TokenizerConfig config = read_tokenizer_config((d / "tokenizer_config.json").string());
  TokenizerFiles files;
  if (fs::is_regular_file(d / "tokenizer.json")) {
    files = read_tokenizer_json((d / "tokenizer.json").string());
  } else if (fs::is_regular_file(d / "vocab.json") && fs::is_regular_file(d / "merges.txt")) {
    files = read_vocab_and_merges((d / "vocab.json").string(), (d / "merges.txt").string(),
                                  config.add_prefix_space.value_or(false));
  } else {
    TG_THROW("{}: no tokenizer files (need tokenizer.json, or vocab.json and merges.txt)", dir);
  }
  auto impl = assemble_tokenizer(std::move(files), config);
  spdlog::debug("tokenizer: {} ids from {}, bos {}, eos {}, pad {}", impl->spelling.size(), impl->source, impl->bos,
                impl->eos, impl->pad);
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

std::vector<int64_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  IdTail out;
  out.ids.reserve(std::min<std::size_t>(text.size() / 3 + 4, 1u << 20));
  impl_->encode_into(text, add_special_tokens, out);
  return std::move(out.ids);
}

TokenTail Tokenizer::encode_tail(std::string_view text, bool add_special_tokens, std::size_t keep) const {
  IdTail out;
  out.keep = keep;
  impl_->encode_into(text, add_special_tokens, out);
  out.trim(0);
  const int64_t total = out.dropped + static_cast<int64_t>(out.ids.size());
  return {std::move(out.ids), total};
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int64_t id : ids) impl_->append_bytes(id, skip_special_tokens, bytes);
  return strip_text(replace_invalid_utf8(bytes), impl_->decoder);
}

int64_t Tokenizer::vocab_size() const { return static_cast<int64_t>(impl_->spelling.size()); }
int64_t Tokenizer::bos_id() const { return impl_->bos; }
int64_t Tokenizer::eos_id() const { return impl_->eos; }
int64_t Tokenizer::pad_id() const { return impl_->pad; }

std::optional<int64_t> Tokenizer::token_to_id(std::string_view token) const {
  const auto it = impl_->ids_by_spelling.find(std::string(token));
  if (it == impl_->ids_by_spelling.end()) return std::nullopt;
  return it->second;
}

std::string Tokenizer::id_to_token(int64_t id) const {
  TG_CHECK(id >= 0 && id < vocab_size(), "token id {} is outside the vocabulary [0, {})", id, vocab_size());
  return impl_->spelling[id];
}

bool Tokenizer::is_special(int64_t id) const {
  return id >= 0 && id < vocab_size() && impl_->special[id] != 0;
}

}  // namespace tiergen::tokenizer
