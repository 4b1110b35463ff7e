// Reads a Hugging Face tokenizer.json with a BPE model into TokenizerFiles.
#include <spdlog/spdlog.h>

#include "src/tokenizer/json_fields.h"
#include "src/tokenizer/tokenizer_impl.h"
#include "tiergen/common/error.h"

namespace tiergen::tokenizer {
namespace {

std::string type_of(const Json& node, const FieldPath& where) { return require_string(require_field(node, "type", where), where / "type"); }

// {"String": "..."} or {"Regex": "..."} as a regex (literals escaped).
std::unique_ptr<UnicodeRegex> read_pattern(const Json& node, const FieldPath& where) {
  TG_CHECK(node.is_object(), "{} must be an object with 'String' or 'Regex'", where.str());
  if (node.contains("Regex")) {
    return std::make_unique<UnicodeRegex>(require_string(node["Regex"], where / "Regex"), (where / "Regex").str());
  }
  TG_CHECK(node.contains("String"), "{} must have 'String' or 'Regex'", where.str());
  return std::make_unique<UnicodeRegex>(escape_regex_literal(require_string(node["String"], where / "String")),
                                        (where / "String").str());
}

void read_normalizer(const Json& node, const FieldPath& where, Normalizers& out) {
  if (node.is_null()) return;
  const std::string type = type_of(node, where);
  if (type == "Sequence") {
    const Json& list = require_field(node, "normalizers", where);
    TG_CHECK(list.is_array(), "{} must be an array", (where / "normalizers").str());
    for (std::size_t i = 0; i < list.size(); ++i) read_normalizer(list[i], (where / "normalizers")[i], out);
  } else if (type == "Prepend") {
    out.push_back(std::make_unique<PrependNormalizer>(require_string(require_field(node, "prepend", where), where / "prepend")));
  } else if (type == "Replace") {
    const Json& pattern = require_field(node, "pattern", where);
    std::string content = require_string(require_field(node, "content", where), where / "content");
    if (pattern.is_object() && pattern.contains("String")) {
      out.push_back(std::make_unique<ReplaceNormalizer>(require_string(pattern["String"], where / "pattern.String"),
                                                        std::move(content)));
    } else {
      out.push_back(std::make_unique<ReplaceNormalizer>(read_pattern(pattern, where / "pattern"), std::move(content)));
    }
  } else {
    TG_THROW("{}: unsupported normalizer '{}' (supported: Sequence, Prepend, Replace)", where.str(), type);
  }
}

SplitBehavior read_behavior(const Json& node, const FieldPath& where) {
  const std::string behavior = require_string(require_field(node, "behavior", where), where / "behavior");
  if (behavior == "Isolated") return SplitBehavior::kIsolated;
  if (behavior == "Removed") return SplitBehavior::kRemoved;
  if (behavior == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (behavior == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  TG_THROW("{}: unsupported split behavior '{}'", (where / "behavior").str(), behavior);
}

PrependScheme read_prepend_scheme(const Json& node, const FieldPath& where) {
  if (const auto scheme = optional_string(node, "prepend_scheme", where)) {
    if (*scheme == "always") return PrependScheme::kAlways;
    if (*scheme == "first") return PrependScheme::kFirst;
    if (*scheme == "never") return PrependScheme::kNever;
    TG_THROW("{}: unknown prepend_scheme '{}'", (where / "prepend_scheme").str(), *scheme);
  }
  // Files older than prepend_scheme have add_prefix_space.
  return optional_bool(node, "add_prefix_space", true, where) ? PrependScheme::kAlways : PrependScheme::kNever;
}

void read_pre_tokenizer(const Json& node, const FieldPath& where, TokenizerFiles& files) {
  if (node.is_null()) return;
  const std::string type = type_of(node, where);
  if (type == "Sequence") {
    const Json& list = require_field(node, "pretokenizers", where);
    TG_CHECK(list.is_array(), "{} must be an array", (where / "pretokenizers").str());
    for (std::size_t i = 0; i < list.size(); ++i) read_pre_tokenizer(list[i], (where / "pretokenizers")[i], files);
  } else if (type == "ByteLevel") {
    files.bpe.byte_level = true;
    files.pre_tokenizers.push_back(std::make_unique<ByteLevelPreTokenizer>(
        optional_bool(node, "add_prefix_space", true, where), optional_bool(node, "use_regex", true, where), where.str()));
  } else if (type == "Split") {
    files.pre_tokenizers.push_back(std::make_unique<SplitPreTokenizer>(
        read_pattern(require_field(node, "pattern", where), where / "pattern"), read_behavior(node, where),
        optional_bool(node, "invert", false, where)));
  } else if (type == "Metaspace") {
    files.pre_tokenizers.push_back(std::make_unique<MetaspacePreTokenizer>(
        require_string(require_field(node, "replacement", where), where / "replacement"),
        read_prepend_scheme(node, where), optional_bool(node, "split", true, where)));
  } else {
    TG_THROW("{}: unsupported pre-tokenizer '{}' (supported: Sequence, ByteLevel, Split, Metaspace)", where.str(), type);
  }
}

std::vector<int32_t> special_ids(const Json& post, const std::string& name, const FieldPath& where) {
  const FieldPath entry = where / "special_tokens" / name;
  const Json& ids = require_field(require_field(post, "special_tokens", where), name, where / "special_tokens");
  const Json& list = require_field(ids, "ids", entry);
  TG_CHECK(list.is_array(), "{} must be an array", (entry / "ids").str());
  std::vector<int32_t> out;
  for (std::size_t i = 0; i < list.size(); ++i) out.push_back(static_cast<int32_t>(require_int(list[i], (entry / "ids")[i])));
  return out;
}

// The special tokens that TemplateProcessing's "single" template puts around "A".
SpecialTemplate read_template(const Json& post, const FieldPath& where) {
  const Json& single = require_field(post, "single", where);
  TG_CHECK(single.is_array(), "{} must be an array", (where / "single").str());
  SpecialTemplate out;
  bool seen_sequence = false;
  for (std::size_t i = 0; i < single.size(); ++i) {
    const FieldPath item = (where / "single")[i];
    if (single[i].contains("Sequence")) {
      seen_sequence = true;
    } else if (single[i].contains("SpecialToken")) {
      const std::string name = require_string(require_field(single[i]["SpecialToken"], "id", item / "SpecialToken"),
                                              item / "SpecialToken" / "id");
      auto ids = special_ids(post, name, where);
      auto& side = seen_sequence ? out.after : out.before;
      side.insert(side.end(), ids.begin(), ids.end());
    } else {
      TG_THROW("{} must be a Sequence or a SpecialToken", item.str());
    }
  }
  return out;
}

void read_post_processor(const Json& node, const FieldPath& where, std::optional<SpecialTemplate>& out) {
  if (node.is_null()) return;
  const std::string type = type_of(node, where);
  if (type == "TemplateProcessing") {
    out = read_template(node, where);
  } else if (type == "Sequence") {
    const Json& list = require_field(node, "processors", where);
    TG_CHECK(list.is_array(), "{} must be an array", (where / "processors").str());
    for (std::size_t i = 0; i < list.size(); ++i) read_post_processor(list[i], (where / "processors")[i], out);
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    // "cls": ["<s>", 0], "sep": ["</s>", 2]
    const Json& cls = require_field(node, "cls", where);
    const Json& sep = require_field(node, "sep", where);
    TG_CHECK(cls.is_array() && cls.size() == 2 && sep.is_array() && sep.size() == 2,
             "{}: cls and sep must be [token, id] pairs", where.str());
    out = SpecialTemplate{{static_cast<int32_t>(require_int(cls[1], (where / "cls")[1]))},
                          {static_cast<int32_t>(require_int(sep[1], (where / "sep")[1]))}};
  } else if (type != "ByteLevel") {  // ByteLevel only adjusts offsets
    TG_THROW("{}: unsupported post-processor '{}'", where.str(), type);
  }
}

void read_decoder(const Json& node, const FieldPath& where, DecoderSpec& out) {
  if (node.is_null()) return;
  const std::string type = type_of(node, where);
  if (type == "Sequence") {
    const Json& list = require_field(node, "decoders", where);
    TG_CHECK(list.is_array(), "{} must be an array", (where / "decoders").str());
    for (std::size_t i = 0; i < list.size(); ++i) read_decoder(list[i], (where / "decoders")[i], out);
  } else if (type == "ByteLevel") {
    out.steps.push_back({DecodeStep::Kind::kByteLevel, {}, {}});
  } else if (type == "ByteFallback") {
    out.steps.push_back({DecodeStep::Kind::kByteFallback, {}, {}});
  } else if (type == "Fuse") {
    // Tokens are always concatenated.
  } else if (type == "Replace") {
    const Json& pattern = require_field(node, "pattern", where);
    TG_CHECK(pattern.is_object() && pattern.contains("String"), "{}: only String patterns are supported in decoders",
             (where / "pattern").str());
    out.steps.push_back({DecodeStep::Kind::kReplace, require_string(pattern["String"], where / "pattern.String"),
                         require_string(require_field(node, "content", where), where / "content")});
  } else if (type == "Strip") {
    out.strip_content = require_string(require_field(node, "content", where), where / "content");
    out.strip_start = static_cast<std::size_t>(require_int(require_field(node, "start", where), where / "start"));
    out.strip_stop = static_cast<std::size_t>(require_int(require_field(node, "stop", where), where / "stop"));
  } else if (type == "Metaspace") {
    const std::string replacement = require_string(require_field(node, "replacement", where), where / "replacement");
    out.steps.push_back({DecodeStep::Kind::kReplace, replacement, " "});
    out.strip_content = " ";
    out.strip_start = read_prepend_scheme(node, where) == PrependScheme::kNever ? 0 : 1;
  } else {
    TG_THROW("{}: unsupported decoder '{}' (supported: Sequence, ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace)",
             where.str(), type);
  }
}

void read_merges(const Json& merges, const FieldPath& where, BpeSpec& bpe) {
  TG_CHECK(merges.is_array(), "{} must be an array", where.str());
  bpe.merges.reserve(merges.size());
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    if (m.is_array()) {  // tokenizers >= 0.20: ["a", "b"]
      TG_CHECK(m.size() == 2, "{} must have two tokens", where[i].str());
      bpe.merges.emplace_back(require_string(m[0], where[i]), require_string(m[1], where[i]));
      continue;
    }
    const std::string text = require_string(m, where[i]);
    const std::size_t space = text.find(' ');
    TG_CHECK(space != std::string::npos && text.find(' ', space + 1) == std::string::npos,
             "{} must be two tokens separated by one space, not '{}'", where[i].str(), text);
    bpe.merges.emplace_back(text.substr(0, space), text.substr(space + 1));
  }
}

void read_model(const Json& model, const FieldPath& where, BpeSpec& bpe) {
  const std::string type = model.contains("type") ? type_of(model, where) : "BPE";
  TG_CHECK(type == "BPE", "{}: unsupported model '{}' (only BPE)", (where / "type").str(), type);
  const Json& vocab = require_field(model, "vocab", where);
  TG_CHECK(vocab.is_object(), "{} must be an object of token -> id", (where / "vocab").str());
  bpe.vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    bpe.vocab.emplace_back(it.key(), require_int(it.value(), where / "vocab" / it.key()));
  }
  read_merges(require_field(model, "merges", where), where / "merges", bpe);
  bpe.unk_token = optional_string(model, "unk_token", where);
  bpe.byte_fallback = optional_bool(model, "byte_fallback", false, where);
  bpe.fuse_unk = optional_bool(model, "fuse_unk", false, where);
  bpe.ignore_merges = optional_bool(model, "ignore_merges", false, where);
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto value = optional_string(model, affix, where);
    TG_CHECK(!value || value->empty(), "{}: subword affixes are not supported", (where / affix).str());
  }
  if (model.contains("dropout") && model["dropout"].is_number() && model["dropout"].get<double>() > 0) {
    spdlog::warn("{}: BPE dropout is a training option; encoding ignores it", (where / "dropout").str());
  }
}

void read_added_tokens(const Json& list, const FieldPath& where, std::vector<AddedToken>& out) {
  if (list.is_null()) return;
  TG_CHECK(list.is_array(), "{} must be an array", where.str());
  for (std::size_t i = 0; i < list.size(); ++i) {
    const FieldPath item = where[i];
    AddedToken token;
    token.id = static_cast<int32_t>(require_int(require_field(list[i], "id", item), item / "id"));
    token.content = require_string(require_field(list[i], "content", item), item / "content");
    token.special = optional_bool(list[i], "special", false, item);
    token.lstrip = optional_bool(list[i], "lstrip", false, item);
    token.rstrip = optional_bool(list[i], "rstrip", false, item);
    out.push_back(std::move(token));
  }
}

}  // namespace

TokenizerFiles read_tokenizer_json(const std::string& path) {
  const Json root = read_json_file(path);
  TG_CHECK(root.is_object(), "{}: expected a JSON object", path);
  const FieldPath top{path, ""};
  TokenizerFiles files;
  files.source = path;
  files.bpe.where = path;
  auto field = [&](const char* key) -> const Json& {
    static const Json null_value;
    const auto it = root.find(key);
    return it == root.end() ? null_value : *it;
  };
  read_model(require_field(root, "model", top), top / "model", files.bpe);
  read_added_tokens(field("added_tokens"), top / "added_tokens", files.added);
  read_normalizer(field("normalizer"), top / "normalizer", files.normalizers);
  read_pre_tokenizer(field("pre_tokenizer"), top / "pre_tokenizer", files);
  read_post_processor(field("post_processor"), top / "post_processor", files.post_processor);
  read_decoder(field("decoder"), top / "decoder", files.decoder);
  return files;
}

}  // namespace tiergen::tokenizer
