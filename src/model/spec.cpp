#include "tiergen/model/spec.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tiergen/common/error.h"
#include "tiergen/common/json_describe.h"

namespace tiergen::model {

using nlohmann::json;

std::string family_name(Family family) { return family == Family::Opt ? "opt" : "llama"; }

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

int64_t WeightLayer::numel() const {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.numel();
  return n;
}

bool WeightLayer::is_lookup_table(const TensorSpec& tensor) const {
  const auto ends_with = [&](const std::string& suffix) {
    return tensor.name.size() >= suffix.size() &&
           tensor.name.compare(tensor.name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return kind == "embedding" && (ends_with("embed_tokens.weight") || ends_with("embed_positions.weight"));
}

namespace {

void add(std::vector<TensorSpec>& out, const std::string& name, std::vector<int64_t> shape,
         const std::string& source = "") {
  out.push_back(TensorSpec{name, std::move(shape), source.empty() ? name : source});
}

void add_linear(std::vector<TensorSpec>& out, const std::string& prefix, int64_t out_dim,
                int64_t in_dim, bool bias) {
  add(out, prefix + ".weight", {out_dim, in_dim});
  if (bias) add(out, prefix + ".bias", {out_dim});
}

void add_layer_norm(std::vector<TensorSpec>& out, const std::string& prefix, int64_t dim, bool bias) {
  add(out, prefix + ".weight", {dim});
  if (bias) add(out, prefix + ".bias", {dim});
}

std::vector<WeightLayer> opt_layers(const Spec& s) {
  const std::string p = "model.decoder.";
  const int64_t h = s.hidden_size, e = s.word_embed_proj_dim;
  std::vector<WeightLayer> layers;
  WeightLayer embedding{"embedding", {}};
  add(embedding.tensors, p + "embed_tokens.weight", {s.vocab_size, e});
  add(embedding.tensors, p + "embed_positions.weight", {s.max_positions + 2, h});
  if (s.has_projection()) add(embedding.tensors, p + "project_in.weight", {h, e});
  layers.push_back(std::move(embedding));
  for (int64_t i = 0; i < s.num_layers; ++i) {
    WeightLayer layer{"decoder", {}};
    const std::string l = p + "layers." + std::to_string(i) + ".";
    const bool b = s.attention_bias;
    add_linear(layer.tensors, l + "self_attn.q_proj", h, h, b);
    add_linear(layer.tensors, l + "self_attn.k_proj", h, h, b);
    add_linear(layer.tensors, l + "self_attn.v_proj", h, h, b);
    add_linear(layer.tensors, l + "self_attn.out_proj", h, h, b);
    add_layer_norm(layer.tensors, l + "self_attn_layer_norm", h, true);
    add_linear(layer.tensors, l + "fc1", s.intermediate_size, h, s.mlp_bias);
    add_linear(layer.tensors, l + "fc2", h, s.intermediate_size, s.mlp_bias);
    add_layer_norm(layer.tensors, l + "final_layer_norm", h, true);
    layers.push_back(std::move(layer));
  }
  WeightLayer head{"head", {}};
  if (s.pre_layer_norm) add_layer_norm(head.tensors, p + "final_layer_norm", h, true);
  if (s.has_projection()) add(head.tensors, p + "project_out.weight", {e, h});
  add(head.tensors, "lm_head.weight", {s.vocab_size, e},
      s.tie_word_embeddings ? p + "embed_tokens.weight" : "");
  layers.push_back(std::move(head));
  return layers;
}

std::vector<WeightLayer> llama_layers(const Spec& s) {
  const int64_t h = s.hidden_size;
  std::vector<WeightLayer> layers;
  layers.push_back(WeightLayer{"embedding", {}});
  add(layers.back().tensors, "model.embed_tokens.weight", {s.vocab_size, h});
  for (int64_t i = 0; i < s.num_layers; ++i) {
    WeightLayer layer{"decoder", {}};
    const std::string l = "model.layers." + std::to_string(i) + ".";
    add(layer.tensors, l + "input_layernorm.weight", {h});
    add_linear(layer.tensors, l + "self_attn.q_proj", s.num_heads * s.head_dim, h, s.attention_bias);
    add_linear(layer.tensors, l + "self_attn.k_proj", s.kv_dim(), h, s.attention_bias);
    add_linear(layer.tensors, l + "self_attn.v_proj", s.kv_dim(), h, s.attention_bias);
    add_linear(layer.tensors, l + "self_attn.o_proj", h, s.num_heads * s.head_dim, s.attention_bias);
    add(layer.tensors, l + "post_attention_layernorm.weight", {h});
    add_linear(layer.tensors, l + "mlp.gate_proj", s.intermediate_size, h, s.mlp_bias);
    add_linear(layer.tensors, l + "mlp.up_proj", s.intermediate_size, h, s.mlp_bias);
    add_linear(layer.tensors, l + "mlp.down_proj", h, s.intermediate_size, s.mlp_bias);
    layers.push_back(std::move(layer));
  }
  WeightLayer head{"head", {}};
  add(head.tensors, "model.norm.weight", {h});
  add(head.tensors, "lm_head.weight", {s.vocab_size, h},
      s.tie_word_embeddings ? "model.embed_tokens.weight" : "");
  layers.push_back(std::move(head));
  return layers;
}

// Typed field access with errors that name the config and the key.
template <typename T>
T get(const json& c, const std::string& key, const std::string& source) {
  TG_CHECK(c.contains(key) && !c.at(key).is_null(), "{}: config.json has no '{}'", source, key);
  if constexpr (std::is_same_v<T, int64_t>) {
    // nlohmann would truncate a float (or cast one outside int64's range): sizes and
    // ids must be written as integers.
    TG_CHECK(c.at(key).is_number_integer(), "{}: config.json field '{}' has the wrong type: it must be an integer, got {}", source, key,
             describe_json_value(c.at(key)));
  }
  try {
    return c.at(key).get<T>();
  } catch (const json::exception& e) {
    TG_THROW("{}: config.json field '{}' has the wrong type ({})", source, key, c.at(key).type_name());
  }
}

template <typename T>
T get_or(const json& c, const std::string& key, T fallback, const std::string& source) {
  if (!c.contains(key) || c.at(key).is_null()) return fallback;
  return get<T>(c, key, source);
}

void read_special_tokens(Spec& s, const json& c, const std::string& source) {
  s.bos_token_id = get_or<int64_t>(c, "bos_token_id", -1, source);
  s.pad_token_id = get_or<int64_t>(c, "pad_token_id", -1, source);
  if (c.contains("eos_token_id") && c.at("eos_token_id").is_array()) {
    for (const auto& v : c.at("eos_token_id")) {
      TG_CHECK(v.is_number_integer(), "{}: config.json eos_token_id list holds a non-integer", source);
      s.eos_token_ids.push_back(v.get<int64_t>());
    }
  } else if (get_or<int64_t>(c, "eos_token_id", -1, source) >= 0) {
    s.eos_token_ids.push_back(get<int64_t>(c, "eos_token_id", source));
  }
  s.eos_token_id = s.eos_token_ids.empty() ? -1 : s.eos_token_ids.front();
}

// Special ids outside the vocabulary are kept (a checkpoint may work without them) but
// said: an eos there never stops a sequence; a bos there is not what the tokenizer
// adds (its own files decide that), so the config is likely not this model's.
void warn_special_tokens_outside_vocabulary(const Spec& s, const json& c, const std::string& source) {
  for (const int64_t id : s.eos_token_ids) {
    if (id < 0 || id >= s.vocab_size) {
      spdlog::warn("{}: eos_token_id {} is outside the vocabulary of {}: no sequence will stop at it", source, id,
                   s.vocab_size);
    }
  }
  if (c.contains("eos_token_id") && c.at("eos_token_id").is_number_integer() && s.eos_token_ids.empty() &&
      c.at("eos_token_id").get<int64_t>() != -1) {
    spdlog::warn("{}: eos_token_id {} is negative: no sequence stops at an end-of-sequence token", source,
                 c.at("eos_token_id").get<int64_t>());
  }
  if (s.bos_token_id < -1 || s.bos_token_id >= s.vocab_size) {
    spdlog::warn("{}: bos_token_id {} is outside the vocabulary of {}; tiergen adds the bos its tokenizer files name, "
                 "so this config may not be the model's", source, s.bos_token_id, s.vocab_size);
  }
}

void read_opt(Spec& s, const json& c, const std::string& source) {
  s.family = Family::Opt;
  s.hidden_size = get<int64_t>(c, "hidden_size", source);
  s.intermediate_size = get<int64_t>(c, "ffn_dim", source);
  s.num_layers = get<int64_t>(c, "num_hidden_layers", source);
  s.num_heads = get<int64_t>(c, "num_attention_heads", source);
  s.num_kv_heads = s.num_heads;
  s.max_positions = get<int64_t>(c, "max_position_embeddings", source);
  s.word_embed_proj_dim = get_or<int64_t>(c, "word_embed_proj_dim", s.hidden_size, source);
  s.pre_layer_norm = get_or<bool>(c, "do_layer_norm_before", true, source);
  TG_CHECK(!get_or<bool>(c, "_remove_final_layer_norm", false, source),
           "{}: OPT configs with _remove_final_layer_norm are not supported", source);
  s.activation = get_or<std::string>(c, "activation_function", "relu", source);
  s.attention_bias = s.mlp_bias = get_or<bool>(c, "enable_bias", true, source);
  TG_CHECK(get_or<bool>(c, "layer_norm_elementwise_affine", true, source),
           "{}: OPT configs without layer_norm_elementwise_affine are not supported", source);
  s.norm_eps = 1e-5;  // OPT's LayerNorm uses PyTorch's default eps
  s.tie_word_embeddings = get_or<bool>(c, "tie_word_embeddings", true, source);
}

// Rotary parameters: transformers 5 writes them as one "rope_parameters" object
// (rope_type, rope_theta and the scaling fields); older configs have "rope_theta" and
// an optional "rope_scaling" object beside it.
void read_rope(Spec& s, const json& c, const std::string& source) {
  const bool v5 = c.contains("rope_parameters") && c.at("rope_parameters").is_object();
  s.rope_theta = get_or<double>(v5 ? c.at("rope_parameters") : c, "rope_theta", 10000.0,
                                v5 ? source + " rope_parameters" : source);
  const char* key = v5 ? "rope_parameters" : "rope_scaling";
  if (!c.contains(key) || !c.at(key).is_object()) return;
  const json& r = c.at(key);
  const std::string where = source + " " + key;
  const std::string type = get_or<std::string>(r, "rope_type", get_or<std::string>(r, "type", "", where), where);
  if (type == "default") return;  // plain rotary embeddings
  TG_CHECK(type == "llama3", "{}: rope type '{}' is not supported (supported: default, llama3)", where, type);
  s.rope_scaling.type = type;
  s.rope_scaling.factor = get<double>(r, "factor", where);
  s.rope_scaling.low_freq_factor = get_or<double>(r, "low_freq_factor", 1.0, where);
  s.rope_scaling.high_freq_factor = get_or<double>(r, "high_freq_factor", 4.0, where);
  s.rope_scaling.original_max_position_embeddings = get_or<int64_t>(r, "original_max_position_embeddings", 8192, where);
}

void read_llama(Spec& s, const json& c, const std::string& source) {
  s.family = Family::Llama;
  s.hidden_size = get<int64_t>(c, "hidden_size", source);
  s.intermediate_size = get<int64_t>(c, "intermediate_size", source);
  s.num_layers = get<int64_t>(c, "num_hidden_layers", source);
  s.num_heads = get<int64_t>(c, "num_attention_heads", source);
  s.num_kv_heads = get_or<int64_t>(c, "num_key_value_heads", s.num_heads, source);
  s.max_positions = get<int64_t>(c, "max_position_embeddings", source);
  s.word_embed_proj_dim = s.hidden_size;
  s.activation = get_or<std::string>(c, "hidden_act", "silu", source);
  s.norm_eps = get_or<double>(c, "rms_norm_eps", 1e-6, source);
  s.attention_bias = get_or<bool>(c, "attention_bias", false, source);
  s.mlp_bias = get_or<bool>(c, "mlp_bias", false, source);
  s.tie_word_embeddings = get_or<bool>(c, "tie_word_embeddings", false, source);
  if (c.contains("head_dim") && !c.at("head_dim").is_null()) s.head_dim = get<int64_t>(c, "head_dim", source);
  read_rope(s, c, source);
}

// Sizes far beyond any real model would overflow byte counts downstream.
void check_size(int64_t value, int64_t limit, const char* key, const std::string& source) {
  TG_CHECK(value > 0 && value <= limit, "{}: config.json field '{}' = {} must be positive and at most {}", source, key, value, limit);
}

void check_shapes(const Spec& s, const std::string& source) {
  check_size(s.vocab_size, int64_t{1} << 24, "vocab_size", source);
  check_size(s.hidden_size, int64_t{1} << 20, "hidden_size", source);
  check_size(s.intermediate_size, int64_t{1} << 22, s.family == Family::Opt ? "ffn_dim" : "intermediate_size", source);
  check_size(s.num_layers, 4096, "num_hidden_layers", source);
  check_size(s.num_heads, 4096, "num_attention_heads", source);
  check_size(s.num_kv_heads, 4096, "num_key_value_heads", source);
  check_size(s.max_positions, int64_t{1} << 24, "max_position_embeddings", source);
  check_size(s.word_embed_proj_dim, int64_t{1} << 20, "word_embed_proj_dim", source);
  if (s.head_dim != 0) check_size(s.head_dim, 4096, "head_dim", source);
  TG_CHECK(s.vocab_size > 0 && s.hidden_size > 0 && s.intermediate_size > 0 && s.num_layers > 0 &&
               s.num_heads > 0 && s.max_positions > 0 && s.word_embed_proj_dim > 0,
           "{}: config.json sizes must be positive", source);
  if (s.head_dim == 0) {
    TG_CHECK(s.hidden_size % s.num_heads == 0,
             "{}: hidden_size {} is not divisible by num_attention_heads {}", source, s.hidden_size, s.num_heads);
  }
  TG_CHECK(s.num_kv_heads > 0 && s.num_heads % s.num_kv_heads == 0,
           "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", source, s.num_heads,
           s.num_kv_heads);
  TG_CHECK(s.activation == "relu" || s.activation == "gelu" || s.activation == "silu",
           "{}: activation '{}' is not supported (relu, gelu, silu)", source, s.activation);
}

// Values that make every activation NaN or infinite: refused here, naming the field,
// rather than found as garbage tokens.
void check_numerics(const Spec& s, const std::string& source) {
  TG_CHECK(std::isfinite(s.norm_eps) && s.norm_eps >= 0,
           "{}: config.json field 'rms_norm_eps' = {} must be a finite number >= 0", source, s.norm_eps);
  if (s.family != Family::Llama) return;
  TG_CHECK(std::isfinite(s.rope_theta) && s.rope_theta > 0,
           "{}: config.json field 'rope_theta' = {} must be a finite number > 0", source, s.rope_theta);
  if (s.rope_scaling.type.empty()) return;
  const auto& r = s.rope_scaling;
  for (const auto& [key, value] : {std::pair{"factor", r.factor}, std::pair{"low_freq_factor", r.low_freq_factor},
                                   std::pair{"high_freq_factor", r.high_freq_factor}}) {
    TG_CHECK(std::isfinite(value) && value > 0, "{}: config.json rope scaling field '{}' = {} must be a finite "
             "number > 0", source, key, value);
  }
  TG_CHECK(r.original_max_position_embeddings > 0,
           "{}: config.json rope scaling field 'original_max_position_embeddings' = {} must be positive", source,
           r.original_max_position_embeddings);
}

}  // namespace

std::vector<WeightLayer> Spec::weight_layers() const {
  return family == Family::Opt ? opt_layers(*this) : llama_layers(*this);
}

int64_t Spec::total_params() const {
  // A tied head reads the embedding: its parameters are counted once.
  int64_t n = 0;
  for (const auto& l : weight_layers()) {
    for (const auto& t : l.tensors) {
      if (t.source_name == t.name) n += t.numel();
    }
  }
  return n;
}

int64_t Spec::decoder_layer_params() const { return weight_layers().at(1).numel(); }

Spec spec_from_config(const json& c, const std::string& source) {
  TG_CHECK(c.is_object(), "{}: config.json is not a JSON object", source);
  Spec s;
  s.name = source;
  s.hf_id = get_or<std::string>(c, "_name_or_path", "", source);
  std::string arch;
  if (c.contains("architectures") && c.at("architectures").is_array() && !c.at("architectures").empty() &&
      c.at("architectures")[0].is_string()) {
    arch = c.at("architectures")[0].get<std::string>();
  }
  const std::string model_type = get_or<std::string>(c, "model_type", "", source);
  if (arch == "OPTForCausalLM" || (arch.empty() && model_type == "opt")) {
    read_opt(s, c, source);
  } else if (arch == "LlamaForCausalLM" || (arch.empty() && model_type == "llama")) {
    read_llama(s, c, source);
  } else {
    TG_THROW("{}: unsupported model architecture '{}' (model_type '{}'); tiergen runs OPTForCausalLM and "
             "LlamaForCausalLM",
             source, arch, model_type);
  }
  s.vocab_size = get<int64_t>(c, "vocab_size", source);
  // transformers 5 renamed "torch_dtype" to "dtype".
  s.torch_dtype = get_or<std::string>(c, c.contains("torch_dtype") ? "torch_dtype" : "dtype", "float16", source);
  read_special_tokens(s, c, source);
  check_shapes(s, source);
  check_numerics(s, source);
  warn_special_tokens_outside_vocabulary(s, c, source);
  if (s.head_dim == 0) s.head_dim = s.hidden_size / s.num_heads;
  return s;
}

Spec spec_from_config_file(const std::string& path) {
  std::ifstream in(path);
  TG_CHECK(in.good(), "{}: cannot open config file", path);
  json c;
  try {
    c = json::parse(in);
  } catch (const json::parse_error& e) {
    TG_THROW("{}: invalid JSON: {}", path, e.what());
  }
  return spec_from_config(c, path);
}

}  // namespace tiergen::model
