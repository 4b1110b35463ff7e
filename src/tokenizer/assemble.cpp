// Puts what the tokenizer files say together into a working Tokenizer::Impl:
// vocabulary tables, added and special tokens, the BOS/EOS template and the
// per-token bytes used by decoding.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "src/tokenizer/byte_level.h"
#include "src/tokenizer/tokenizer_impl.h"
#include "tiergen/common/error.h"

namespace tiergen::tokenizer {
namespace {

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

// The bytes a model token stands for, through the decoder's per-token steps.
std::string token_bytes(const std::string& spelling, const DecoderSpec& decoder) {
  std::string text = spelling;
  for (const DecodeStep& step : decoder.steps) {
    switch (step.kind) {
      case DecodeStep::Kind::kByteLevel: {
        std::string bytes;
        // Characters outside the byte mapping are kept as they are (as the
        // Hugging Face ByteLevel decoder does).
        if (byte_level_to_bytes(text, bytes)) text = std::move(bytes);
        break;
      }
      case DecodeStep::Kind::kReplace: text = replace_all(std::move(text), step.from, step.to); break;
      case DecodeStep::Kind::kByteFallback:
        if (const int b = parse_byte_token(text); b >= 0) text = std::string(1, static_cast<char>(b));
        break;
    }
  }
  return text;
}

void build_vocabulary(const TokenizerFiles& files, const std::vector<AddedToken>& added, Tokenizer::Impl& impl) {
  int64_t limit = impl.model->id_limit();
  for (const auto& token : added) limit = std::max<int64_t>(limit, int64_t{token.id} + 1);
  // Ids index dense tables (spelling, bytes, special). Real vocabularies are dense, a
  // few holes are harmless; an id far beyond the tokens a file defines is a broken file
  // whose tables would take gigabytes.
  const auto defined = static_cast<int64_t>(files.bpe.vocab.size() + added.size());
  const int64_t allowed = std::max<int64_t>(2 * defined, defined + (int64_t{1} << 16));
  TG_CHECK(limit <= allowed, "{}: token id {} is far beyond the {} tokens the files define (ids must stay below {})",
           files.source, limit - 1, defined, allowed);
  impl.spelling.assign(static_cast<std::size_t>(limit), std::string());
  impl.bytes.assign(static_cast<std::size_t>(limit), std::string());
  impl.special.assign(static_cast<std::size_t>(limit), 0);
  impl.ids_by_spelling.reserve(files.bpe.vocab.size() + added.size());
  // A vocabulary that gives one id to two strings (Hugging Face accepts it, and then
  // decodes that id to either) encodes both to the id and decodes it to the first in
  // the file; the warning says so, naming the first such id.
  int64_t shared_ids = 0;
  for (const auto& [token, id] : files.bpe.vocab) {
    impl.ids_by_spelling[token] = static_cast<int32_t>(id);
    if (!impl.spelling[id].empty()) {
      if (++shared_ids == 1) {
        spdlog::warn("{}: the vocabulary gives id {} to both '{}' and '{}' (decoded as the first)", files.source, id,
                     impl.spelling[id], token);
      }
      continue;
    }
    impl.spelling[id] = token;
    impl.bytes[id] = token_bytes(token, files.decoder);
  }
  if (shared_ids > 1) {
    spdlog::warn("{}: {} vocabulary strings in all share an id with an earlier one", files.source, shared_ids);
  }
  for (const auto& token : added) {
    impl.spelling[token.id] = token.content;
    impl.bytes[token.id] = token.content;  // added tokens decode to their text
    impl.ids_by_spelling[token.content] = token.id;
    if (token.special) impl.special[token.id] = 1;
  }
}

// Tokens named in tokenizer_config.json become special added tokens, so that they
// are recognised in text and skipped by decode.
std::vector<AddedToken> collect_added_tokens(const TokenizerFiles& files, const TokenizerConfig& config) {
  std::vector<AddedToken> added = files.added;
  auto find = [&](const std::string& content) -> int64_t {
    for (const auto& t : added) {
      if (t.content == content) return t.id;
    }
    for (const auto& [token, id] : files.bpe.vocab) {
      if (token == content) return id;
    }
    return -1;
  };
  for (const auto& token : config.added_tokens_decoder) {
    if (std::none_of(added.begin(), added.end(), [&](const AddedToken& t) { return t.content == token.content; })) {
      added.push_back(token);
    }
  }
  std::vector<std::string> named = config.additional_special_tokens;
  for (const auto* token : {&config.bos_token, &config.eos_token, &config.unk_token, &config.pad_token}) {
    if (*token) named.push_back(**token);
  }
  for (const auto& content : named) {
    const int64_t id = find(content);
    if (id < 0) {
      spdlog::warn("{}: special token '{}' is not in the vocabulary; ignored", config.source, content);
      continue;
    }
    auto it = std::find_if(added.begin(), added.end(), [&](const AddedToken& t) { return t.content == content; });
    if (it == added.end()) added.push_back(AddedToken{static_cast<int32_t>(id), content, true, false, false});
    else it->special = true;
  }
  return added;
}

int64_t id_of(const Tokenizer::Impl& impl, const std::optional<std::string>& token) {
  if (!token) return -1;
  const auto it = impl.ids_by_spelling.find(*token);
  return it == impl.ids_by_spelling.end() ? -1 : it->second;
}

SpecialTemplate choose_specials(const TokenizerFiles& files, const TokenizerConfig& config,
                                const Tokenizer::Impl& impl) {
  // An explicit add_bos_token / add_eos_token wins over tokenizer.json's template,
  // as transformers' LLaMA tokenizer rebuilds its template from them.
  if (config.add_bos_token || config.add_eos_token) {
    SpecialTemplate t;
    if (config.add_bos_token.value_or(false)) {
      TG_CHECK(impl.bos >= 0, "{}: add_bos_token is true but there is no bos_token in the vocabulary", config.source);
      t.before.push_back(static_cast<int32_t>(impl.bos));
    }
    if (config.add_eos_token.value_or(false)) {
      TG_CHECK(impl.eos >= 0, "{}: add_eos_token is true but there is no eos_token in the vocabulary", config.source);
      t.after.push_back(static_cast<int32_t>(impl.eos));
    }
    return t;
  }
  SpecialTemplate t = files.post_processor.value_or(SpecialTemplate{});
  for (const auto* side : {&t.before, &t.after}) {
    for (int32_t id : *side) {
      TG_CHECK(id >= 0 && static_cast<std::size_t>(id) < impl.spelling.size(),
               "{}: post_processor adds token id {}, which is not in the vocabulary", files.source, id);
    }
  }
  return t;
}

}  // namespace

std::unique_ptr<Tokenizer::Impl> assemble_tokenizer(TokenizerFiles files, const TokenizerConfig& config) {
  auto impl = std::make_unique<Tokenizer::Impl>();
  impl->source = files.source;
  impl->model = std::make_unique<BpeModel>(files.bpe);
  const std::vector<AddedToken> added = collect_added_tokens(files, config);
  for (const auto& token : added) {
    TG_CHECK(token.id >= 0, "{}: added token '{}' has negative id {}", files.source, token.content, token.id);
  }
  build_vocabulary(files, added, *impl);
  for (const auto& token : added) impl->added.add(token);

  impl->bos = id_of(*impl, config.bos_token);
  impl->eos = id_of(*impl, config.eos_token);
  impl->pad = id_of(*impl, config.pad_token);
  if (config.source.empty() && files.gpt2_defaults) {
    // Without tokenizer_config.json, GPT-2's tokenizer uses <|endoftext|> for both.
    impl->bos = impl->eos = id_of(*impl, std::string("<|endoftext|>"));
    if (impl->eos >= 0) {
      impl->special[impl->eos] = 1;
      impl->added.add(AddedToken{static_cast<int32_t>(impl->eos), "<|endoftext|>", true, false, false});
    }
  }
  for (int64_t id : {impl->bos, impl->eos, impl->pad}) {
    if (id >= 0) impl->special[id] = 1;
  }
  impl->specials = choose_specials(files, config, *impl);
  impl->normalizers = std::move(files.normalizers);
  impl->pre_tokenizers = std::move(files.pre_tokenizers);
  impl->decoder = std::move(files.decoder);
  return impl;
}

}  // namespace tiergen::tokenizer
