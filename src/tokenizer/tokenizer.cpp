#include "tiergen/tokenizer/tokenizer.h"

#include <spdlog/spdlog.h>

#include <filesystem>

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

void Tokenizer::Impl::encode_text(std::string_view text, bool first_section, std::vector<int64_t>& out) const {
  thread_local PreTokenized work, scratch;
  work.text.assign(text.data(), text.size());
  for (const auto& normalizer : normalizers) normalizer->apply(work.text);
  if (work.text.empty()) return;
  work.pieces.assign(1, Span{0, static_cast<uint32_t>(work.text.size())});
  for (const auto& pre : pre_tokenizers) pre->apply(work, scratch, first_section);
  for (const Span piece : work.pieces) {
    model->encode(std::string_view(work.text.data() + piece.begin, piece.end - piece.begin), out);
  }
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
  check_utf8(text);
  std::vector<int64_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special_tokens) out.insert(out.end(), impl_->specials.before.begin(), impl_->specials.before.end());
  if (impl_->added.empty()) {
    impl_->encode_text(text, true, out);
  } else {
    thread_local std::vector<Section> sections;
    impl_->added.split(text, sections);
    for (const Section& s : sections) {
      if (s.added_id >= 0) out.push_back(s.added_id);
      else impl_->encode_text(text.substr(s.begin, s.end - s.begin), s.begin == 0, out);
    }
  }
  if (add_special_tokens) out.insert(out.end(), impl_->specials.after.begin(), impl_->specials.after.end());
  return out;
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
